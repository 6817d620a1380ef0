"""Failed fits grouped by message: one group per message up to the numbers it embeds.

A learner that fails for one reason often says so with numbers that vary from fit to fit
(``n_samples_fit = 354`` in one fold, ``353`` in the next). Grouping the raw text would split
one cause into as many groups as folds; here the numbers are masked for grouping and one
real message is kept as the group's example::

    >>> group(["k = 5 > n_samples = 354", "k = 5 > n_samples = 353", "alpha < 0"])
    {'k = 5 > n_samples = 354': {'count': 2, 'variants': 2}, 'alpha < 0': {'count': 1, 'variants': 1}}
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Iterable

# a number standing alone (not part of a name such as float64 or l1_ratio): integers,
# decimals, exponents, and hexadecimal addresses
NUMBER = re.compile(r"(?<![\w])(?:0x[0-9a-fA-F]+|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)(?![\w])")


def normalise(message: str) -> str:
    """``message`` with every standalone number replaced by ``#``."""
    return NUMBER.sub("#", message)


def group(messages: Iterable[str]) -> dict[str, dict]:
    """Messages grouped up to their numbers, the biggest group first (ties: first seen).

    Returns ``{example: {"count": fits, "variants": distinct messages}}``, the example being
    the group's most frequent message (the first seen among equals).
    """
    counts = Counter(str(m) for m in messages)
    groups: dict[str, Counter] = {}
    for message, count in counts.items():
        groups.setdefault(normalise(message), Counter())[message] = count
    out = [(variants.most_common(1)[0][0], sum(variants.values()), len(variants))
           for variants in groups.values()]
    out.sort(key=lambda g: -g[1])
    return {example: {"count": count, "variants": n} for example, count, n in out}

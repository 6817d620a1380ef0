"""A report's JSON written piece by piece: its big float arrays a slab at a time.

    write(value, stream)        # the text of json.dumps(value), value's ndarrays as lists

``cvflow report --json`` of a 10^6-fit cube holds 10^6 per-fold scores: ``json.dumps`` of the
whole report builds a million Python floats, a million strings and the 23 MB text at once
(about 0.15 GB at the report's peak). Written a slab of :data:`SLAB` numbers at a time, the
same text costs a few hundred kB.

An array written more than once (the seed estimators of a cube with pair splits report the
same inner scores twice, the same K-fold scores by repeat twice: a quarter of the 31 MB text
of the 10^6-fit cube's) is turned into text once, its text kept until its last use.

The numbers of an array are turned into text by ``orjson`` (shortest round-trip digits, as
``float.__repr__``, ~25x faster), then put in Python's spelling: ``", "`` between items and the
exponent form ``repr`` gives a number under 1e-4 (orjson writes ``1e-5`` as ``0.00001`` and
``1.5e-6`` as ``1.5e-6`` where repr writes ``1e-05`` and ``1.5e-06``; every other number is
spelt alike). DESIGN CHOICE: the report's JSON of a 10^6-fit cube holds 1.2 million numbers;
``float.__repr__`` of each took 0.5-0.75 s of the report's CPU, after the pass (issue 40).
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import IO

import numpy as np
import orjson

# numbers a piece: 16k floats are ~0.4 MB of text (and of Python floats) at a time
SLAB = 2**14


# arrays at least this big are looked for among those written before (a key each)
SHARED_SIZE = 1024


def write(value, stream: IO[str]) -> None:
    """``json.dumps(value)`` written to ``stream`` (the same text), where ``value`` is JSON-ready
    but for the numpy arrays among its dict values: each written as its ``tolist()``, a
    non-finite number as ``null`` (strict JSON has neither NaN nor infinity)."""
    keys: dict = {}                       # id of an array -> its key (the arrays live meanwhile)
    uses: dict = {}
    for array in _arrays(value):
        if id(array) not in keys:
            keys[id(array)] = _key(array)
        if keys[id(array)] is not None:
            uses[keys[id(array)]] = uses.get(keys[id(array)], 0) + 1
    texts = _Texts(keys, {key: n for key, n in uses.items() if n > 1})
    for piece in _pieces(value, texts):
        stream.write(piece)


def _arrays(value):
    if isinstance(value, np.ndarray):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _arrays(item)


def _key(values: np.ndarray):
    """An array's identity by value (dtype, shape and bytes: -0.0 and 0.0 differ, as their
    texts do), None for a small or non-numeric one."""
    if values.size < SHARED_SIZE or values.dtype == object:
        return None
    digest = hashlib.blake2b(np.ascontiguousarray(values).view(np.uint8), digest_size=16)
    return values.dtype.str, values.shape, digest.digest()


class _Texts:
    """The texts of the arrays written more than once (``keys``: id of an array -> its key,
    ``uses``: key -> how many times), each kept from its first writing to its last."""

    def __init__(self, keys: dict, uses: dict):
        self.keys, self.uses, self.texts = keys, uses, {}

    def pieces(self, values: np.ndarray):
        key = self.keys.get(id(values))
        if key not in self.uses:
            yield from _array(values)
            return
        if key not in self.texts:
            self.texts[key] = list(_array(values))
        yield from self.texts[key]
        self.uses[key] -= 1
        if not self.uses[key]:
            del self.uses[key], self.texts[key]


def _pieces(value, texts: _Texts):
    if isinstance(value, np.ndarray):
        yield from texts.pieces(value)
    elif isinstance(value, dict) and any(isinstance(v, (dict, np.ndarray)) for v in value.values()):
        yield "{"
        for i, (key, item) in enumerate(value.items()):
            yield f"{', ' if i else ''}{json.dumps(str(key))}: "
            yield from _pieces(item, texts)
        yield "}"
    else:
        yield json.dumps(value)


def _array(values: np.ndarray):
    if values.ndim == 0 or values.dtype == object:
        yield json.dumps(_listed(values))
        return
    yield "["
    rows = max(1, SLAB // max(1, values[0].size if len(values) else 1))
    for q in range(0, len(values), rows):
        yield (", " if q else "") + _text(values[q:q + rows])[1:-1]
    yield "]"


def _text(values: np.ndarray) -> str:
    """``json.dumps(_listed(values))`` for an array of numbers or booleans."""
    if values.dtype.kind == "f":
        values = np.ascontiguousarray(values, dtype=np.float64)
    elif values.dtype.kind in "iu":
        values = np.ascontiguousarray(values, dtype=np.int64 if values.dtype.kind == "i" else np.uint64)
    elif values.dtype.kind == "b":
        values = np.ascontiguousarray(values, dtype=np.bool_)
    else:
        return json.dumps(_listed(values))
    text = orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)
    if values.dtype.kind == "f" and _has_small(values):
        text = _SMALL.sub(_python_spelling, text)
    return text.replace(b",", b", ").decode("ascii")


def _has_small(values: np.ndarray) -> bool:
    magnitudes = np.abs(values)
    return bool(((magnitudes < 1e-4) & (magnitudes > 0)).any())


# a number under 1e-4 as orjson spells it: 0.0000 and digits, or an exponent under 0; a match
# starts a number (not after a digit, a point, a sign or an exponent's e)
_SMALL = re.compile(rb"(?<![\d.e+-])-?(?:0\.0000\d+|\d(?:\.\d+)?e-\d+)")


def _python_spelling(match: re.Match) -> bytes:
    return repr(float(match.group())).encode("ascii")


def _listed(values: np.ndarray):
    if values.dtype.kind == "f":
        finite = np.isfinite(values)
        if not finite.all():
            return np.where(finite, values, None).tolist()
    return values.tolist()

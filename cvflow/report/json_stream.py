"""A report's JSON written piece by piece: its big float arrays a slab at a time.

    write(value, stream)        # the text of json.dumps(value), value's ndarrays as lists

``cvflow report --json`` of a 10^6-fit cube holds 10^6 per-fold scores: ``json.dumps`` of the
whole report builds a million Python floats, a million strings and the 23 MB text at once
(about 0.15 GB at the report's peak). Written a slab of :data:`SLAB` numbers at a time, the
same text costs a few hundred kB.
"""
from __future__ import annotations

import json
from typing import IO

import numpy as np

# numbers a piece: 16k floats are ~0.4 MB of text (and of Python floats) at a time
SLAB = 2**14


def write(value, stream: IO[str]) -> None:
    """``json.dumps(value)`` written to ``stream`` (the same text), where ``value`` is JSON-ready
    but for the numpy arrays among its dict values: each written as its ``tolist()``, a
    non-finite number as ``null`` (strict JSON has neither NaN nor infinity)."""
    for piece in _pieces(value):
        stream.write(piece)


def _pieces(value):
    if isinstance(value, np.ndarray):
        yield from _array(value)
    elif isinstance(value, dict) and any(isinstance(v, (dict, np.ndarray)) for v in value.values()):
        yield "{"
        for i, (key, item) in enumerate(value.items()):
            yield f"{', ' if i else ''}{json.dumps(str(key))}: "
            yield from _pieces(item)
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
        yield (", " if q else "") + json.dumps(_listed(values[q:q + rows]))[1:-1]
    yield "]"


def _listed(values: np.ndarray):
    if values.dtype.kind == "f":
        finite = np.isfinite(values)
        if not finite.all():
            return np.where(finite, values, None).tolist()
    return values.tolist()

"""cvflow.report.json_stream writes the text json.dumps writes (the reference: json.dumps of the
arrays' lists, non-finite numbers as None), a slab at a time."""
from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest

from cvflow.report import json_stream


def _reference(value):
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray):
        return [_reference(v) for v in value] if value.ndim else _reference(value.item())
    if isinstance(value, dict):
        return {k: _reference(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _written(value) -> str:
    out = io.StringIO()
    json_stream.write(value, out)
    return out.getvalue()


@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (40_000,), (3, 0), (0, 4), (1000, 20, 5),
                                   (5, 1), (2, 3, 4, 5)])
def test_arrays_of_any_shape_are_written_as_json_dumps_writes_their_lists(shape, monkeypatch):
    monkeypatch.setattr(json_stream, "SLAB", 97)          # many slabs, uneven
    rng = np.random.default_rng(len(shape))
    values = rng.normal(size=shape) * 10.0 ** rng.integers(-8, 8, size=shape)
    value = {"kfold": {"scores": {"dims": ["param", "repeat"], "values": values},
                       "selected": 3, "note": "é \"quoted\"", "empty": {}},
             "skipped": {"reason": "x"}, "list": [1, 2.5, None]}
    text = _written(value)
    assert text == json.dumps(_reference(value))
    assert json.loads(text)["kfold"]["scores"]["values"] == values.tolist()


def test_non_finite_numbers_are_null_and_integers_and_float32_as_their_lists(monkeypatch):
    monkeypatch.setattr(json_stream, "SLAB", 5)
    values = np.arange(30, dtype=np.float64).reshape(6, 5)
    values[1, 2], values[4, 0], values[5, 4] = np.nan, np.inf, -np.inf
    value = {"a": values, "b": np.arange(12).reshape(3, 4), "c": values.astype(np.float32),
             "d": np.float64(2.5).reshape(())}
    assert _written(value) == json.dumps(_reference(value))
    assert json.loads(_written(value))["a"][1][2] is None


def test_an_array_written_twice_is_the_same_text_as_json_dumps_writes(monkeypatch):
    monkeypatch.setattr(json_stream, "SLAB", 7)
    monkeypatch.setattr(json_stream, "SHARED_SIZE", 4)
    rng = np.random.default_rng(3)
    a = rng.normal(size=(5, 6))
    zero, negative = np.zeros(8), -np.zeros(8)             # equal values, different texts
    value = {"x": {"a": a, "again": a.copy(), "zero": zero}, "y": {"a": a, "neg": negative},
             "z": {"t": a.T, "f32": a.astype(np.float32), "a": a.copy(), "zero": zero.copy()}}
    assert _written(value) == json.dumps(_reference(value))


def test_numbers_of_every_magnitude_are_spelt_as_float_repr_spells_them(monkeypatch):
    # orjson spells a number under 1e-4 otherwise (0.00001, 1.5e-6): json_stream respells it
    monkeypatch.setattr(json_stream, "SLAB", 1000)
    rng = np.random.default_rng(11)
    values = np.concatenate([
        rng.normal(size=20_000) * 10.0 ** rng.uniform(-320, 308, size=20_000),
        10.0 ** np.arange(-323, 309), 2.0 ** np.arange(-1074, 1024, 7),
        [1e-4, 9.99e-5, 1.0001e-4, 1e-5, 1.5e-6, 5e-324, -5e-324, 0.0, -0.0, 1e16, 9.999e15,
         0.00012, 10.00001, -0.000099, 1.7976931348623157e308, np.nan, np.inf, -np.inf]])
    value = {"values": values, "grid": values[:20_000].reshape(200, 100).T}
    assert _written(value) == json.dumps(_reference(value))


@pytest.mark.parametrize("dtype", ["<f8", ">f8", "<f4", ">f2", "int8", ">i4", "uint16", "<u8", "bool"])
def test_every_numeric_dtype_and_byte_order_is_written_as_its_list(dtype, monkeypatch):
    monkeypatch.setattr(json_stream, "SLAB", 13)
    rng = np.random.default_rng(5)
    kind = np.dtype(dtype).kind
    if kind == "f":
        values = (rng.normal(size=(17, 9)) * 1e-3).astype(dtype)
    elif kind == "b":
        values = rng.random(size=(17, 9)) < 0.5
    else:
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, size=(17, 9), endpoint=True, dtype=np.dtype(dtype).newbyteorder("="))
        values = values.astype(dtype)
    value = {"a": values, "strided": values[::2, ::3]}
    assert _written(value) == json.dumps(_reference(value))

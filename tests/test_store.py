"""The store: schema round trip, fill values, chunk-aligned writes, refusing non-stores."""
from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from cvflow import store
from cvflow.data import Data
from cvflow.errors import StoreError
from cvflow.learners import Param
from cvflow.testing import simple_design


def _template(n=12, n_params=5):
    rng = np.random.default_rng(0)
    data = Data(X=rng.normal(size=(n, 3)), y=rng.normal(size=n), feature_names=["a", "b", "c"],
                is_test=np.zeros(n, bool))
    design = simple_design(n, 4, pairs=True)
    params = [Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": float(a)})
              for a in range(n_params)]
    attrs = {"task": "regression", "loss": "squared", "classes": "null", "workflow": "{}",
             "workflow_hash": "h", "data_hash": "d"}
    return store.cube_template(data, design, params, attrs=attrs, chunks=(2, 4)), design


def test_round_trip_and_fill_values(tmp_path):
    template, design = _template()
    path = tmp_path / "c.zarr"
    store.create(path, template)
    cube = store.open_cube(path)
    assert cube.sizes["param"] == 5 and cube.sizes["split"] == design.n_splits == 11
    assert np.isnan(cube["pred"].values).all() and not cube["done"].values.any()
    np.testing.assert_array_equal(cube["train"].values, design.train)
    np.testing.assert_array_equal(cube["pair_split"].values, design.pair_split)
    assert cube["pred"].chunks[:2] == ((2, 2, 1), (4, 4, 3))
    assert list(cube["split_kind"].values[:2]) == ["full", "fold"]
    assert cube.attrs["workflow_hash"] == "h"
    # plain xarray opens it as well
    assert "pred" in xr.open_zarr(path, consolidated=False)


def test_block_writes_are_chunk_aligned_and_idempotent(tmp_path):
    template, _ = _template()
    path = tmp_path / "c.zarr"
    store.create(path, template)
    pred = np.arange(2 * 4 * 12, dtype=float).reshape(2, 4, 12)
    block = store.BlockResult(slice(2, 4), slice(4, 8), pred, np.zeros((2, 4), bool),
                              np.full((2, 4), "", dtype=object), np.ones((2, 4)))
    store.write_block(path, block)
    store.write_block(path, block)                       # a retried task is harmless
    cube = store.open_cube(path)
    np.testing.assert_array_equal(cube["pred"].values[2:4, 4:8], pred)
    assert cube["done"].values.sum() == 8 and cube["done"].values[2:4, 4:8].all()
    assert np.isnan(cube["pred"].values[:2]).all()
    last = store.BlockResult(slice(4, 5), slice(8, 11), np.zeros((1, 3, 12)), np.zeros((1, 3), bool),
                             np.full((1, 3), "", dtype=object), np.ones((1, 3)))
    store.write_block(path, last)                        # the ragged last chunk is aligned too
    bad = store.BlockResult(slice(1, 3), slice(0, 4), np.zeros((2, 4, 12)), np.zeros((2, 4), bool),
                            np.full((2, 4), "", dtype=object), np.ones((2, 4)))
    with pytest.raises(ValueError, match="not aligned with chunks of 2"):
        store.write_block(path, bad)


def test_not_a_store(tmp_path):
    (tmp_path / "x").mkdir()
    assert not store.is_store(tmp_path / "x")
    with pytest.raises(StoreError, match="exists but is not a cvflow store"):
        store.open_cube(tmp_path / "x")
    with pytest.raises(StoreError, match="does not exist"):
        store.open_cube(tmp_path / "nope")

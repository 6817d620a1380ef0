"""The store: schema round trip, fill values, chunk-aligned writes, refusing non-stores."""
from __future__ import annotations

import json
import warnings

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

from cvflow.store import creation, cube as store, schema, writes
from cvflow.store.group import LAZY_VARIABLES, is_store
from cvflow.workflow.data import Data
from cvflow.errors import StoreError
from cvflow.fitting.block import BlockResult
from cvflow.workflow.params import Param
from cvflow.testing import simple_design


def _template(n=12, n_params=5, *, dtype="float64", chunks=(2, 4), mixed=False):
    rng = np.random.default_rng(0)
    data = Data(X=rng.normal(size=(n, 3)), y=rng.normal(size=n), feature_names=["a", "b", "c"],
                is_test=np.arange(n) >= n - 2)
    design = simple_design(n, 4, pairs=True)
    params = [Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": float(a)})
              for a in range(n_params)]
    if mixed:       # a second learner: string and missing hyperparameters
        params += [Param("svr", "sklearn.svm.SVR", hyper={"kernel": k, "C": 1.0})
                   for k in ("rbf", "linear")]
    attrs = {"task": "regression", "loss": "squared", "classes": "null", "workflow": "{}",
             "workflow_hash": "h", "data_hash": "d"}
    return creation.cube_template(data, design, params, attrs=attrs, chunks=chunks,
                                  dtype=dtype), design


def test_round_trip_and_fill_values(tmp_path):
    template, design = _template()
    path = tmp_path / "c.zarr"
    creation.create(path, template)
    cube = store.open_cube(path)
    assert cube.sizes["param"] == 5 and cube.sizes["split"] == design.n_splits == 11
    assert np.isnan(cube["pred"].values).all() and not cube["done"].values.any()
    np.testing.assert_array_equal(cube["train"].values, design.train)
    np.testing.assert_array_equal(cube["pair_split"].values, design.pair_split)
    assert cube["pred"].chunks[:2] == ((2, 2, 1), (4, 4, 3))
    assert list(cube["split_kind"].values[:2]) == ["full", "fold"]
    assert cube.attrs["workflow_hash"] == "h"
    # plain xarray opens it as well, silently (consolidated metadata)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "pred" in xr.open_zarr(path)


def test_block_writes_are_chunk_aligned_and_idempotent(tmp_path):
    template, _ = _template()
    path = tmp_path / "c.zarr"
    creation.create(path, template)
    pred = np.arange(2 * 4 * 12, dtype=float).reshape(2, 4, 12)
    block = BlockResult(slice(2, 4), slice(4, 8), pred, np.zeros((2, 4), bool),
                              np.full((2, 4), "", dtype=object), np.ones((2, 4)))
    writes.write_block(path, block)
    writes.write_block(path, block)                       # a retried task is harmless
    cube = store.open_cube(path)
    np.testing.assert_array_equal(cube["pred"].values[2:4, 4:8], pred)
    assert cube["done"].values.sum() == 8 and cube["done"].values[2:4, 4:8].all()
    assert np.isnan(cube["pred"].values[:2]).all()
    last = BlockResult(slice(4, 5), slice(8, 11), np.zeros((1, 3, 12)), np.zeros((1, 3), bool),
                             np.full((1, 3), "", dtype=object), np.ones((1, 3)))
    writes.write_block(path, last)                        # the ragged last chunk is aligned too
    bad = BlockResult(slice(1, 3), slice(0, 4), np.zeros((2, 4, 12)), np.zeros((2, 4), bool),
                            np.full((2, 4), "", dtype=object), np.ones((2, 4)))
    with pytest.raises(ValueError, match="not aligned with chunks of 2"):
        writes.write_block(path, bad)


def test_not_a_store(tmp_path):
    (tmp_path / "x").mkdir()
    assert not is_store(tmp_path / "x")
    with pytest.raises(StoreError, match="exists but is not a cvflow store"):
        store.open_cube(tmp_path / "x")
    with pytest.raises(StoreError, match="does not exist"):
        store.open_cube(tmp_path / "nope")


def _consolidated_is_current(path):
    """Plain open_zarr (consolidated metadata) is silent and sees what the arrays hold."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = xr.open_zarr(path).load()
    xr.testing.assert_identical(plain, xr.open_zarr(path, consolidated=False).load())
    return plain


def test_create_is_xarrays_to_zarr_with_consolidated_metadata(tmp_path):
    template, _ = _template(dtype="float32", mixed=True)
    path = tmp_path / "c.zarr"
    creation.create(path, template)
    plain = _consolidated_is_current(path)
    assert plain["pred"].dtype == np.float32 and plain["done"].dtype == bool
    assert set(plain.coords) == set(template.coords)
    assert not (tmp_path / "c.zarr.creating").exists()


def _case(case: str, monkeypatch):
    """A template of each kind the engine creates (see cvflow.store.creation.cube_template)."""
    rng = np.random.default_rng(3)
    n = 12
    y = rng.normal(size=n)
    classes, weights, attrs, dtype, chunks = None, None, {}, "float64", (2, 4)
    if case == "binary":
        classes = ["no", "yes"]
        y = np.array(classes, dtype=object)[rng.integers(0, 2, n)]
    elif case == "multiclass":                                 # str labels: a `class` coordinate
        classes = ["a", "b", "c"]
        y = np.array(classes, dtype=object)[rng.integers(0, 3, n)]
    elif case == "multiclass_int":
        classes = [0, 1, 2]
        y = rng.integers(0, 3, n)
    elif case == "multiclass_float":                           # + numpy attributes
        classes = [0.5, 1.5, 2.5]
        y = np.array(classes)[rng.integers(0, 3, n)]
        attrs.update(counts=np.arange(3), scale=np.float32(1.5))
    elif case == "weights_frame":
        weights = rng.uniform(0.5, 2, n)
        attrs["columns"] = '[{"name": "a", "kind": "number", "dtype": "float64"}]'
    elif case == "float32":
        dtype = "float32"
    elif case == "in_place":                                   # no variable staged in memory
        monkeypatch.setattr(creation, "STAGED_BYTES", 64)
    elif case == "sharded":
        monkeypatch.setattr(schema, "SHARD_INNER_BYTES", 2 * 4 * n * 8)    # 2 params an inner chunk
        chunks = (4, 4)
    data = Data(X=rng.normal(size=(n, 3)), y=y, feature_names=["a", "b", "c"],
                is_test=np.arange(n) >= n - 2, classes=classes, sample_weight=weights)
    design = simple_design(n, 4, pairs=True, subset={"size": 3, "pairs": 2} if case == "subset"
                           else None)
    params = [Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": float(a)})
              for a in range(5)]
    params += [Param("svr", "sklearn.svm.SVR", hyper={"kernel": k, "C": 1.0}) for k in ("rbf", "linear")]
    attrs.update(task="regression" if classes is None else "classification", loss="squared",
                 classes=json.dumps(classes), workflow="{}", workflow_hash="h", data_hash="d")
    template = creation.cube_template(data, design, params, attrs=attrs, chunks=chunks, dtype=dtype)
    assert ("shards" in template["pred"].encoding) == (case == "sharded")
    assert ("class" in template["pred"].dims) == case.startswith("multiclass")
    return template


def reference_encoding(template) -> dict:
    """xarray's encoding of what create writes: zstd then crc32c on every chunk, and every
    chunk but the status variables' written even when it holds only fill values."""
    checksummed = (zarr.codecs.ZstdCodec(level=0, checksum=False), zarr.codecs.Crc32cCodec())
    return {n: {"compressors": checksummed, "write_empty_chunks": n not in writes.STATUS_VARIABLES,
                **{k: e for k, e in v.encoding.items() if k != "coordinates"}}
            for n, v in template.variables.items()}


def _nodes(path) -> dict:
    """Every node's zarr.json (the root's with its consolidated metadata), parsed."""
    return {str(f.parent.relative_to(path)): json.loads(f.read_text())
            for f in path.rglob("zarr.json")}


def _opened(path) -> xr.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # consolidated metadata: opens silently
        return xr.open_zarr(path).load()


@pytest.mark.parametrize("case", ["regression", "binary", "multiclass", "multiclass_int",
                                  "multiclass_float", "weights_frame", "float32", "sharded",
                                  "subset", "in_place"])
def test_create_writes_what_xarrays_to_zarr_writes(tmp_path, monkeypatch, case):
    """Reference: xarray's own ``to_zarr(compute=False, consolidated=True, zarr_format=3)`` of
    the same template, every chunk checksummed (crc32c after zstd) and, but the status
    variables', written even when it holds fill values: every node's metadata, the chunks
    written, and what open_zarr reads."""
    template = _case(case, monkeypatch)
    ours, ref = tmp_path / "ours.zarr", tmp_path / "ref.zarr"
    creation.create(ours, template)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
        creation.lazy_blocks(template).to_zarr(ref, compute=False, consolidated=True, zarr_format=3, mode="w-",
                         encoding=reference_encoding(template))
    nodes, expected = _nodes(ours), _nodes(ref)
    assert set(nodes) == set(expected) and len(nodes) == len(template.variables) + 1
    for name in expected:
        assert nodes[name] == expected[name], name
    assert "consolidated_metadata" in nodes["."]
    # the same chunks exist (block variables unwritten: their fill values)
    assert ({str(f.relative_to(ours)) for f in ours.rglob("*") if f.is_file()}
            == {str(f.relative_to(ref)) for f in ref.rglob("*") if f.is_file()})
    got, want = _opened(ours), _opened(ref)
    xr.testing.assert_identical(got, want)
    for name in want.variables:
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_equal(got[name].encoding, want[name].encoding, err_msg=name)   # NaN == NaN
    assert np.isnan(got["pred"].values).all() and not got["done"].values.any()
    assert is_store(ours) and not (tmp_path / "ours.zarr.creating").exists()


@pytest.mark.parametrize("case", ["regression", "sharded", "in_place"])
def test_pred_written_while_the_store_is_created_reads_back(tmp_path, monkeypatch, case):
    """``create(..., pred_ready=)`` puts `pred`'s metadata first and says so before the rest
    is made (the run's blocks write then): at that moment `pred` takes a block's write and the
    path is not yet a store; the store made is the one create makes without it (every node's
    metadata, every other chunk byte for byte, reference: tests above against to_zarr), and the
    block written early reads back as written by the usual route into a finished store."""
    template = _case(case, monkeypatch)
    early, late = tmp_path / "early.zarr", tmp_path / "late.zarr"
    pred = np.random.default_rng(5).normal(size=template["pred"].shape)
    cut = template["pred"].encoding.get("shards") or template["pred"].encoding["chunks"]
    block = BlockResult(slice(0, cut[0]), slice(0, cut[1]), pred[:cut[0], :cut[1]],
                        np.zeros(cut[:2], bool), np.full(cut[:2], "", dtype=object),
                        np.ones(cut[:2]))
    seen = []

    def ready():
        seen.append((is_store(early), (early / "zarr.json").exists()))
        writes.write_pred(early, block)

    creation.create(early, template, pred_ready=ready)
    creation.create(late, template)
    writes.write_pred(late, block)
    assert seen == [(False, False)]
    assert is_store(early) and not (tmp_path / "early.zarr.creating").exists()
    assert _nodes(early) == _nodes(late)
    files = {str(f.relative_to(early)) for f in early.rglob("*") if f.is_file()}
    assert files == {str(f.relative_to(late)) for f in late.rglob("*") if f.is_file()}
    for name in files - {"zarr.json"}:          # the root's JSON: the same, parsed (above)
        assert (early / name).read_bytes() == (late / name).read_bytes(), name
    got = store.open_cube(early)["pred"].values
    np.testing.assert_array_equal(got, store.open_cube(late)["pred"].values)
    np.testing.assert_array_equal(got[:cut[0], :cut[1]], pred[:cut[0], :cut[1]])


def test_pred_is_writable_from_its_metadata_to_the_end_of_the_creation(tmp_path, monkeypatch):
    """group.writable, what a block checks before writing pred: False before pred's metadata
    exists and for a directory that is not a store being created; True while the store is
    created (the marker beside it) and once it is, and True when the creation ends between
    its reads (the marker removed while it looks: seen once under load as "not created")."""
    from cvflow.store import group

    template, _ = _template()
    path = tmp_path / "c.zarr"
    assert not group.writable(path)
    creation.create(path, template)
    assert group.writable(path)
    (tmp_path / "c.zarr.creating").write_text("")          # as while it is being created
    assert not is_store(path) and group.writable(path)
    real = group.exists

    def creation_ends(location):
        # the first look at the marker finds it; the creation ends right after that look
        seen = real(location)
        if location.endswith(".creating") and seen:
            (tmp_path / "c.zarr.creating").unlink()
        return seen

    monkeypatch.setattr(group, "exists", creation_ends)
    assert group.writable(path) and is_store(path)
    monkeypatch.undo()
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "pred").mkdir()
    (tmp_path / "plain" / "pred" / "zarr.json").write_text("{}")
    assert not group.writable(tmp_path / "plain")


def test_interrupted_creation_is_not_a_store_and_is_replaced(tmp_path, monkeypatch):
    template, _ = _template()
    path = tmp_path / "c.zarr"

    def cut(*args, **kwargs):                 # every array written, the marker not yet removed
        raise KeyboardInterrupt

    monkeypatch.setattr(creation, "remove", cut)
    with pytest.raises(KeyboardInterrupt):
        creation.create(path, template)
    monkeypatch.undo()
    assert path.exists() and (tmp_path / "c.zarr.creating").exists()
    assert not is_store(path)
    creation.create(path, template)               # the next run replaces it
    assert is_store(path) and not (tmp_path / "c.zarr.creating").exists()
    with pytest.raises(StoreError, match="already exists"):
        creation.create(path, template)


def test_grow_keeps_stored_bytes_and_consolidated_metadata(tmp_path):
    """Appending splits, params and a new hyperparameter; reference: the two templates."""
    template, design = _template(n_params=3)
    path = tmp_path / "c.zarr"
    creation.create(path, template)
    pred = np.random.default_rng(2).normal(size=(2, 4, 12))
    writes.write_block(path, BlockResult(slice(0, 2), slice(0, 4), pred, np.eye(2, 4, dtype=bool),
                                         np.where(np.eye(2, 4, dtype=bool), "x", "").astype(object),
                                         np.ones((2, 4))))
    grown, _ = _template(n_params=5, mixed=True)        # 5 ridge + 2 svr (kernel, C are new)
    grown = grown.assign_attrs(workflow_hash="h2")
    creation.grow(path, grown, n_params=3, n_splits=design.n_splits)
    cube = _consolidated_is_current(path)
    assert cube.sizes["param"] == 7 and cube.attrs["workflow_hash"] == "h2"
    np.testing.assert_array_equal(cube["pred"].values[:2, :4], pred)
    assert np.isnan(cube["pred"].values[2:]).all() and np.isnan(cube["pred"].values[:, 4:]).all()
    assert cube["done"].values.sum() == 8 and cube["done"].values[:2, :4].all()
    assert cube["error"].values[0, 0] == "x" and cube["error"].values[0, 1] == ""
    for name in grown.coords:
        assert name in cube.coords, name
        np.testing.assert_array_equal(cube[name].values.astype(grown[name].dtype),
                                      grown[name].values)


def _reference_cube(path):
    """What open_cube promises: xarray's open_zarr with everything but pred and X loaded."""
    cube = xr.open_zarr(path, consolidated=False, zarr_format=3)
    return cube.assign({n: cube[n].load() for n in cube.data_vars if n != "pred"}).assign_coords(
        {n: cube[n].load() for n in cube.coords})


def _assert_same_cube(cube, ref):
    xr.testing.assert_identical(cube, ref)
    for name in LAZY_VARIABLES:        # dask arrays, chunked as stored
        assert isinstance(cube[name].data, da.Array)
        assert cube[name].data.chunksize == tuple(ref[name].encoding["chunks"])
    assert all(isinstance(cube[n].data, np.ndarray) for n in cube.variables
               if n not in LAZY_VARIABLES)
    for name in ref.variables:
        assert cube[name].dtype == ref[name].dtype, name
        assert cube[name].encoding.get("chunks") == ref[name].encoding["chunks"], name
    assert cube.encoding["source"] == str(ref.encoding["source"]).rstrip("/")


def test_open_cube_gives_xarrays_dataset(tmp_path):
    template, _ = _template(mixed=True)
    path = tmp_path / "c.zarr"
    creation.create(path, template)
    pred = np.arange(2 * 4 * 12, dtype=float).reshape(2, 4, 12)
    writes.write_block(path, BlockResult(
        slice(2, 4), slice(4, 8), pred, np.eye(2, 4, dtype=bool),
        np.where(np.eye(2, 4, dtype=bool), "boom", "").astype(object), np.ones((2, 4))))
    _assert_same_cube(store.open_cube(path), _reference_cube(path))


def test_open_cube_reads_x_when_asked(tmp_path):
    """X (n x p, no reducer reads it) is read from the store on access, not at open."""
    template, _ = _template()
    path = tmp_path / "c.zarr"
    creation.create(path, template)
    cube = store.open_cube(path)
    zarr.open_array(path / "X", mode="r+")[...] = 7.0     # changed after the open
    np.testing.assert_array_equal(cube["X"].values, np.full((12, 3), 7.0))
    np.testing.assert_array_equal(cube["y"].values, template["y"].values)     # read at open


def test_read_pred_is_the_whole_prediction_array(tmp_path):
    template, _ = _template()
    path = tmp_path / "c.zarr"
    creation.create(path, template)
    pred = np.random.default_rng(1).normal(size=(2, 4, 12))
    writes.write_block(path, BlockResult(slice(0, 2), slice(0, 4), pred,
                                               np.zeros((2, 4), bool),
                                               np.full((2, 4), "", dtype=object), np.ones((2, 4))))
    expected = np.full((5, 11, 12), np.nan)
    expected[:2, :4] = pred
    np.testing.assert_array_equal(store.read_pred(path), expected)
    np.testing.assert_array_equal(store.read_pred(store.open_cube(path)), expected)
    cube = store.open_cube(path)
    assert store.read_pred(cube.isel(param=[1, 0])) is None          # not the stored array
    assert store.read_pred(cube.load()) is None


def _status(ps, ss, seconds, failed_at=None):
    """A block's status record; ``failed_at``: the failed cell(s) (index in the block), "bad fit"."""
    shape = (ps.stop - ps.start, ss.stop - ss.start)
    failed = np.zeros(shape, bool)
    error = np.full(shape, "", dtype=object)
    if failed_at is not None:
        failed[failed_at], error[failed_at] = True, "bad fit"
    return BlockResult(ps, ss, None, failed, error, np.full(shape, seconds))


def test_write_status_batches_read_modify_write(tmp_path):
    template, _ = _template()
    path = tmp_path / "c.zarr"
    creation.create(path, template)
    writes.write_status(path, [_status(slice(0, 2), slice(0, 4), 1.0, (1, 2)),
                               _status(slice(4, 5), slice(8, 11), 2.0)])
    writes.write_status(path, [_status(slice(2, 4), slice(0, 4), 3.0)])
    writes.write_status(path, [])
    done = np.zeros((5, 11), bool)
    done[0:4, 0:4] = done[4, 8:11] = True
    seconds = np.full((5, 11), np.nan)
    seconds[0:2, 0:4], seconds[4, 8:11], seconds[2:4, 0:4] = 1.0, 2.0, 3.0
    group = zarr.open_group(str(path), mode="r")
    np.testing.assert_array_equal(group["done"][...], done)
    np.testing.assert_array_equal(group["fit_seconds"][...], seconds)
    assert np.argwhere(group["failed"][...]).tolist() == [[1, 2]]
    assert group["error"][1, 2] == "bad fit" and (group["error"][...] != "").sum() == 1


def test_status_writer_batches_and_a_retried_failure_clears(tmp_path):
    """Reference: the status zarr holds after each batch, and which arrays hold any chunk."""
    template, _ = _template()
    path = tmp_path / "c.zarr"
    creation.create(path, template)

    def stored(name):
        return zarr.open_array(str(path), path=name, mode="r")

    writer = writes.StatusWriter(path, fresh=True)
    writer.write([_status(slice(0, 2), slice(0, 4), 1.0)])         # good fits: no failure
    assert stored("done").nchunks_initialized == stored("fit_seconds").nchunks_initialized == 1
    assert stored("failed").nchunks_initialized == stored("error").nchunks_initialized == 0
    writer.write([_status(slice(2, 4), slice(0, 4), 2.0, failed_at=...)])      # all failed
    assert stored("failed")[...].sum() == 8 and (stored("error")[...] == "bad fit").sum() == 8
    writes.StatusWriter(path).write([_status(slice(2, 4), slice(0, 4), 3.0)])  # a retry succeeds
    assert not stored("failed")[...].any() and (stored("error")[...] == "").all()
    done = np.zeros((5, 11), bool)
    done[:4, :4] = True
    np.testing.assert_array_equal(stored("done")[...], done)
    np.testing.assert_array_equal(stored("fit_seconds")[...][:4, :4],
                                  np.repeat([1.0, 3.0], [8, 8]).reshape(4, 4))


def test_an_all_nan_block_reads_back_as_nan(tmp_path):
    """Every fit of a block failed: its NaN predictions are written and read as NaN."""
    template, _ = _template()
    path = tmp_path / "c.zarr"
    creation.create(path, template)
    pred = np.random.default_rng(4).normal(size=(2, 4, 12))
    writes.write_pred(path, BlockResult(slice(0, 2), slice(0, 4), pred, None, None, None))
    writes.write_pred(path, BlockResult(slice(0, 2), slice(0, 4), np.full_like(pred, np.nan),
                                        None, None, None))    # a rerun that failed everywhere
    assert np.isnan(store.read_pred(path)).all()
    xr.testing.assert_identical(xr.open_zarr(path)["pred"].load(),
                                xr.open_zarr(path, consolidated=False)["pred"].load())


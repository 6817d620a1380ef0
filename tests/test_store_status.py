"""The status variables in chunks of whole blocks: a flush rewrites only the chunks it changed,
and what is read back (zarr, ``cvflow status``, the cube, verify) is what the blocks said."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import zarr

from cvflow.fitting.block import BlockResult
from cvflow.report.results import status, status_from_cube
from cvflow.store import creation, cube as store, schema, writes
from cvflow.store.damage import verify
from cvflow.store.group import read_where
from cvflow.testing import simple_design
from cvflow.workflow.data import Data
from cvflow.workflow.params import Param

N, N_PARAMS, BLOCK = 12, 5, (2, 4)          # 11 splits: a grid of 3 x 3 blocks


@pytest.fixture
def chunked(tmp_path, monkeypatch):
    """A store whose status chunks are its blocks (2 x 4): STATUS_CHUNK_CELLS made small."""
    monkeypatch.setattr(schema, "STATUS_CHUNK_CELLS", 8)
    rng = np.random.default_rng(0)
    data = Data(X=rng.normal(size=(N, 3)), y=rng.normal(size=N), feature_names=["a", "b", "c"],
                is_test=np.zeros(N, bool))
    design = simple_design(N, 4, pairs=True)
    params = [Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": float(a)})
              for a in range(N_PARAMS)]
    attrs = {"task": "regression", "loss": "squared", "classes": "null", "workflow": "{}",
             "workflow_hash": "h", "data_hash": "d"}
    path = tmp_path / "c.zarr"
    creation.create(path, creation.cube_template(data, design, params, attrs=attrs, chunks=BLOCK))
    return path


def _block(ps: slice, ss: slice, seconds: float, failed_at=(), *, pred: bool = False,
           message: str = "bad fit") -> BlockResult:
    shape = (ps.stop - ps.start, ss.stop - ss.start)
    failed = np.zeros(shape, bool)
    error = np.full(shape, "", dtype=object)
    for cell in failed_at:
        failed[cell], error[cell] = True, f"{message} {cell}"
    values = np.full(shape + (N,), seconds) if pred else None
    if pred:
        values[failed] = np.nan
    return BlockResult(ps, ss, values, failed, error, np.full(shape, seconds))


def _chunk_files(path: Path, name: str) -> dict[str, int]:
    """Each chunk file of a variable: its modification time (ns)."""
    root = path / name / "c"
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def _age(path: Path) -> None:
    """Every chunk file dated 1970: a file with another date afterwards was written since."""
    for p in path.rglob("c/**/*"):
        if p.is_file():
            os.utime(p, ns=(0, 0))


def _reference(blocks) -> dict[str, np.ndarray]:
    """The status the blocks fed in say, computed apart from the writer: the later block wins."""
    shape = (N_PARAMS, 11)
    out = {"done": np.zeros(shape, bool), "failed": np.zeros(shape, bool),
           "error": np.full(shape, "", dtype=object), "fit_seconds": np.full(shape, np.nan)}
    for b in blocks:
        out["done"][b.params, b.splits] = True
        for name in ("failed", "error", "fit_seconds"):
            out[name][b.params, b.splits] = getattr(b, name)
    return out


def test_status_chunks_are_whole_blocks_within_the_bound():
    assert creation.status_chunks((5, 11), (2, 4)) == (5, 11)           # small: one chunk
    assert creation.status_chunks((1000, 1001), (1000, 6)) == (1000, 258)
    chunk = creation.status_chunks((1000, 10001), (1000, 6))
    assert chunk[0] * chunk[1] <= schema.STATUS_CHUNK_CELLS and chunk[1] % 6 == 0
    assert creation.status_chunks((10**6, 10), (10**6, 1)) == (10**6, 1)   # one block at least
    chunk = creation.status_chunks((4000, 4000), (8, 8))
    assert chunk[0] % 8 == 0 and chunk[1] % 8 == 0 and chunk[0] * chunk[1] <= 2**18


def test_a_flush_rewrites_only_the_chunks_it_changed(chunked):
    path = chunked
    for name in writes.STATUS_VARIABLES:
        assert zarr.open_array(str(path), path=name, mode="r").chunks == BLOCK
    writer = writes.StatusWriter(path, fresh=True)
    first = _block(slice(0, 2), slice(0, 4), 1.0)
    writer.write([first])
    assert set(_chunk_files(path, "done")) == set(_chunk_files(path, "fit_seconds")) == {"0/0"}
    assert not _chunk_files(path, "failed") and not _chunk_files(path, "error")

    _age(path)
    second = _block(slice(2, 4), slice(4, 8), 2.0)
    writer.write([second])
    for name in ("done", "fit_seconds"):
        files = _chunk_files(path, name)
        assert files["0/0"] == 0, name                       # not rewritten
        assert set(files) == {"0/0", "1/1"} and files["1/1"] > 0, name

    _age(path)
    third = _block(slice(4, 5), slice(8, 11), 3.0, failed_at=[(0, 1)])   # the edge block
    fourth = _block(slice(0, 2), slice(4, 8), 4.0, failed_at=[(1, 0), (0, 3)])
    writer.write([third, fourth])
    for name in writes.STATUS_VARIABLES:
        files = _chunk_files(path, name)
        assert {k for k, t in files.items() if t > 0} == {"2/2", "0/1"}, name
        assert all(t == 0 for k, t in files.items() if k not in ("2/2", "0/1")), name

    _age(path)
    writer.write([first, second])          # a retried block that changes nothing: no write
    assert {name: [k for k, t in _chunk_files(path, name).items() if t]
            for name in writes.STATUS_VARIABLES} == {name: [] for name in writes.STATUS_VARIABLES}

    expected = _reference([first, second, third, fourth])
    group = zarr.open_group(str(path), mode="r")
    for name, values in expected.items():
        np.testing.assert_array_equal(group[name][...], values, err_msg=name)


def test_status_reads_back_the_cells_written(chunked):
    path = chunked
    blocks = [_block(slice(0, 2), slice(0, 4), 1.0, pred=True),
              _block(slice(2, 4), slice(4, 8), 2.0, [(1, 1), (0, 0)], pred=True, message="x"),
              _block(slice(4, 5), slice(8, 11), 3.0, [(0, 2)], pred=True),
              _block(slice(0, 2), slice(8, 11), 4.0, [(1, 2)], pred=True)]
    writer = writes.StatusWriter(path, fresh=True)
    for b in blocks:
        writes.write_pred(path, b)
    writer.write(blocks[:2])
    writer.write(blocks[2:])
    expected = _reference(blocks)
    failed = expected["failed"] & expected["done"]

    # the failed fits' messages, in np.nonzero order, across chunks
    np.testing.assert_array_equal(read_where(path, "error", failed), expected["error"][failed])
    info = status(path)
    assert (info["done"], info["total"], info["failed"]) == (expected["done"].sum(), 55, 4)
    assert sum(info["failures"].values()) == 4 and not info["damaged"]
    cube = store.open_cube(path)
    for name, values in expected.items():
        np.testing.assert_array_equal(cube[name].values, values, err_msg=name)
    assert status_from_cube(cube)["failures"] == info["failures"]
    report = verify(path)
    assert report.ok and report.checksums

    # a later run reads the stored status back (errors sparse) and clears a retried failure
    retry = _block(slice(2, 4), slice(4, 8), 5.0, pred=True)
    writes.write_pred(path, retry)
    _age(path)
    writes.StatusWriter(path).write([retry])
    files = _chunk_files(path, "error")     # its chunk 1/1 now holds no message: removed
    assert set(files) == {"0/2", "2/2"} and all(t == 0 for t in files.values())
    expected = _reference(blocks + [retry])
    group = zarr.open_group(str(path), mode="r")
    for name, values in expected.items():
        np.testing.assert_array_equal(group[name][...], values, err_msg=name)
    assert status(path)["failed"] == 2

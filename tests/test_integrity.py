"""Integrity: checksummed chunks, damage named by variable and chunk, refits of damaged blocks,
`cvflow verify`, and nothing that is not cvflow's ever removed (issue 23).

The CLI tests run the real entry point in a subprocess on copies of one finished store
(ridge, 4 alphas x 6 splits, one block = 4 params x 1 split = one pred chunk (0, j, 0)).
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import zarr

from cvflow import integrity, store
from cvflow.errors import StoreError
from cvflow.fit import BlockResult

from cvtest import QUICK, REPO, run_cli, tree_digest

WORKFLOW = QUICK + "execution: {fits_per_task: 4, cluster: threads}\n"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """(workflow path, a finished store, its `report --json`), made once."""
    root = tmp_path_factory.mktemp("finished")
    wf = root / "wf.yaml"
    wf.write_text(WORKFLOW)
    done = run_cli("run", wf, "--store", root / "s.zarr", cwd=root)
    assert done.returncode == 0, done.stderr
    report = run_cli("report", root / "s.zarr", "--json", cwd=root)
    assert report.returncode == 0, report.stderr
    return wf, root / "s.zarr", json.loads(report.stdout)


@pytest.fixture
def copy(finished, tmp_path):
    """A copy of the finished store in tmp_path."""
    path = tmp_path / "s.zarr"
    shutil.copytree(finished[1], path)
    return path


def _flip(path, offset=None):
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if offset is None else offset] ^= 0x04
    path.write_bytes(bytes(data))


def _one_line(result, pattern):
    """stderr is one line matching ``pattern`` (a regex)."""
    import re

    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(pattern, lines[0]), result.stderr
    return lines[0]


# --------------------------------------------------------------------------------------------
# nothing that is not ours is removed


def test_a_stray_marker_beside_a_users_directory_removes_nothing(finished, tmp_path):
    """Issue 23: a stray `results.zarr.creating` made `run` delete the user's directory."""
    wf = finished[0]
    target = tmp_path / "results.zarr"
    target.mkdir()
    (target / "notes.txt").write_text("my notes")
    (target / "data").mkdir()
    (target / "data" / "x.csv").write_text("1,2\n")
    marker = tmp_path / "results.zarr.creating"
    for content in (b"", json.dumps({"cvflow": "creating", "store": str(target)}).encode()):
        marker.write_bytes(content)
        before = tree_digest(tmp_path)
        result = run_cli("run", wf, "--store", target, cwd=tmp_path)
        assert result.returncode == 2
        _one_line(result, r"results\.zarr is beside a creation marker .*results\.zarr\.creating"
                          r"\) but holds files cvflow did not write \(data/x\.csv, notes\.txt\); "
                          r"refusing to replace it \(nothing was removed\)")
        assert tree_digest(tmp_path) == before
    marker.write_bytes(b"someone else's file")        # a marker cvflow did not write
    result = run_cli("run", wf, "--store", target, cwd=tmp_path)
    assert result.returncode == 2
    _one_line(result, r"results\.zarr\.creating is not a creation marker cvflow wrote for this "
                      r"store; nothing was removed")
    assert marker.read_bytes() == b"someone else's file" and (target / "notes.txt").exists()


def test_a_stray_marker_beside_a_file_removes_nothing(finished, tmp_path):
    target = tmp_path / "results.zarr"
    target.write_text("a file of mine")
    (tmp_path / "results.zarr.creating").write_bytes(b"")
    result = run_cli("run", finished[0], "--store", target, cwd=tmp_path)
    assert result.returncode == 2
    _one_line(result, r"but is a file; refusing to replace it \(nothing was removed\)")
    assert target.read_text() == "a file of mine"


def test_overwrite_removes_only_a_store_holding_nothing_else(finished, copy, tmp_path):
    wf = finished[0]
    (copy / "mine.txt").write_text("kept")
    before = tree_digest(copy)
    result = run_cli("run", wf, "--store", copy, "--overwrite", cwd=tmp_path)
    assert result.returncode == 2
    _one_line(result, r"s\.zarr holds files cvflow did not write \(mine\.txt\); refusing to "
                      r"overwrite it \(nothing was removed\)")
    assert tree_digest(copy) == before
    (copy / "mine.txt").unlink()
    result = run_cli("run", wf, "--store", copy, "--overwrite", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "24 fits performed" in result.stdout


def test_an_interrupted_creation_of_ours_is_still_replaced(tmp_path):
    """The marker names its store: the next creation removes the cut one (and only it)."""
    from test_store import _template

    template, _ = _template()
    path = tmp_path / "c.zarr"
    marker = tmp_path / "c.zarr.creating"
    store.create(path, template)
    shutil.rmtree(path / "pred")                  # as if cut before pred's metadata
    marker.write_bytes(json.dumps({"cvflow": "creating", "store": str(path)}).encode())
    assert store.clear_interrupted(path) and not path.exists() and not marker.exists()
    store.create(path, template)
    assert store.is_store(path) and not marker.exists()


# --------------------------------------------------------------------------------------------
# checksums on every chunk


def test_every_array_carries_crc32c_also_after_growing(tmp_path):
    from test_store import _template

    template, design = _template(n_params=3)
    path = tmp_path / "c.zarr"
    store.create(path, template)
    store.write_block(path, BlockResult(slice(0, 2), slice(0, 4), np.ones((2, 4, 12)),
                                        np.zeros((2, 4), bool), np.full((2, 4), "", dtype=object),
                                        np.ones((2, 4))))
    grown, _ = _template(n_params=5, mixed=True)       # new params and hyperparameters
    store.grow(path, grown, n_params=3, n_splits=design.n_splits)
    group = zarr.open_group(str(path), mode="r")
    names = sorted(group.array_keys())
    assert {"kernel", "C", "pred", "fold", "X"} <= set(names)
    for name in names:
        codecs = [type(c).__name__ for c in group[name].compressors]
        assert codecs == ["ZstdCodec", "Crc32cCodec"], name
    found = store.verify(path)
    assert found.ok and found.checksums and found.variables == len(names), found.text()


def test_old_stores_without_checksums_open_and_verify(tmp_path):
    for name in ("binary", "regression"):
        path = tmp_path / f"{name}.zarr"
        shutil.copytree(REPO / "tests" / "data" / "v1" / f"{name}.zarr", path)
        result = run_cli("verify", path)
        assert result.returncode == 0, result.stderr
        assert "0 damaged (this store has no checksums" in result.stdout
        assert run_cli("report", path).returncode == 0


# --------------------------------------------------------------------------------------------
# damage through the CLI


def test_a_flipped_bit_in_pred_is_named_and_refitted(finished, copy, tmp_path):
    """Issue 23: one flipped bit turned a K-fold estimate of 3406 into 3.78e7, exit 0."""
    wf, _, fresh = finished
    _flip(copy / "pred" / "c" / "0" / "1" / "0")
    for args in (("report", copy), ("report", copy, "--json")):
        result = run_cli(*args, cwd=tmp_path)
        assert result.returncode == 2 and result.stdout == ""
        _one_line(result, r"^cvflow: error: store: .*s\.zarr: pred chunk \(0, 1, 0\) is corrupt "
                          r"\(checksum mismatch\); run `cvflow run` to refit it")
    verify = run_cli("verify", copy, cwd=tmp_path)
    assert verify.returncode == 1
    assert "pred chunk (0, 1, 0) is corrupt (checksum mismatch)" in verify.stdout
    assert "1 damaged" in verify.stdout
    assert json.loads(run_cli("verify", copy, "--json").stdout)["damaged"] == [
        {"variable": "pred", "chunk": [0, 1, 0], "problem": "corrupt (checksum mismatch)"}]
    run = run_cli("run", wf, "--store", copy, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "4 fits performed" in run.stdout and "already complete" not in run.stdout
    assert "pred chunk (0, 1, 0) is corrupt (checksum mismatch); refitting its fits" in run.stderr
    assert json.loads(run_cli("report", copy, "--json").stdout) == fresh      # bit for bit
    assert run_cli("verify", copy).returncode == 0


def test_a_deleted_pred_chunk_is_seen_by_status_and_refitted(finished, copy, tmp_path):
    """Issue 23: a deleted chunk read as NaN, status said complete, run "already complete"."""
    wf, _, fresh = finished
    (copy / "pred" / "c" / "0" / "2" / "0").unlink()
    status = run_cli("status", copy, cwd=tmp_path)
    assert status.returncode == 1
    assert "damaged: pred chunk (0, 2, 0) is missing" in status.stdout
    assert "(complete)" not in status.stdout
    info = json.loads(run_cli("status", copy, "--json").stdout)
    assert info["damaged"] == ["pred chunk (0, 2, 0) is missing"] and not info["complete"]
    report = run_cli("report", copy, cwd=tmp_path)
    assert report.returncode == 2
    _one_line(report, r"pred chunk \(0, 2, 0\) is missing; run `cvflow run` to refit it")
    verify = run_cli("verify", copy, cwd=tmp_path)
    assert verify.returncode == 1 and "pred chunk (0, 2, 0) is missing" in verify.stdout
    run = run_cli("run", wf, "--store", copy, cwd=tmp_path)
    assert run.returncode == 0 and "4 fits performed" in run.stdout, run.stderr
    assert json.loads(run_cli("report", copy, "--json").stdout) == fresh
    status = run_cli("status", copy, cwd=tmp_path)
    assert status.returncode == 0 and "(complete)" in status.stdout


def test_a_truncated_pred_chunk_is_named_and_refitted(finished, copy, tmp_path):
    """Issue 23: a truncated chunk failed with a zstd error naming no variable."""
    wf, _, fresh = finished
    chunk = copy / "pred" / "c" / "0" / "3" / "0"
    chunk.write_bytes(chunk.read_bytes()[:40])
    report = run_cli("report", copy, cwd=tmp_path)
    assert report.returncode == 2
    _one_line(report, r"pred chunk \(0, 3, 0\) is corrupt \(checksum mismatch\)")
    run = run_cli("run", wf, "--store", copy, cwd=tmp_path)
    assert run.returncode == 0 and "4 fits performed" in run.stdout, run.stderr
    assert json.loads(run_cli("report", copy, "--json").stdout) == fresh


def test_a_flipped_bit_in_fold_damages_the_store(finished, copy, tmp_path):
    """Issue 23: a flipped bit in `fold` silently changed every estimate. It cannot be
    refitted: report, run and verify name it, and run changes nothing."""
    wf = finished[0]
    _flip(copy / "fold" / "c" / "0" / "0")
    before = tree_digest(copy)
    for args in (("report", copy), ("run", wf, "--store", copy)):
        result = run_cli(*args, cwd=tmp_path)
        assert result.returncode == 2 and "fits performed" not in result.stdout
        _one_line(result, r"fold chunk \(0, 0\) is corrupt \(checksum mismatch\); the store is "
                          r"damaged \(fold cannot be refitted\): restore it from a copy, or rerun "
                          r"with --overwrite")
    assert tree_digest(copy) == before
    verify = run_cli("verify", copy, cwd=tmp_path)
    assert verify.returncode == 1 and "fold chunk (0, 0) is corrupt" in verify.stdout
    assert "cannot be refitted" in verify.stdout


def test_a_corrupt_done_is_named_by_status_and_run(finished, copy, tmp_path):
    wf = finished[0]
    _flip(copy / "done" / "c" / "0" / "0", offset=3)
    before = tree_digest(copy)
    for args in (("status", copy), ("run", wf, "--store", copy)):
        result = run_cli(*args, cwd=tmp_path)
        assert result.returncode == 2
        _one_line(result, r"done chunk \(0, 0\) is corrupt \(checksum mismatch\); the store is "
                          r"damaged")
    assert tree_digest(copy) == before


def test_verify_lists_a_corrupt_variable_metadata_object(finished, copy, tmp_path):
    """pred/zarr.json carries no checksum. Damaged, report and status said `cvflow: error:
    UnicodeDecodeError: ...` (exit 1, no file named) and verify said "0 damaged" (exit 0, it
    reads the consolidated metadata); now report, status and run name the object (exit 2,
    store unchanged) and verify lists it (exit 1) as damage that cannot be refitted."""
    wf = finished[0]
    data = bytearray((copy / "pred" / "zarr.json").read_bytes())
    data[40] = 0x90                                   # not UTF-8: the JSON cannot be decoded
    (copy / "pred" / "zarr.json").write_bytes(bytes(data))
    before = tree_digest(copy)
    for args in (("report", copy), ("status", copy), ("run", wf, "--store", copy)):
        result = run_cli(*args, cwd=tmp_path)
        assert result.returncode == 2 and "fits performed" not in result.stdout, result.stderr
        _one_line(result, r"pred/zarr\.json is corrupt \(cannot be decoded: .*\); the store is "
                          r"damaged: restore it from a copy, or rerun with --overwrite")
    assert tree_digest(copy) == before
    verify = run_cli("verify", copy, "--json", cwd=tmp_path)
    assert verify.returncode == 1, verify.stderr
    found = json.loads(verify.stdout)
    assert [(d["variable"], d["chunk"]) for d in found["damaged"]] == [("pred", [])]
    text = run_cli("verify", copy, cwd=tmp_path).stdout
    assert "pred/zarr.json is corrupt" in text and "cannot be refitted" in text
    assert "`cvflow run` refits" not in text


def test_verify_refuses_what_is_not_a_store(tmp_path):
    (tmp_path / "x").mkdir()
    result = run_cli("verify", tmp_path / "x")
    assert result.returncode == 2
    _one_line(result, r"x exists but is not a cvflow store")
    with pytest.raises(StoreError, match="does not exist"):
        store.verify(tmp_path / "nope")


# --------------------------------------------------------------------------------------------
# the library: the reader, damaged_blocks, a sharded store


def _sharded(tmp_path, monkeypatch):
    """A store whose pred is sharded (2 params an inner chunk, blocks of 4 x 4), two blocks
    written and done."""
    from test_store import _status, _template

    monkeypatch.setattr(store, "SHARD_INNER_BYTES", 2 * 4 * 12 * 8)
    template, _ = _template(chunks=(4, 4))
    assert "shards" in template["pred"].encoding
    path = tmp_path / "c.zarr"
    store.create(path, template)
    rng = np.random.default_rng(0)
    for ss in (slice(0, 4), slice(4, 8)):
        store.write_pred(path, BlockResult(slice(0, 4), ss, rng.normal(size=(4, 4, 12)),
                                           None, None, None))
        store.write_status(path, [_status(slice(0, 4), ss, 1.0)])
    return path


def test_damaged_blocks_and_the_reader_on_a_sharded_store(tmp_path, monkeypatch):
    path = _sharded(tmp_path, monkeypatch)
    intact = store.read_pred(path)
    assert store.damaged_blocks(path, (4, 4)) == []
    shard = path / "pred" / "c" / "0" / "1" / "0"
    shard.write_bytes(b"")                   # zarr alone would read an empty shard as NaN
    with pytest.raises(integrity.DamagedStore,
                       match=r"pred chunk \(0, 1, 0\) is corrupt \(an empty object\)"):
        store.read_pred(path)
    cube = store.open_cube(path)
    np.testing.assert_array_equal(cube["pred"][:, :4].values, intact[:, :4])   # other chunks
    with pytest.raises(integrity.DamagedStore, match=r"pred chunk \(0, 1, 0\)"):
        cube["pred"][:, 4:8].compute()
    assert store.damaged_blocks(path, (4, 4)) == [(slice(0, 4), slice(4, 8))]
    shard.unlink()
    assert store.damaged_blocks(path, (4, 4)) == [(slice(0, 4), slice(4, 8))]
    with pytest.raises(integrity.DamagedStore, match=r"pred chunk \(0, 1, 0\) is missing"):
        store.read_pred(store.open_cube(path))
    done = store.intact_done(path, (4, 4))
    assert done[:4, :4].all() and not done[:, 4:].any()
    first = path / "pred" / "c" / "0" / "0" / "0"
    _flip(first, offset=len(first.read_bytes()) - 40)        # in the last inner chunk
    assert [str(d) for d in store.verify(path).damaged] == [
        "pred chunk (0, 0, 0) is corrupt (checksum mismatch)", "pred chunk (0, 1, 0) is missing"]
    with pytest.raises(integrity.DamagedStore, match=r"pred chunk \(0, 0, 0\) is corrupt"):
        store.read_block(path, slice(0, 4), slice(0, 4))


def test_an_all_failed_block_is_not_missing(tmp_path):
    """A block whose fits all failed holds NaN; its chunk is written all the same, and a store
    written before that (no chunk) is not damaged either: no fit's predictions are lost."""
    from test_store import _status, _template

    template, _ = _template()
    path = tmp_path / "c.zarr"
    store.create(path, template)
    store.write_pred(path, BlockResult(slice(0, 2), slice(0, 4), np.full((2, 4, 12), np.nan),
                                       None, None, None))
    store.write_status(path, [_status(slice(0, 2), slice(0, 4), 1.0, failed_at=...)])
    assert (path / "pred" / "c" / "0" / "0" / "0").exists()
    (path / "pred" / "c" / "0" / "0" / "0").unlink()
    assert store.verify(path).ok and store.damaged_blocks(path, (2, 4)) == []

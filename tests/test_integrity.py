"""Integrity: checksummed chunks, damage named by variable and chunk, refits of damaged blocks,
`cvflow verify`, and nothing that is not cvflow's ever removed (issue 23).

The CLI tests run the real entry point in a subprocess on copies of one finished store
(ridge, 4 alphas x 6 splits, one block = 4 params x 1 split = one pred chunk (0, j, 0)).
"""
from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
import zarr

from cvflow.store import attributes
from cvflow.store import integrity
from cvflow.store import creation, cube as store, damage, schema, writes
from cvflow.store.group import is_store, read_mask
from cvflow.errors import StoreError
from cvflow.fitting.block import BlockResult

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


def test_a_planted_link_beside_a_store_is_never_followed(finished, tmp_path):
    """Issue 32: a dangling `s.zarr.creating -> victim` made `run` create the file `victim`
    (the marker was opened for writing through the link); a link in the lock's place is
    refused too. One line, exit 2, nothing written anywhere."""
    wf = finished[0]
    victim = tmp_path / "elsewhere" / "victim"
    victim.parent.mkdir()
    store = tmp_path / "s.zarr"
    for name, pattern in (("s.zarr.creating", r"s\.zarr\.creating is a symbolic link \(to "
                                              r".*victim\), not a creation marker cvflow wrote; "
                                              r"cvflow never writes through a link"),
                          ("s.zarr.lock", r"the run lock .*s\.zarr\.lock is a symbolic link "
                                          r"\(to .*victim\); cvflow never follows a link")):
        link = tmp_path / name
        link.symlink_to(victim)
        result = run_cli("run", wf, "--store", store, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        _one_line(result, pattern)
        assert not victim.exists() and not store.exists()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", name]
        link.unlink()
    # planted between the check and the marker's write: the write does not follow it either
    from unittest import mock

    from test_store import _template

    check = creation.clear_interrupted

    def check_then_plant(location):
        out = check(location)
        (tmp_path / "s.zarr.creating").symlink_to(victim)
        return out

    with mock.patch.object(creation, "clear_interrupted", check_then_plant), \
            pytest.raises(StoreError, match="s.zarr.creating appeared while the store was being "
                                            "created"):
        creation.create(store, _template()[0])
    assert not victim.exists() and not store.exists()


def test_an_interrupted_creation_of_ours_is_still_replaced(tmp_path):
    """The marker names its store: the next creation removes the cut one (and only it)."""
    from test_store import _template

    template, _ = _template()
    path = tmp_path / "c.zarr"
    marker = tmp_path / "c.zarr.creating"
    creation.create(path, template)
    shutil.rmtree(path / "pred")                  # as if cut before pred's metadata
    marker.write_bytes(json.dumps({"cvflow": "creating", "store": str(path)}).encode())
    assert creation.clear_interrupted(path) and not path.exists() and not marker.exists()
    creation.create(path, template)
    assert is_store(path) and not marker.exists()


def test_a_creation_cut_mid_write_of_a_chunk_is_still_replaced(tmp_path):
    """A fit that ends its process can cut zarr's write of a pred chunk while the store is
    being created (the tasks write pred while the rest is made): the temporary file zarr's local
    store left is cvflow's; a user's file beside it still is not."""
    from test_store import _template

    template, _ = _template()
    path = tmp_path / "c.zarr"
    marker = tmp_path / "c.zarr.creating"
    creation.create(path, template)
    # zarr's local store writes a key to `<key with its suffix replaced>.<uuid4 hex>.partial`,
    # then renames it (zarr/storage/_local.py, _atomic_write): what a process's end leaves
    hex_ = "0123456789abcdef0123456789abcdef"
    (path / "pred" / "c" / "0" / "0").mkdir(parents=True, exist_ok=True)
    (path / "pred" / "c" / "0" / "0" / f"0.{hex_}.partial").write_bytes(b"cut")
    (path / f"zarr.{hex_}.partial").write_bytes(b"{}")
    marker.write_bytes(json.dumps({"cvflow": "creating", "store": str(path)}).encode())
    assert creation.clear_interrupted(path) and not path.exists() and not marker.exists()
    creation.create(path, template)
    (path / "pred" / "c").mkdir(parents=True, exist_ok=True)
    (path / "pred" / "c" / "notes.partial").write_text("mine")
    marker.write_bytes(json.dumps({"cvflow": "creating", "store": str(path)}).encode())
    with pytest.raises(StoreError, match=r"holds files cvflow did not write \(pred/c/notes"):
        creation.clear_interrupted(path)
    assert (path / "pred" / "c" / "notes.partial").exists()


# --------------------------------------------------------------------------------------------
# checksums on every chunk


def test_every_array_carries_crc32c_also_after_growing(tmp_path):
    from test_store import _template

    template, design = _template(n_params=3)
    path = tmp_path / "c.zarr"
    creation.create(path, template)
    writes.write_block(path, BlockResult(slice(0, 2), slice(0, 4), np.ones((2, 4, 12)),
                                         np.zeros((2, 4), bool), np.full((2, 4), "", dtype=object),
                                         np.ones((2, 4))))
    grown, _ = _template(n_params=5, mixed=True)       # new params and hyperparameters
    creation.grow(path, grown, n_params=3, n_splits=design.n_splits)
    group = zarr.open_group(str(path), mode="r")
    names = sorted(group.array_keys())
    assert {"kernel", "C", "pred", "fold", "X"} <= set(names)
    for name in names:
        codecs = [type(c).__name__ for c in group[name].compressors]
        assert codecs == ["ZstdCodec", "Crc32cCodec"], name
    found = damage.verify(path)
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
        damage.verify(tmp_path / "nope")


# --------------------------------------------------------------------------------------------
# the library: the reader, damaged_blocks, a sharded store


def _sharded(tmp_path, monkeypatch):
    """A store whose pred is sharded (2 params an inner chunk, blocks of 4 x 4), two blocks
    written and done."""
    from test_store import _status, _template

    monkeypatch.setattr(schema, "SHARD_INNER_BYTES", 2 * 4 * 12 * 8)
    template, _ = _template(chunks=(4, 4))
    assert "shards" in template["pred"].encoding
    path = tmp_path / "c.zarr"
    creation.create(path, template)
    rng = np.random.default_rng(0)
    for ss in (slice(0, 4), slice(4, 8)):
        writes.write_pred(path, BlockResult(slice(0, 4), ss, rng.normal(size=(4, 4, 12)),
                                            None, None, None))
        writes.write_status(path, [_status(slice(0, 4), ss, 1.0)])
    return path


def test_damaged_blocks_and_the_reader_on_a_sharded_store(tmp_path, monkeypatch):
    path = _sharded(tmp_path, monkeypatch)
    intact = store.read_pred(path)
    assert damage.damaged_blocks(path, (4, 4)) == []
    shard = path / "pred" / "c" / "0" / "1" / "0"
    shard.write_bytes(b"")                   # zarr alone would read an empty shard as NaN
    with pytest.raises(integrity.DamagedStore,
                       match=r"pred chunk \(0, 1, 0\) is corrupt \(an empty object\)"):
        store.read_pred(path)
    cube = store.open_cube(path)
    np.testing.assert_array_equal(cube["pred"][:, :4].values, intact[:, :4])   # other chunks
    with pytest.raises(integrity.DamagedStore, match=r"pred chunk \(0, 1, 0\)"):
        cube["pred"][:, 4:8].compute()
    assert damage.damaged_blocks(path, (4, 4)) == [(slice(0, 4), slice(4, 8))]
    shard.unlink()
    assert damage.damaged_blocks(path, (4, 4)) == [(slice(0, 4), slice(4, 8))]
    with pytest.raises(integrity.DamagedStore, match=r"pred chunk \(0, 1, 0\) is missing"):
        store.read_pred(store.open_cube(path))
    done = damage.intact_done(path, (4, 4))
    assert done[:4, :4].all() and not done[:, 4:].any()
    first = path / "pred" / "c" / "0" / "0" / "0"
    _flip(first, offset=len(first.read_bytes()) - 40)        # in the last inner chunk
    assert [str(d) for d in damage.verify(path).damaged] == [
        "pred chunk (0, 0, 0) is corrupt (checksum mismatch)", "pred chunk (0, 1, 0) is missing"]
    with pytest.raises(integrity.DamagedStore, match=r"pred chunk \(0, 0, 0\) is corrupt"):
        store.read_block(path, slice(0, 4), slice(0, 4))


def test_an_all_failed_block_is_not_missing(tmp_path):
    """A block whose fits all failed holds NaN; its chunk is written all the same, and a store
    written before that (no chunk) is not damaged either: no fit's predictions are lost."""
    from test_store import _status, _template

    template, _ = _template()
    path = tmp_path / "c.zarr"
    creation.create(path, template)
    writes.write_pred(path, BlockResult(slice(0, 2), slice(0, 4), np.full((2, 4, 12), np.nan),
                                        None, None, None))
    writes.write_status(path, [_status(slice(0, 2), slice(0, 4), 1.0, failed_at=...)])
    assert (path / "pred" / "c" / "0" / "0" / "0").exists()
    (path / "pred" / "c" / "0" / "0" / "0").unlink()
    assert damage.verify(path).ok and damage.damaged_blocks(path, (2, 4)) == []


# --------------------------------------------------------------------------------------------
# the variables written when a store is created, and the root attributes, checked at every
# open: a store with any of them damaged is refused by report and run, listed by status

STUDY = """\
name: small
data: {source: sklearn, name: diabetes}
task: regression
learners:
  - name: rf
    class: sklearn.ensemble.RandomForestRegressor
    params: {n_estimators: 10, random_state: 0}
    grid: {max_depth: [2, 3, 4, 5, 6, 7]}
design: {folds: 5, seed: 0}
estimators: [kfold, corrected_kfold, nested_cv]
execution: {cluster: threads}
"""


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """(workflow path, a finished store of the tester's study: random forests of depth 2-7,
    5 folds, kfold + corrected_kfold + nested_cv)."""
    root = tmp_path_factory.mktemp("study")
    wf = root / "wf.yaml"
    wf.write_text(STUDY)
    done = run_cli("run", wf, "--store", root / "s.zarr", cwd=root)
    assert done.returncode == 0, done.stderr
    return wf, root / "s.zarr"


@pytest.fixture
def study_copy(study, tmp_path):
    path = tmp_path / "s.zarr"
    shutil.copytree(study[1], path)
    return path


def _set_attribute(path, name, value):
    """Change one root attribute in the store's zarr.json (the only place zarr keeps them)."""
    meta = json.loads((path / "zarr.json").read_text())
    meta["attributes"][name] = value
    (path / "zarr.json").write_text(json.dumps(meta))


def _refused(path, wf, tmp_path, pattern, *report_args):
    """report and run exit 2 with one line matching ``pattern``; status exits 1 listing the
    damage, without "(complete)"; nothing in the store changes."""
    before = tree_digest(path)
    for args in (("report", path, *report_args), ("run", wf, "--store", path)):
        result = run_cli(*args, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "already complete" not in result.stdout and "fits to do" not in result.stdout
        _one_line(result, pattern)
    status = run_cli("status", path, cwd=tmp_path)
    assert status.returncode == 1, status.stdout + status.stderr
    assert "(complete)" not in status.stdout and "  damaged: " in status.stdout
    assert "restore it from a copy" in status.stdout
    info = json.loads(run_cli("status", path, "--json", cwd=tmp_path).stdout)
    assert info["damaged"] and not info["complete"]
    assert tree_digest(path) == before
    return status.stdout


@pytest.mark.parametrize("variable, chunk", [
    ("fold", "(0, 0)"), ("fold_split", "(0, 0)"), ("y", "(0,)"), ("train", "(0, 0)"),
    ("X", "(0, 0)"), ("split_kind", "(0,)")])
def test_a_deleted_chunk_of_a_created_variable_is_refused(study, study_copy, tmp_path,
                                                          variable, chunk):
    """Issue (tester, C2/M1/M2/M3): a deleted `fold` or `fold_split` chunk read as fill values
    (report: exit 0, the deepest forest selected, se nan); a deleted `y` made every estimate
    nan, blamed on fits; a deleted `train` made run append a duplicate set of splits; a
    deleted `X` was "already complete". All are refused, named, and the store is untouched."""
    shutil.rmtree(study_copy / variable / "c")
    escaped = chunk.replace("(", r"\(").replace(")", r"\)")
    text = _refused(study_copy, study[0], tmp_path,
                    rf"store: .*s\.zarr: {variable} chunk {escaped} is missing; the store is "
                    rf"damaged \({variable} cannot be refitted\): restore it from a copy, or "
                    rf"rerun with --overwrite .*`cvflow verify .*s\.zarr` lists every damaged")
    assert f"damaged: {variable} chunk {chunk} is missing" in text


def test_status_lists_a_corrupt_fold_chunk(study, study_copy, tmp_path):
    """Issue (tester, M4): status said "(complete)", exit 0, with a flipped bit in `fold`
    (report and run refused it already): it reads the small variables and lists it."""
    _flip(study_copy / "fold" / "c" / "0" / "0")
    text = _refused(study_copy, study[0], tmp_path,
                    r"fold chunk \(0, 0\) is corrupt \(checksum mismatch\); the store is damaged")
    assert "damaged: fold chunk (0, 0) is corrupt (checksum mismatch)" in text


def test_a_full_split_pointing_elsewhere_is_refused(study, study_copy, tmp_path):
    """Issue (tester, C3): `full_split` set to 3 (a fold split) made `report --estimators
    corrected_kfold` silently choose another model, and verify said 0 damaged. The attribute
    is checked against the split it names: kind "full", trained on every sample."""
    _set_attribute(study_copy, "full_split", 3)
    text = _refused(study_copy, study[0], tmp_path,
                    r"store: .*s\.zarr: attribute full_split is 3, a split of kind 'fold', not "
                    r"the full split; the store is damaged: restore it from a copy, or rerun "
                    r"with --overwrite", "--estimators", "corrected_kfold")
    assert "damaged: attribute full_split is 3" in text
    verify = run_cli("verify", study_copy, cwd=tmp_path)
    assert verify.returncode == 1
    assert "s.zarr: attribute full_split is 3, a split of kind 'fold'" in verify.stdout
    assert json.loads(run_cli("verify", study_copy, "--json").stdout)["attributes"] == [
        "attribute full_split is 3, a split of kind 'fold', not the full split"]


def test_an_attribute_of_the_wrong_type_is_refused(study, study_copy, tmp_path):
    """Issue (tester, M5): `estimators` stored as a JSON list (not the JSON text of one) made
    report exit 1 with `TypeError: the JSON object must be str ...`, and status say
    "(complete)" (M4)."""
    listed = json.loads(json.loads((study_copy / "zarr.json").read_text())
                        ["attributes"]["estimators"])
    _set_attribute(study_copy, "estimators", listed)
    text = _refused(study_copy, study[0], tmp_path,
                    r"store: .*s\.zarr: attribute estimators is a list \(.*\), not the JSON "
                    r"text cvflow writes; the store is damaged")
    assert "damaged: attribute estimators is a list" in text


@pytest.mark.parametrize("name, value, message", [
    ("full_split", -1, r"full_split is -1 but split 0 is the full split"),
    ("full_split", 99, r"full_split is a int \(99\), not -1 or a split index \(0 to 15\)"),
    ("full_split", "0", r"full_split is a str \(\"0\"\), not -1 or a split index"),
    ("full_split", True, r"full_split is a bool"),
    ("chunks", None, r"chunks is '\[\d+, \d+\]', but pred is stored in blocks of \[\d+, \d+\]"),
    ("chunks", "[0]", r"chunks is '\[0\]', not \[params, splits\]"),
    ("workflow_params", "[0, 9]", r"workflow_params is not a list of distinct param indices "
                                  r"\(0 to 5\)"),
    ("workflow", "{not json", r"attribute workflow is not valid JSON"),
    ("classes", "{}", r"classes is JSON of a dict \(\{\}\), not a JSON list or null"),
    ("estimators", '["kfold"]', r"estimators is not a JSON list of \[name, options\] pairs"),
    ("task", 3, r"attribute task is a int \(3\), not text"),
])
def test_the_root_attributes_are_checked_at_open(study, study_copy, name, value, message):
    """Each attribute of the wrong type, and each index not consistent with what it points at,
    is refused at open (one line naming it) and listed by status."""
    if value is None:                      # another block shape than pred's
        bp, bs = json.loads(store.read_attr(study_copy, "chunks"))
        value = json.dumps([bp, bs + 1])
    done, failed = read_mask(study_copy, "done"), read_mask(study_copy, "failed")
    _set_attribute(study_copy, name, value)
    with pytest.raises(attributes.DamagedAttribute, match=message):
        store.open_cube(study_copy)
    assert any(re.search(message, d) for d in damage.status_damage(study_copy, done, failed))


def test_a_listing_check_costs_no_array_open(study, monkeypatch):
    """listed_damage takes the arrays' layouts from the consolidated metadata: it opens no
    zarr array (on an object store each open is a request)."""
    def fail(*args, **kwargs):
        raise AssertionError("opened a zarr array")

    monkeypatch.setattr(zarr, "open_array", fail)
    monkeypatch.setattr(zarr, "open_group", fail)
    assert damage.listed_damage(study[1]) == []


def test_a_store_named_through_a_symbolic_link(finished, copy, tmp_path):
    """Issue 32: a dangling link as --store raised FileExistsError (exit 1) and left a
    `.creating` marker; --overwrite through a link raised OSError. Both are refused with one
    line, nothing written; a link to a store resumes it as its own path would."""
    wf = finished[0]
    dangling = tmp_path / "new.zarr"
    dangling.symlink_to(tmp_path / "missing" / "s.zarr")
    before = tree_digest(tmp_path)
    result = run_cli("run", wf, "--store", dangling, cwd=tmp_path)
    assert result.returncode == 2
    _one_line(result, r"new\.zarr is a symbolic link to .*missing/s\.zarr, which does not exist; "
                      r"cvflow creates a store only at a path of its own: give --store ")
    assert tree_digest(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.zarr", "s.zarr"]
    link = tmp_path / "link.zarr"
    link.symlink_to(copy)
    result = run_cli("run", wf, "--store", link, "--overwrite", cwd=tmp_path)
    assert result.returncode == 2
    _one_line(result, r"link\.zarr is a symbolic link \(to .*s\.zarr\); refusing to overwrite it "
                      rf"through it \(nothing was removed\): give --store {re.escape(str(copy))}")
    assert tree_digest(tmp_path) == before and link.is_symlink()
    result = run_cli("run", wf, "--store", link, cwd=tmp_path)      # resumed: nothing to fit
    assert result.returncode == 0, result.stderr
    assert "0 fits performed" in result.stdout
    assert tree_digest(tmp_path) == before


def _edit_array_metadata(path, name, change):
    meta = json.loads((path / name / "zarr.json").read_text())
    change(meta)
    (path / name / "zarr.json").write_text(json.dumps(meta))


def _no_crc32c(meta):
    def drop(codecs):
        return [{**c, "configuration": {**c["configuration"], "codecs": drop(
            c["configuration"]["codecs"])}} if "codecs" in (c.get("configuration") or {}) else c
                for c in codecs if c["name"] != "crc32c"]

    meta["codecs"] = drop(meta["codecs"])


def _double_params(meta):
    meta["shape"][0] *= 2


@pytest.mark.parametrize("name, change, what", [
    ("pred", _no_crc32c, r"codecs: \[bytes, zstd, crc32c\] there, \[bytes, zstd\] here"),
    ("pred", _double_params, r"shape: \[4, 6, 442\] there, \[8, 6, 442\] here"),
    ("done", _double_params, r"shape: \[4, 6\] there, \[8, 6\] here"),
], ids=["pred-codec", "pred-shape", "done-shape"])
def test_an_array_metadata_at_odds_with_the_consolidated_copy(finished, copy, tmp_path, name,
                                                               change, what):
    """Issue 32: a crc32c codec removed from pred/zarr.json only: verify said 0 damaged, report
    refused the chunk as corrupt, run refitted everything and wrote chunks without checksums;
    a doubled shape there: verify 0 damaged, run exit 1 with `ValueError: could not broadcast`.
    Now report and run refuse it naming the array (exit 2, the store untouched), status and
    verify list it (exit 1)."""
    wf = finished[0]
    _edit_array_metadata(copy, name, change)
    problem = (rf"{name}/zarr\.json is inconsistent with the consolidated metadata in the root "
               rf"zarr\.json \({what}\)")
    before = tree_digest(copy)
    for args in (("report", copy), ("run", wf, "--store", copy)):
        result = run_cli(*args, cwd=tmp_path)
        assert result.returncode == 2 and "fits performed" not in result.stdout, result.stderr
        _one_line(result, problem + r"; the store is damaged .*: restore it from a copy, or rerun "
                                    r"with --overwrite")
    with pytest.raises(StoreError, match=problem):
        store.open_cube(copy)
    for command in ("status", "verify"):
        result = run_cli(command, copy, cwd=tmp_path)
        assert result.returncode == 1, result.stderr
        assert re.search(problem, result.stdout), result.stdout
        assert re.search("restore (it|the store) from a copy", result.stdout), result.stdout
        assert "`cvflow run` refits the" not in result.stdout
    assert tree_digest(copy) == before


def test_verify_does_not_call_a_block_written_during_its_read_missing(finished, copy,
                                                                      monkeypatch):
    """verify listed the store's objects, read every chunk, then read ``done``: a block a run
    wrote meanwhile (its pred chunk, then ``done``) was listed "pred chunk (...) is missing"
    (exit 1; seen with `cvflow verify` in a loop beside a run that grew a store). The masks are
    read before pred's chunks are listed for them: a done fit's chunk was written before."""
    chunk = copy / "pred" / "c" / "0" / "0" / "0"
    done_chunk = copy / "done" / "c" / "0" / "0"
    pred_bytes, done_bytes = chunk.read_bytes(), done_chunk.read_bytes()
    chunk.unlink()
    done_chunk.unlink()                        # nothing fitted yet: done's fill value, False
    assert damage.verify(copy).ok              # the store before the block: intact
    real = integrity.read_damage

    def a_run_writes_the_block_meanwhile(*args):
        if not chunk.exists():
            chunk.write_bytes(pred_bytes)      # the writer's order: pred, then done
            done_chunk.write_bytes(done_bytes)
        return real(*args)

    monkeypatch.setattr(integrity, "read_damage", a_run_writes_the_block_meanwhile)
    found = damage.verify(copy)
    assert found.ok, found.text()
    monkeypatch.undo()
    assert damage.verify(copy).ok and tree_digest(copy) == tree_digest(finished[1])


def test_a_link_planted_as_the_grow_marker_is_not_a_grow(copy, tmp_path):
    """A symbolic link in the grow marker's place (``s.zarr.growing`` -> a file) made every read
    of the store by a live run, that run's own included, wait 120 s for "another cvflow run"
    and exit 2 (`cvflow run` on a complete store). cvflow never writes its marker as a link
    (a grow refuses one): no run grows the store, it is read as it is."""
    from cvflow.store.group import stable
    from cvflow.store.lock import RunLock

    (tmp_path / "precious").write_text("precious")
    (tmp_path / "s.zarr.growing").symlink_to(tmp_path / "precious")
    lock = RunLock(copy, heartbeat=5, stale_after=120)
    lock.acquire()                             # a live run holds the store (this process)
    try:
        assert stable(str(copy), lambda: "read", wait=1) == "read"
    finally:
        lock.release()
    assert (tmp_path / "precious").read_text() == "precious"


@pytest.mark.parametrize("junk", [b"", b"{not json", b'{"cvflow": "creating"}'])
def test_a_file_that_is_no_grow_record_in_the_markers_place_is_not_a_grow(copy, tmp_path, junk):
    """An empty or foreign file as ``s.zarr.growing`` (a cut copy, a user's file) made every read
    of a store with a live lock wait 120 s for "another cvflow run" and exit 2. cvflow writes
    its marker whole (location.put: written beside, renamed over), so a marker that is no grow
    record was not written by a grow: the store is read as it is."""
    from cvflow.store.group import stable
    from cvflow.store.lock import RunLock

    (tmp_path / "s.zarr.growing").write_bytes(junk)
    lock = RunLock(copy, heartbeat=5, stale_after=120)
    lock.acquire()
    try:
        assert stable(str(copy), lambda: "read", wait=1) == "read"
    finally:
        lock.release()


def test_put_writes_a_file_whole_and_never_through_a_link(tmp_path):
    """location.put replaces a file in one step (a reader sees the old or the new bytes) and
    replaces a link in its place instead of writing where it points; nothing is left beside."""
    from cvflow.store.location import put

    (tmp_path / "precious").write_text("precious")
    (tmp_path / "marker").symlink_to(tmp_path / "precious")
    put(str(tmp_path / "marker"), b"new")
    assert not (tmp_path / "marker").is_symlink()
    assert (tmp_path / "marker").read_bytes() == b"new"
    assert (tmp_path / "precious").read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["marker", "precious"]


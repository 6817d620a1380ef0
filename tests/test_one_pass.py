"""The one pass over ``pred`` (cvflow.estimators.one_pass.split_sums) against a brute-force numpy
computation over the whole cube, written here from the definitions (docs/guide/estimators.md),
and against np_roles' kernels on the whole loss array (the reducers' answers before the pass).

Designs: K-fold, repeated K-fold, pair splits, failed fits and partial NaN/inf, sample weights,
several losses in one pass, a held-out test set; a store read by its location in blocks (one
group of params, and many groups under a tiny budget), and on a distributed cluster's workers.
"""
from __future__ import annotations

import dask
import numpy as np
import pytest

import cvflow
from cvflow.estimators import np_roles
from cvflow.estimators.one_pass import split_sums
from cvflow.errors import InputError
from cvflow.testing import cube_from_predictions, simple_design

ALL = ("full", "fold", "pair", "oof", "change", "train")
LOSSES = {"squared": lambda y, p: (y - p) ** 2, "absolute": lambda y, p: np.abs(y - p)}


def brute(pred, y, fold, fold_split, pair_split, full, loss, weights=None):
    """Every term from its definition, one loop iteration per (param, role); ``fold`` (R, n)
    with -1 on held-out samples; NaN anywhere in a set makes its sum NaN."""
    L = LOSSES[loss](y[None, None, :], pred)                  # (P, S, n)
    n_params = L.shape[0]
    analysis = fold[0] >= 0
    w = np.ones(len(y)) if weights is None else weights
    r_count, k = fold_split.shape
    out = {name: np.zeros((n_params, r_count, k)) for name in
           ("fold_sum", "fold_risk", "train_sum", "fold_change")}
    out["inner_sum"] = np.zeros((n_params, r_count, k, k))
    out["inner_change"] = np.zeros((n_params, r_count, k, k))
    out["oof_loss"] = np.zeros((n_params, r_count, len(y)))
    out["full_risk"] = np.array([L[h, full, analysis].mean() for h in range(n_params)])
    out["test_risk"] = np.array([L[h, full, ~analysis].mean() for h in range(n_params)])
    for h in range(n_params):
        for r in range(r_count):
            for j in range(k):
                s, test = fold_split[r, j], fold[r] == j
                out["fold_sum"][h, r, j] = np.sum(L[h, s, test] * w[test])
                out["fold_risk"][h, r, j] = np.sum(L[h, s, analysis] * w[analysis]) / w[analysis].sum()
                train = analysis & ~test
                out["train_sum"][h, r, j] = np.sum(L[h, s, train] * w[train])
                out["fold_change"][h, r, j] = np.mean(np.abs(L[h, s, analysis] - L[h, full, analysis]))
                out["oof_loss"][h, r, test] = L[h, s, test]
                for m in range(k):
                    if m == j:
                        continue
                    p, rest = pair_split[r, j, m], analysis & (fold[r] != j)
                    out["inner_sum"][h, r, j, m] = np.sum(L[h, p, fold[r] == m])
                    out["inner_change"][h, r, j, m] = np.mean(np.abs(L[h, p, rest] -
                                                                     L[h, fold_split[r, j], rest]))
    return out


def hand_cube(n=37, folds=4, repeats=1, n_params=5, seed=0, test=5):
    rng = np.random.default_rng(seed)
    is_test = np.zeros(n, bool)
    is_test[n - test:] = True
    design = simple_design(n, folds, repeats=repeats, pairs=True, is_test=is_test, seed=seed)
    y = rng.normal(size=n)
    pred = y + rng.normal(size=(n_params, design.n_splits, n)) * (1 + np.arange(n_params))[:, None, None]
    return cube_from_predictions(pred, y, design), design


def check(cube, design, losses=("squared",), weights=None, roles=ALL, rtol=1e-12):
    sums = split_sums(cube, list(losses), roles=roles, weights=weights)
    pred = np.asarray(cube["pred"].values)
    for loss in losses:
        expected = brute(pred, np.asarray(cube["y"].values), design.fold, design.fold_split,
                         design.pair_split, int(design.full_split), loss, weights)
        got = sums[loss]
        for term, value in got.items():
            np.testing.assert_allclose(value, expected[term], rtol=rtol, atol=1e-14,
                                       err_msg=f"{loss}.{term}")
    return sums


@pytest.mark.parametrize("folds,repeats", [(4, 1), (3, 3), (5, 2)])
def test_every_term_equals_brute_force(folds, repeats):
    cube, design = hand_cube(folds=folds, repeats=repeats, seed=folds + repeats)
    sums = check(cube, design, losses=("squared", "absolute"))
    assert set(sums["absolute"]) == {"full_risk", "test_risk", "fold_sum", "fold_risk",
                                     "train_sum", "fold_change", "inner_sum", "inner_change",
                                     "oof_loss"}


def test_every_term_equals_np_roles_kernels_on_the_whole_loss_array():
    """The reducers' kernels before the pass (np_roles on every loss in memory) give the same."""
    cube, design = hand_cube(folds=4, repeats=2, seed=7)
    losses = (np.asarray(cube["y"].values) - np.asarray(cube["pred"].values)) ** 2
    member = np_roles.fold_members(design.fold, 4)
    analysis = design.fold[0] >= 0
    full = losses[:, int(design.full_split)]
    folds = losses[:, design.fold_split]
    expected = {**np_roles.full_terms(full, analysis),
                **np_roles.fold_terms(folds, member, analysis, full, train=True),
                **np_roles.pair_terms(losses, design.pair_split, design.fold_split, member,
                                      analysis),
                "oof_loss": np_roles.out_of_fold(folds, member)}
    got = split_sums(cube, "squared", roles=ALL)["squared"]
    assert set(got) == set(expected)
    for term in got:
        np.testing.assert_allclose(got[term], expected[term], rtol=1e-12, atol=1e-15, err_msg=term)


def test_failed_fits_and_partial_nan_or_inf_reach_only_the_sets_they_cover():
    cube, design = hand_cube(folds=4, seed=3)
    pred = cube["pred"].values.copy()
    pred[1, design.fold_split[0, 2]] = np.nan                  # a failed fold fit
    pred[2, design.pair_split[0, 0, 1]] = np.nan               # a failed pair fit
    sample = int(np.flatnonzero(design.fold[0] == 3)[0])
    pred[3, design.fold_split[0, 1], sample] = np.nan          # one NaN prediction, in fold 3
    pred[4, design.full_split, sample] = np.inf                # one infinite prediction
    cube = cube.assign(pred=(cube["pred"].dims, pred))
    sums = check(cube, design)["squared"]
    assert np.isnan(sums["fold_sum"][1, 0, 2]) and np.isfinite(sums["fold_sum"][1, 0, 1])
    # the NaN of param 3's fold-1 fit is on a sample of fold 3: its test sum is intact
    assert np.isfinite(sums["fold_sum"][3, 0, 1]) and np.isnan(sums["fold_risk"][3, 0, 1])
    assert np.isinf(sums["full_risk"][4])


def test_sample_weights():
    cube, design = hand_cube(folds=5, repeats=2, seed=11)
    weights = np.random.default_rng(0).uniform(0.2, 3.0, size=cube.sizes["sample"])
    check(cube, design, losses=("squared", "absolute"), weights=weights,
          roles=("fold", "train", "full"))


def test_weights_and_change_are_refused():
    cube, _ = hand_cube()
    with pytest.raises(ValueError, match="fold_change is not weighted"):
        split_sums(cube, roles=("change",), weights=np.ones(cube.sizes["sample"]))


def test_unknown_role_and_missing_splits_are_named():
    cube, _ = hand_cube()
    with pytest.raises(InputError, match="'pairs' is not a role"):
        split_sums(cube, roles=("pairs",))
    no_pairs = cube.assign(pair_split=cube["pair_split"] * 0 - 1)
    with pytest.raises(InputError, match="needs the pair splits"):
        split_sums(no_pairs, roles=("pair",))
    with pytest.raises(InputError, match="give a cube"):
        split_sums(3)


STUDY = """\
name: pass
data: {{source: synthetic, name: linear, params: {{n: 60, p: 4}}, test_fraction: 0.2}}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {{alpha: {{logspace: [-3, 3, 9]}}}}
design: {{folds: 4, repeats: {repeats}, seed: 0}}
estimators: [kfold, corrected_kfold, stability, nested_cv]
execution: {{fits_per_task: {per_task}}}
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from cvflow.execution.run import run

    tmp = tmp_path_factory.mktemp("pass")
    wf = tmp / "wf.yaml"
    wf.write_text(STUDY.format(repeats=2, per_task=5))
    return str(run(wf, store=tmp / "s.zarr").store)


def _brute_store(location):
    cube = cvflow.open(location)
    fold = np.asarray(cube["fold"].values)
    return brute(np.asarray(cube["pred"].values, dtype=np.float64), np.asarray(cube["y"].values),
                 fold, np.asarray(cube["fold_split"].values), np.asarray(cube["pair_split"].values),
                 int(cube.attrs["full_split"]), "squared")


@pytest.mark.parametrize("budget", [None, 1])
def test_a_store_read_by_location_in_blocks(store, budget):
    """Tasks read their blocks from the store themselves (one group of params; with a one-byte
    budget one param a group and one split chunk a task): the brute-force terms either way."""
    expected = _brute_store(store)
    with dask.config.set({} if budget is None else {"cvflow.reduce.in-memory-bytes": budget}):
        for source in (store, cvflow.open(store)):
            got = split_sums(source, "squared", roles=ALL)["squared"]
            for term in got:
                np.testing.assert_allclose(got[term], expected[term], rtol=1e-12, atol=1e-15,
                                           err_msg=term)


def test_reports_of_a_store_equal_the_estimators_on_the_cube_in_memory(store):
    """kfold, corrected_kfold, stability, nested_cv through the pass (lazy store, tiny budget)
    equal the same estimators on the cube read whole into memory."""
    from cvflow.report import compute

    lazy = cvflow.open(store)
    eager = lazy.assign(pred=lazy["pred"].compute())
    names = ["kfold", "corrected_kfold", "stability", "nested_cv"]
    with dask.config.set({"cvflow.reduce.in-memory-bytes": 1}):
        got = compute(lazy, names)
    for name in names:
        alone = cvflow.estimators.REGISTRY[name](eager)
        for var in alone.data_vars:
            np.testing.assert_allclose(np.asarray(got[name][var].values, dtype=float),
                                       np.asarray(alone[var].values, dtype=float), rtol=1e-12,
                                       equal_nan=True, err_msg=f"{name}.{var}")


def test_on_a_distributed_clusters_workers(store, client):
    """Under an active Client the pass runs on its workers (process workers that open the
    store themselves); the same terms as the brute force."""
    from distributed import Client, get_task_stream

    expected = _brute_store(store)
    with Client(client.scheduler.address) as active, get_task_stream(client=active) as stream:
        got = split_sums(store, "squared", roles=ALL)["squared"]
    assert any(str(t["key"]).startswith(("cvflow-pass-", "('cvflow-pass-"))
               for t in stream.data), "no pass task ran on the cluster"
    for term in got:
        np.testing.assert_allclose(got[term], expected[term], rtol=1e-12, atol=1e-15, err_msg=term)


@pytest.mark.parametrize("scheduler", ["sync", "threads", "processes"])
def test_under_a_configured_scheduler(store, scheduler):
    """Under any scheduler dask config names the same terms as the brute force: those of this
    process write each block's sums into the terms as they end, another process's tasks send
    them back (none is lost)."""
    expected = _brute_store(store)
    with dask.config.set(scheduler=scheduler):
        got = split_sums(store, "squared", roles=ALL)["squared"]
    for term in expected:
        np.testing.assert_allclose(got[term], expected[term], rtol=1e-12, atol=1e-15, err_msg=term)


@pytest.fixture
def reads(monkeypatch):
    """The (params, splits) of every read of the store the one pass makes, in order."""
    import cvflow.estimators.one_pass as one_pass

    seen = []
    real = one_pass.read_store_block

    def counted(location, params, splits, *opened):
        seen.append((params, splits))
        return real(location, params, splits, *opened)

    monkeypatch.setattr(one_pass, "read_store_block", counted)
    return seen


def test_each_chunk_of_a_store_is_read_once_and_references_once_more(store, reads):
    """A block task reads whole split chunks of every param, each once; stability's change
    terms add one read of the full split (its reference) and nothing else."""
    cube = cvflow.open(store)
    shard = int((cube["pred"].encoding.get("shards") or cube["pred"].encoding["chunks"])[1])
    n_splits = cube.sizes["split"]
    for roles, extra in ((("fold",), 0), (("full", "fold", "change"), 1)):
        reads.clear()
        split_sums(store, "squared", roles=roles)
        blocks = [r for r in reads if isinstance(r[1], slice)]
        assert len(reads) - len(blocks) == extra                   # the reference read
        covered = np.zeros(n_splits, int)
        for params, splits in blocks:
            assert params == slice(0, cube.sizes["param"])
            assert splits.start % shard == 0
            covered[splits] += 1
        assert covered.max() == 1                                  # no chunk read twice
        if extra:
            (params, splits), = [r for r in reads if not isinstance(r[1], slice)]
            assert list(splits) == [int(cube.attrs["full_split"])]


def test_a_missing_chunk_the_pass_reads_is_named(store, tmp_path):
    """A pred object a done fit wrote, deleted: the pass names it (one listing, before any task
    reads fill values for it); with a tiny budget too."""
    import shutil

    from cvflow.store.integrity import DamagedStore

    copy = tmp_path / "s.zarr"
    shutil.copytree(store, copy)
    encoding = cvflow.open(store)["pred"].encoding
    shard = int((encoding.get("shards") or encoding["chunks"])[1])
    chunk = (0, int(cvflow.open(store).attrs["full_split"]) // shard)     # the full fit's
    (copy / "pred" / "c" / str(chunk[0]) / str(chunk[1]) / "0").unlink()
    cube = cvflow.open(str(copy))
    split_sums(cube, "squared", roles=("pair",))          # a chunk the pass does not read
    for budget in (None, 1):
        with dask.config.set({} if budget is None else {"cvflow.reduce.in-memory-bytes": budget}):
            with pytest.raises(DamagedStore, match=rf"pred chunk \({chunk[0]}, {chunk[1]}, 0\) is missing"):
                split_sums(cube, "squared", roles=("full", "fold"))


def test_pair_terms_read_each_chunk_once_and_again_only_fold_splits_before_a_block(store, reads):
    """With the pair splits (inner_change subtracts the fold fit's losses), the blocks still read
    each chunk once; the other reads are the full split (stability's reference) and fold splits
    a block's pair splits need that lie before the block (with a one-byte budget: one split
    chunk a task); the terms equal the brute force."""
    cube = cvflow.open(store)
    folds = set(np.asarray(cube["fold_split"].values).ravel().tolist())
    full = int(cube.attrs["full_split"])
    with dask.config.set({"cvflow.reduce.in-memory-bytes": 1}):
        got = split_sums(store, "squared", roles=("pair", "change"))["squared"]
    blocks = [r for r in reads if isinstance(r[1], slice)]
    covered = np.zeros((cube.sizes["param"], cube.sizes["split"]), int)
    for params, splits in blocks:
        covered[params, splits] += 1
    assert covered.max() == 1
    again = [int(s) for _, splits in reads if not isinstance(splits, slice) for s in splits]
    assert again and set(again) <= folds | {full}
    expected = _brute_store(store)
    for term in got:
        np.testing.assert_allclose(got[term], expected[term], rtol=1e-12, atol=1e-15, err_msg=term)

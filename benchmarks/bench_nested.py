"""Nested selection: cvflow (one run, three estimators) vs scikit-learn's nested CV.

CART, max_depth 1..10 x min_samples_leaf 1..10 (100 params), diabetes, 5 outer folds; the
inner CV of each outer fold is the 4 other folds on both sides (scikit-learn gets the very
same folds through LeaveOneGroupOut on the fold labels).

- cvflow: ``cvflow.run`` (fits the full, fold and pair splits into a store) then
  ``corrected_kfold``, ``nested_cv`` and ``stability_nested`` on the reopened store
  (``cvflow.report.compute``, what ``cvflow report`` runs: ``pred`` is read once).
- scikit-learn: ``cross_validate(GridSearchCV(tree, grid, cv=inner), X, y, cv=outer)`` with
  n_jobs=2 on the GridSearchCV or on cross_validate (the faster of the two is the reference).

Run: ``python benchmarks/bench_nested.py [--runs 5]``
"""
from __future__ import annotations

import common  # noqa: I001 - first: one BLAS thread before numpy loads

import argparse
import os
import statistics

import numpy as np


CONFIG = {
    "name": "bench_nested_cart",
    "data": {"source": "sklearn", "name": "diabetes", "seed": 0},
    "task": "regression",
    "loss": "squared",
    "learners": [{"name": "cart", "class": "sklearn.tree.DecisionTreeRegressor",
                  "params": {"random_state": 0},
                  "grid": {"max_depth": {"range": [1, 11, 1]},
                           "min_samples_leaf": {"range": [1, 11, 1]}}}],
    "design": {"folds": 5, "repeats": 1, "splitter": "kfold", "seed": 0},
    "estimators": ["corrected_kfold", "nested_cv", {"stability_nested": {"lambdas": [0, 0.1, 1, 10]}}],
    "execution": {"fits_per_task": "auto"},
}
REDUCERS = [("corrected_kfold", {}), ("nested_cv", {}),
            ("stability_nested", {"lambdas": [0, 0.1, 1, 10]})]


def cvflow_once(wf, store, client):
    import shutil
    import time

    import cvflow
    from cvflow.execution.run import run
    from cvflow.report import compute

    shutil.rmtree(store, ignore_errors=True)
    t0 = time.perf_counter()
    result = run(wf, store=store, client=client)
    t1 = time.perf_counter()
    # what `cvflow report STORE` does: open the store, read pred once, run the estimators
    out = compute(cvflow.open(store), REDUCERS)
    t2 = time.perf_counter()
    return {"fit": t1 - t0, "reduce": t2 - t1, "total": t2 - t0, "result": result, "out": out}


def sklearn_once(X, y, fold, where: str):
    from sklearn.model_selection import GridSearchCV, LeaveOneGroupOut, cross_validate
    from sklearn.tree import DecisionTreeRegressor

    grid = {"max_depth": list(range(1, 11)), "min_samples_leaf": list(range(1, 11))}
    inner_jobs, outer_jobs = (2, None) if where == "inner" else (None, 2)
    search = GridSearchCV(DecisionTreeRegressor(random_state=0), grid, cv=LeaveOneGroupOut(),
                          scoring="neg_mean_squared_error", n_jobs=inner_jobs)
    return cross_validate(search, X, y, groups=fold, cv=LeaveOneGroupOut(), params={"groups": fold},
                          scoring="neg_mean_squared_error", n_jobs=outer_jobs,
                          return_estimator=True)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)

    with common.scratch() as tmp, common.dask_client() as client:
        wf = common.workflow(CONFIG, tmp)
        study = wf.build()
        X, y = study.data.X, study.data.y
        fold = common.fold_labels(wf)
        store = tmp / "nested.zarr"

        phases = []

        def timed_cvflow():
            out = cvflow_once(wf, store, client)
            phases.append(out)
            return out

        # interleaved (cvflow, scikit-learn inner, outer, cvflow, ...): a shared machine's load
        # changes hit all three alike; cvflow's time is its run + reducers (not the removal of
        # the previous run's store)
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        (_, *sk_times), (last, *sk_res_all) = common.interleaved(
            (timed_cvflow, lambda: sklearn_once(X, y, fold, "inner"),
             lambda: sklearn_once(X, y, fold, "outer")), runs=args.runs)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        phases = phases[1:]                                   # drop the warm-up run
        cv_times = [p["total"] for p in phases]
        cv_med = statistics.median(cv_times)
        sk = {where: (statistics.median(t), t, r)
              for where, t, r in zip(("inner", "outer"), sk_times, sk_res_all)}
        best = min(sk, key=lambda k: sk[k][0])
        sk_med, _, sk_res = sk[best]

        result = last["result"]
        stats = common.store_stats(store, result.tasks, len(study.params), study.design.n_splits,
                                   X.shape[0])
        # the same choices on the same folds: cvflow's nested_cv vs GridSearchCV's best params
        nested = last["out"]["nested_cv"]
        sk_choice = [(e.best_params_["max_depth"], e.best_params_["min_samples_leaf"])
                     for e in sk_res["estimator"]]
        cv_choice = [(c["params"]["max_depth"], c["params"]["min_samples_leaf"])
                     for c in nested.attrs["chosen_params"][0]]
        sk_score = -float(np.average(sk_res["test_score"],
                                     weights=np.bincount(fold[fold >= 0])))

    ratio = cv_med / sk_med
    fit_med = statistics.median(p["fit"] for p in phases)
    reduce_med = statistics.median(p["reduce"] for p in phases)
    reduce_share = statistics.median(p["reduce"] / p["fit"] for p in phases)
    print(f"machine: {common.machine()}")
    print(f"nested CART selection, diabetes (n={X.shape[0]}), 100 params, 5 outer folds; "
          f"medians of {args.runs} runs")
    print(common.row("cvflow run + 3 reducers, wall s (median)", f"{cv_med:.2f}"))
    print(f"  runs: cvflow {', '.join(f'{t:.2f}' for t in cv_times)}; scikit-learn "
          + "; ".join(f"{w} {', '.join(f'{t:.2f}' for t in sk[w][1])}" for w in sk))
    print(common.row("  fit phase (run) s / reducers s (medians)",
                     f"{fit_med:.2f} / {reduce_med:.3f}"))
    for where in ("inner", "outer"):
        print(common.row(f"scikit-learn nested CV, n_jobs=2 on {where}, wall s", f"{sk[where][0]:.2f}"))
    print(common.row("ratio cvflow / scikit-learn (best)", f"{ratio:.2f}", "<= 0.70", ratio <= 0.7))
    print(common.row("fits: cvflow / scikit-learn", f"{result.fits_executed} / "
                     f"{5 * (100 * 4 + 1)}"))
    print(common.row("fits executed / distinct (param, training set)",
                     f"{result.fits_per_distinct:.3f}", "== 1.000", result.fits_per_distinct == 1.0))
    print(common.row("reducers / fit phase (median over runs)", f"{reduce_share:.1%}", "<= 5%",
                     reduce_share <= 0.05))
    print(common.row("pred bytes on disk / raw float64", f"{stats['pred_ratio']:.3f}", "<= 1.1",
                     stats["pred_ratio"] <= 1.1))
    print(common.row("whole store bytes / raw pred bytes", f"{stats['store_ratio']:.3f}"))
    print(common.row("files in store / (tasks + 50)", f"{stats['files']} / {stats['tasks'] + 50}",
                     "<= 1", stats["files"] <= stats["tasks"] + 50))
    print(common.row("tasks, chunk (params, splits)", f"{result.tasks}, {result.chunks}"))
    print(common.row("nested CV error: cvflow / scikit-learn",
                     f"{float(nested['estimate']):.1f} / {sk_score:.1f}"))
    same = sum(a == b for a, b in zip(cv_choice, sk_choice))
    print(common.row("outer folds where both chose the same (depth, leaf)", f"{same} / 5"))
    return {"cvflow": cv_med, "sklearn": sk_med, "ratio": ratio, "reduce_share": reduce_share,
            "store": stats, "cvflow_times": cv_times, "choices": (cv_choice, sk_choice)}


if __name__ == "__main__":
    main()

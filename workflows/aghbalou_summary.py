"""Run the Aghbalou et al. reproduction workflows for K = 2, 3, 4, 5 and print the comparison.

For each ``workflows/aghbalou_*.yaml`` and each K the workflow is run with ``design.folds = K``
into ``<store-dir>/<name>_k<K>.zarr`` (re-running reuses finished fits), then reduced with
``corrected_kfold``. The table gives, for the param chosen by the plain K-fold and by the
bias-corrected K-fold, the test risk of its full fit on the held-out third (the paper's eq. 7.1,
Tables 1 and 2), plus the best test risk over the grid (an oracle no criterion can beat).

    python workflows/aghbalou_summary.py [--store-dir /tmp/aghbalou] [--folds 2 3 4 5]
                                         [--json FILE] [WORKFLOW ...]

One LocalCluster serves every run. Expect a few minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent


def run_one(path: Path, folds: int, store_dir: Path, client, loss: str | None) -> dict:
    import cvflow
    from cvflow.execution.run import run
    from cvflow.estimators import corrected_kfold
    from cvflow.workflow.spec import parse_workflow

    config = yaml.safe_load(path.read_text())
    config = copy.deepcopy(config)
    config.setdefault("design", {})["folds"] = folds
    config["name"] = f"{config.get('name', path.stem)}_k{folds}"
    workflow = parse_workflow(config, path)
    store = store_dir / f"{workflow.name}.zarr"
    t0 = time.perf_counter()
    result = run(workflow, store=store, client=client)
    seconds = time.perf_counter() - t0
    res = corrected_kfold(cvflow.open(store), loss=loss)
    c = res["C"].values if "C" in res.coords else None

    def chosen(index: int):
        return None if c is None or index < 0 else float(c[index])

    import numpy as np

    best = int(np.nanargmin(res["full_test_risk"].values))
    return {
        "dataset": path.stem.removeprefix("aghbalou_"), "K": folds, "loss": res.attrs["loss"],
        "kfold_C": chosen(int(res["kfold_selected"])),
        "kfold_test_risk": float(res["kfold_test_risk"]),
        "corrected_C": chosen(int(res["selected"])),
        "corrected_test_risk": float(res["test_risk"]),
        "best_C": chosen(best), "best_test_risk": float(res["full_test_risk"][best]),
        "fits": result.total_fits, "failed": result.failed, "seconds": round(seconds, 1),
    }


def table(rows: list[dict]) -> str:
    head = (f"{'dataset':<14} {'K':>2} {'loss':<8} {'K-fold C':>9} {'test risk':>10} "
            f"{'corr. C':>9} {'test risk':>10} {'winner':<9} {'best C':>8} {'best risk':>10}")
    lines = [head, "-" * len(head)]
    for r in rows:
        a, b = r["kfold_test_risk"], r["corrected_test_risk"]
        winner = "corrected" if b < a else ("K-fold" if a < b else "tie")
        lines.append(
            f"{r['dataset']:<14} {r['K']:>2} {r['loss']:<8} {r['kfold_C']:>9.4g} {a:>10.5g} "
            f"{r['corrected_C']:>9.4g} {b:>10.5g} {winner:<9} {r['best_C']:>8.4g} "
            f"{r['best_test_risk']:>10.5g}")
    wins = sum(r["corrected_test_risk"] < r["kfold_test_risk"] for r in rows)
    ties = sum(r["corrected_test_risk"] == r["kfold_test_risk"] for r in rows)
    losses = len(rows) - wins - ties
    lines.append(f"corrected K-fold's choice has lower test risk in {wins}, equal in {ties}, "
                 f"higher in {losses} of {len(rows)} (dataset, K) cases")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workflows", nargs="*", type=Path,
                        default=sorted(HERE.glob("aghbalou_*.yaml")))
    parser.add_argument("--folds", nargs="+", type=int, default=[2, 3, 4, 5])
    parser.add_argument("--store-dir", type=Path, default=Path("/tmp/aghbalou"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--loss", default=None, help="override the workflows' loss")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args(argv)

    from cvflow.execution.schedulers import connect

    args.store_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    with connect("local", workers=args.workers) as client:
        for path in args.workflows:
            for k in args.folds:
                rows.append(run_one(path, k, args.store_dir, client, args.loss))
                r = rows[-1]
                print(f"{r['dataset']} K={k}: {r['fits']} fits in {r['seconds']} s", file=sys.stderr,
                      flush=True)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""scikit-learn's estimator checks on cvflow.SearchCV against GridSearchCV (issue 31 item 2).

    python tests/compat/estimator_checks.py [--timeout 120] [--json out.json]

Runs every check of ``sklearn.utils.estimator_checks.estimator_checks_generator`` (legacy ones
included) on ``SearchCV(DecisionTreeClassifier(), {"max_depth": [1, 2]}, select="kfold",
cluster="threads")`` (``--cluster auto``: SearchCV's default, worker processes) and on
``GridSearchCV`` with the same arguments, each check in its own
forked process with a timeout (a check that stalls, say on worker processes, is killed and
reported as "timeout"), and prints the checks that fail (or stall) for SearchCV but pass for
GridSearchCV, with their messages. Not collected by pytest (a script; minutes of runtime).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import sys
import time
import traceback
import warnings


def estimators(cluster: str | None = "threads"):
    from sklearn.model_selection import GridSearchCV
    from sklearn.tree import DecisionTreeClassifier

    import cvflow

    grid = {"max_depth": [1, 2]}
    return {"SearchCV": cvflow.SearchCV(DecisionTreeClassifier(), grid, select="kfold",
                                        cluster=cluster),
            "GridSearchCV": GridSearchCV(DecisionTreeClassifier(), grid)}


def checks(estimator) -> list[tuple[str, object, object]]:
    """(name, estimator, check) of every check, a name repeated for several instances numbered."""
    from sklearn.utils.estimator_checks import _check_name, estimator_checks_generator

    out, seen = [], {}
    for est, check in estimator_checks_generator(estimator, legacy=True, mark=None):
        name = _check_name(check)
        seen[name] = seen.get(name, 0) + 1
        out.append((name if seen[name] == 1 else f"{name}#{seen[name]}", est, check))
    return out


def _child(conn, est, check) -> None:
    os.setpgid(0, 0)            # its own process group: a timeout ends its worker processes too
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")
    warnings.simplefilter("ignore")
    try:
        check(est)
        conn.send(("pass", ""))
    except BaseException as exc:  # noqa: BLE001 - a check's failure is the result
        kind = "skip" if type(exc).__name__ in ("SkipTest", "Skipped") else "fail"
        line = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if "/cvflow/" in f.filename or "estimator_checks" in f.filename]
        where = f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
        conn.send((kind, f"{line[:300]} [{where}]"))
    finally:
        conn.close()


def run_one(est, check, timeout: float) -> tuple[str, str, float]:
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    start = time.perf_counter()
    proc = ctx.Process(target=_child, args=(child, est, check))
    proc.start()
    child.close()
    if parent.poll(timeout):
        try:
            result = parent.recv()
        except EOFError:
            result = ("fail", f"the check's process died (exit code {proc.exitcode})")
    else:
        result = ("timeout", f"no result after {timeout:g} s (killed)")
    proc.join(5)
    try:
        os.killpg(proc.pid, signal.SIGKILL)     # the check's process and any worker it left
    except (ProcessLookupError, PermissionError):
        pass
    proc.join()
    return result[0], result[1], time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per check")
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--only", help="run only the checks whose name contains this")
    parser.add_argument("--cluster", default="threads",
                        help="SearchCV's cluster ('threads'; 'auto' for its default: worker processes)")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, tuple[str, str, float]]] = {}
    cluster = None if args.cluster == "auto" else args.cluster
    for label, estimator in estimators(cluster).items():
        results[label] = {}
        for name, est, check in checks(estimator):
            if args.only and args.only not in name:
                continue
            outcome = run_one(est, check, args.timeout)
            results[label][name] = outcome
            print(f"{label:12s} {outcome[0]:7s} {outcome[2]:6.1f}s {name}  {outcome[1][:160]}",
                  flush=True)
    ours, ref = results["SearchCV"], results["GridSearchCV"]
    worse = sorted(n for n in ref if ref[n][0] == "pass" and ours.get(n, ("absent",))[0] != "pass")
    print(f"\nGridSearchCV passes {sum(r[0] == 'pass' for r in ref.values())} of {len(ref)} checks; "
          f"SearchCV passes {sum(r[0] == 'pass' for r in ours.values())} of {len(ours)}; "
          f"{len(worse)} pass for GridSearchCV only:")
    for name in worse:
        print(f"  {name}: {ours.get(name, ('absent', 'not generated for SearchCV'))[0]}: "
              f"{ours.get(name, ('', 'not generated for SearchCV', 0))[1]}")
    only_ours = sorted(set(ours) - set(ref))
    if only_ours:
        print(f"checks generated for SearchCV only: {', '.join(only_ours)}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Shared parts of the many-split reproductions: one cvflow run per random split, cached.

A study gives :func:`run_all` one job per (setting, split): a workflow config (plain data, as a
workflow file holds it) and a reduction of the finished store. Each job writes its config to
``<results>/<key>.yaml``, runs it with ``cvflow.load_workflow`` + ``cvflow.run`` on an
in-process Dask cluster (``cluster="threads"``, one worker; ``workers`` jobs run side by side in
separate processes), opens the store with ``cvflow.open`` and reduces it; the record is written
to ``<results>/<key>.json`` and the store removed (unless ``keep_store``). A record already on
disk is read back without running anything, so an interrupted study resumes where it stopped,
and an interrupted run resumes its own store (cvflow fits only what is not done).

The summaries are paired: both criteria of a split are scored on the same held-out test set,
so their difference (or ratio) is estimated per split and its standard error comes from the
spread of the per-split values.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import yaml


class Job(NamedTuple):
    """One cvflow run: its record ``<results>/<key>.json``, its workflow, its reduction
    (a module-level function cube -> dict of numbers)."""
    results: Path
    key: str
    config: dict
    reduce: Callable

    @property
    def record(self) -> Path:
        return self.results / f"{self.key}.json"


def run_cached(job: Job, keep_store: bool = False) -> dict:
    """The record of one job: read from disk, or run, reduced and saved."""
    import cvflow

    if job.record.is_file():
        return json.loads(job.record.read_text())
    job.results.mkdir(parents=True, exist_ok=True)
    workflow = job.results / f"{job.key}.yaml"
    workflow.write_text(yaml.safe_dump(job.config, sort_keys=False))
    store = job.results / f"{job.key}.zarr"
    t = time.perf_counter()
    run = cvflow.run(cvflow.load_workflow(workflow), store=store, cluster="threads", workers=1)
    out = dict(job.reduce(cvflow.open(store)))
    out.update(fits=int(run.total_fits), failed=int(run.failed),
               seconds=round(time.perf_counter() - t, 2))
    tmp = job.record.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(out))
    os.replace(tmp, job.record)
    if not keep_store:
        shutil.rmtree(store, ignore_errors=True)
    return out


def add_run_options(ap, results: Path, changed: str) -> None:
    """The options both study scripts share: workers, the records' directory, --no-run, --json;
    ``changed`` names the options whose change needs a new records directory."""
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--results", type=Path, default=results,
                    help="directory of the per-split records (reused: a rerun fits only what is "
                         "missing; records are keyed by split only, so use a new directory "
                         f"after changing {changed})")
    ap.add_argument("--no-run", action="store_true",
                    help="summarise the records already there, run nothing")
    ap.add_argument("--json", type=Path, default=None, help="also write the summary as JSON")


def run_all(jobs: list[Job], *, workers: int = 2, run: bool = True,
            keep_store: bool = False) -> list[dict | None]:
    """Every job's record, in the order given (None for a job not run when ``run`` is false).
    Missing records are computed in the order given by ``workers`` processes (in this process
    when ``workers`` is 1); progress and run times go to stderr."""
    out: list[dict | None] = [json.loads(j.record.read_text()) if j.record.is_file() else None
                              for j in jobs]
    todo = [i for i, r in enumerate(out) if r is None] if run else []
    if not todo:
        return out
    t = time.perf_counter()

    def done(n: int, i: int) -> None:
        print(f"[{n}/{len(todo)}, {time.perf_counter() - t:.0f} s] {jobs[i].results.name}/"
              f"{jobs[i].key}: {out[i]['fits']} fits, {out[i]['seconds']} s",
              file=sys.stderr, flush=True)

    if workers <= 1:
        for n, i in enumerate(todo, 1):
            out[i] = run_cached(jobs[i], keep_store)
            done(n, i)
        return out
    with ProcessPoolExecutor(workers) as pool:
        futures = {pool.submit(run_cached, jobs[i], keep_store): i for i in todo}
        for n, future in enumerate(as_completed(futures), 1):
            out[futures[future]] = future.result()
            done(n, futures[future])
    return out


def ratio_of_means(a, b) -> tuple[float, float]:
    """R = mean(a) / mean(b) over paired splits and its standard error (delta method:
    sd(a − R·b) / (√S · mean(b)))."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    r = a.mean() / b.mean()
    return float(r), float(np.std(a - r * b, ddof=1) / (math.sqrt(a.size) * b.mean()))


def mean_se(x) -> tuple[float, float]:
    """Mean and its standard error sd/√S."""
    x = np.asarray(x, float)
    return float(x.mean()), float(np.std(x, ddof=1) / math.sqrt(x.size))


def shares(a, b) -> tuple[float, float, float]:
    """Share of splits with a < b, a == b, a > b."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.mean(a < b)), float(np.mean(a == b)), float(np.mean(a > b))


def geometric_mean(ratios, ses) -> tuple[float, float]:
    """exp(mean log R_d) over independent settings and its standard error (delta method)."""
    r, s = np.asarray(ratios, float), np.asarray(ses, float)
    g = math.exp(np.mean(np.log(r)))
    return g, g * math.sqrt(np.sum((s / r) ** 2)) / r.size


def pct(value: float, se: float | None = None, digits: int = 1, sign: bool = True) -> str:
    """``+1.2% ± 0.3`` (percent; signed unless ``sign`` is false)."""
    text = f"{100 * value:{'+' if sign else ''}.{digits}f}%"
    return text if se is None else f"{text} ± {100 * se:.{digits}f}"

"""Shared set-up of the benchmarks: one BLAS thread, warm pools, medians, the machine.

Import this module first: it pins BLAS/OpenMP to one thread before numpy loads, on both sides
(Dask's workers and joblib's loky workers also run one BLAS thread each).
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")

import contextlib  # noqa: E402
import logging  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

threadpool_limits(1)
N_WORKERS = 2


def machine() -> str:
    """One line naming the CPU, cores, memory and the versions that matter."""
    import dask
    import sklearn
    import xarray
    import zarr

    cpu = platform.processor() or "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = ""
    with contextlib.suppress(OSError, ValueError):
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    return (f"{cpu}, {os.cpu_count()} cores{mem}; Python {platform.python_version()}, "
            f"numpy {np.__version__}, scikit-learn {sklearn.__version__}, dask {dask.__version__}, "
            f"xarray {xarray.__version__}, zarr {zarr.__version__}")


def median_time(fn, *, runs: int, warmup: int = 1):
    """(median seconds, list of seconds, last result) of ``fn()`` after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times, result = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, result


def interleaved(fns, *, runs: int) -> tuple[list[list[float]], list]:
    """Seconds of each of ``fns`` called in turn (a, b, ..., a, b, ...) ``runs`` times after one
    warm-up call of each, and each one's last result: on a shared machine a change of load
    then hits every side alike."""
    last = [fn() for fn in fns]
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            last[i] = fn()
            times[i].append(time.perf_counter() - t0)
    return times, last


def _one_blas_thread() -> None:
    threadpool_limits(1)


@contextlib.contextmanager
def dask_client(n_workers: int = N_WORKERS):
    """A warm LocalCluster: process workers, one thread each, on 127.0.0.1."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                      host="127.0.0.1", dashboard_address=":0",
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        client.run(_one_blas_thread)
        yield client


@contextlib.contextmanager
def scratch():
    """A temporary directory for stores, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="cvflow-bench-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def workflow(config: dict, where: Path):
    """A validated :class:`cvflow.workflow.spec.Workflow` from a dict (as a YAML file would give)."""
    from cvflow.workflow.spec import parse_workflow

    return parse_workflow(config, where / f"{config['name']}.yaml")


def fold_labels(wf) -> np.ndarray:
    """The workflow's fold labels of repeat 0 (so scikit-learn gets the very same folds)."""
    return np.asarray(wf.build().design.fold[0])


def store_stats(store: Path, n_tasks: int, n_params: int, n_splits: int, n_samples: int) -> dict:
    """Bytes of ``pred`` on disk vs raw float64, and the number of files vs tasks."""
    files = [p for p in store.rglob("*") if p.is_file()]
    pred_bytes = sum(p.stat().st_size for p in (store / "pred").rglob("*") if p.is_file())
    all_bytes = sum(p.stat().st_size for p in files)
    raw = n_params * n_splits * n_samples * 8
    return {"files": len(files), "tasks": n_tasks, "pred_bytes": pred_bytes,
            "store_bytes": all_bytes, "raw_pred_bytes": raw,
            "pred_ratio": pred_bytes / raw, "store_ratio": all_bytes / raw}


def row(name: str, value, target: str = "", ok: bool | None = None) -> str:
    mark = "" if ok is None else ("  ok" if ok else "  MISSED")
    return f"  {name:<58} {value:>14}  {target}{mark}"

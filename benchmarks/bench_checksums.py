"""The cost of crc32c on every chunk (cvflow.store.integrity.COMPRESSORS) against zstd alone.

A pred cube of 1e5 fits x 100 samples (100 params x 1000 splits, float64, 80 MB; random
predictions: zstd barely compresses them, as with real ones), written block by block as the
engine's tasks do (blocks of 10 params x 100 splits, 100 chunks of 0.8 MB) and read whole
as `report` does; and the scan a run makes before it plans (``store.pred_damage``: the
array listed, then every done block's chunk read on its own, 4 threads). Medians of
interleaved runs.

    python benchmarks/bench_checksums.py [--runs 5] [--dir /tmp]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import ZstdCodec

from cvflow.store import integrity

SHAPE, BLOCK = (100, 1000, 100), (10, 100, 100)


def _array(path: Path, compressors):
    return zarr.create_array(str(path), shape=SHAPE, chunks=BLOCK, dtype="float64",
                             fill_value=np.nan, compressors=compressors)


def _write(path: Path, compressors, values: np.ndarray) -> float:
    array = _array(path, compressors)
    t = time.perf_counter()
    for p in range(0, SHAPE[0], BLOCK[0]):
        for s in range(0, SHAPE[1], BLOCK[1]):
            array[p:p + BLOCK[0], s:s + BLOCK[1]] = values[p:p + BLOCK[0], s:s + BLOCK[1]]
    return time.perf_counter() - t


def _read(path: Path) -> float:
    t = time.perf_counter()
    zarr.open_array(str(path), mode="r")[...]
    return time.perf_counter() - t


def _scan(path: Path) -> float:
    """What store.pred_damage does for a store whose fits are all done."""
    from concurrent.futures import ThreadPoolExecutor

    t = time.perf_counter()
    array = zarr.open_array(str(path), mode="r")
    chunks = list(integrity.stored(array, integrity.array_objects(str(path.parent), path.name)))
    assert len(chunks) == 100
    with ThreadPoolExecutor(4) as pool:
        assert not any(pool.map(lambda c: integrity.read_damage("pred", array, c), chunks))
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    values = np.random.default_rng(0).normal(size=SHAPE)
    kinds = {"zstd": (ZstdCodec(level=0, checksum=False),), "zstd+crc32c": integrity.COMPRESSORS}
    ops = ("write", "read", "scan")
    times: dict[str, dict[str, list[float]]] = {k: {op: [] for op in ops} for k in kinds}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for _ in range(args.runs):
            for kind, compressors in kinds.items():
                path = Path(tmp) / f"{kind}.zarr"
                shutil.rmtree(path, ignore_errors=True)
                times[kind]["write"].append(_write(path, compressors, values))
                times[kind]["read"].append(_read(path))
                times[kind]["scan"].append(_scan(path))
    mb = values.nbytes / 1e6
    for kind in kinds:
        print(f"{kind:12s}" + "".join(
            f"  {op} {1e3 * statistics.median(times[kind][op]):6.1f} ms "
            f"({mb / statistics.median(times[kind][op]):4.0f} MB/s)" for op in ops))
    for op in ops:
        base, crc = (statistics.median(times[k][op]) for k in kinds)
        print(f"crc32c {op}: {100 * (crc - base) / base:+.1f}% ({(crc - base) * 1e3:+.1f} ms)")


if __name__ == "__main__":
    main()

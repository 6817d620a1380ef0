"""Block sizing: how many (param x split) fits one Dask task does."""
from __future__ import annotations

import math

# DESIGN CHOICE: a Dask task costs ~1.5-2 ms here; aim for tasks of a few tenths of a second so
# scheduling overhead is < 1% while still giving every worker several tasks to balance.
TARGET_TASK_SECONDS = 0.3


def choose_chunks(n_params: int, n_splits: int, *, seconds_per_fit: float, n_workers: int = 2,
                  fits_per_task: int | None = None) -> tuple[int, int]:
    """Chunk shape (params, splits) of a block.

    ``fits_per_task`` overrides the timing-based size. Blocks span whole param rows first
    (path-aware learners fit a grid per training set in one go), then several splits.
    """
    total = n_params * n_splits
    if fits_per_task is None:
        fits_per_task = max(1, int(TARGET_TASK_SECONDS / max(seconds_per_fit, 1e-6)))
        # keep at least ~4 tasks per worker for balance when the study is small
        fits_per_task = min(fits_per_task, max(1, math.ceil(total / (4 * n_workers))))
    bp = min(n_params, fits_per_task)
    bs = max(1, min(n_splits, fits_per_task // bp))
    return bp, bs

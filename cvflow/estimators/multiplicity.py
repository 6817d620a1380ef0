"""Adjusted p-values for a family of tests: Holm (family-wise error) and Benjamini–Hochberg
(false discovery rate). Numpy kernels that :mod:`compare_all` and :mod:`compare_learners` read.
"""
from __future__ import annotations

import numpy as np


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values: with p_(1) ≤ … ≤ p_(m),
    p̃_(k) = max_{j ≤ k} min(1, (m − j + 1)·p_(j)). NaN stays NaN and does not count in m."""
    p = np.asarray(p, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.size
    order = ok[np.argsort(p[ok], kind="stable")]
    scaled = (m - np.arange(m)) * p[order]
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled)) if m else scaled
    return out


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg's step-up adjusted p-values: with p_(1) ≤ … ≤ p_(m),
    p̃_(k) = min_{j ≥ k} min(1, m·p_(j)/j). NaN stays NaN and does not count in m."""
    p = np.asarray(p, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.size
    order = ok[np.argsort(p[ok], kind="stable")]
    scaled = m * p[order] / np.arange(1, m + 1)
    out[order] = np.minimum(1.0, np.minimum.accumulate(scaled[::-1])[::-1]) if m else scaled
    return out

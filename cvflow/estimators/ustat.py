"""U-statistic variance of the leave-(n-g)-out error estimator and the exact two-learner
test (Fuchs, Hornung, De Bin & Boulesteix; docs/guide/estimators.md), plus the Nadeau-Bengio corrected
resampled t-test from the same fits.

Notation. g is the learning-set size, D the analysis samples (n = |D|), a and b two params.
For a fit on learning set L and a test sample t in D \\ L the kernel is
``Φ_L(t) = ℓ_t(a, L) - ℓ_t(b, L)`` (``ℓ_t(a, L)`` alone in one-learner mode). The target is
Δ = e_a(g) - e_b(g). The complete U-statistic Δ̂ averages Φ over all (L, t).

The paper's unbiased estimator of Var(Δ̂) is ``v̂ = Σ_{c=1}^{m} α_c κ̂_c - (1 - α_0) Θ̂²``
(m = g + 1, α_c the hypergeometric H(n, m, m) mass function). Grouping the ordered pairs of
(g+1)-sets (S1, S2) of the square Δ̂² by their overlap c gives ``Δ̂² = Σ_{c=0}^{m} α_c κ̂_c``
with κ̂_0 = Θ̂², so ``v̂ = Δ̂² - Θ̂²``, where Θ̂² averages Φ_{L1}(t1)·Φ_{L2}(t2) over all
quadruples whose sets L1 ∪ {t1} and L2 ∪ {t2} are disjoint. It exists iff n >= 2g + 2.

Designs (how ``subset_split (group, member)`` is read):

- incomplete (both members present): group p holds two disjoint random learning sets. With
  φ̄_f the mean of Φ over the test samples of fit f and R_p = D \\ (L_p0 ∪ L_p1):
  Δ̃ = mean_f φ̄_f; Q = mean over ordered pairs of fits from different groups of φ̄ φ̄
  (unbiased for Δ̂² given the data); T = mean_p T_p with T_p the mean of Φ_p0(t1) Φ_p1(t2)
  over ordered t1 != t2 in R_p (unbiased for Θ̂²); v̂ = Q - T. The design variance of Δ̃
  given the data is the sample variance of the group means / P. Note
  ``v̂ + design variance = Δ̃² - T`` exactly.
- complete (member 1 absent, all C(n, g) learning sets present, as
  :func:`cvflow.workflow.designs.subset_splits` builds with ``complete=True``): Δ̂ and Θ̂² are
  computed exactly (every disjoint pair of learning sets, in row blocks of matrix
  products), v̂ = Δ̂² - Θ̂², design variance 0.

The numpy kernels (``*_terms``, ``*_stats``) know nothing of xarray; :func:`ustat` and
:func:`nadeau_bengio` read the cube chunk by chunk over groups (never all of ``pred``, never
an F x F matrix) and name the results.
"""
from __future__ import annotations

import logging
import math

import numpy as np
from ..lazy import xarray as xr

from ..errors import InputError
from . import guardrails
from .cube_losses import pointwise, pointwise_loss
from .labels import param_label, param_text
from ._readers import compare_pair
from .np_roles import nadeau_bengio_stats, normal_quantile
from .registry import Option, declare, fmt, integer, param_refs, probability

log = logging.getLogger(__name__)

# DESIGN CHOICE: read at most this many bytes of losses per chunk of groups; with n = 62 and
# two params that is ~4k groups per chunk; the peak memory is about 5x this.
CHUNK_BYTES = 8 * 2**20
# Row block for the complete design's pair sums: each block makes a few (rows x C) matrices.
COMPLETE_ROWS = 128


# ----------------------------------------------------------------------------------------
# numpy kernels
# ----------------------------------------------------------------------------------------

def pair_terms(phi0: np.ndarray, phi1: np.ndarray, test0: np.ndarray, test1: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-group terms of the incomplete design.

    Parameters
    ----------
    phi0, phi1 : (k, G, n) float
        Kernel values of members 0 and 1 of G groups (k kernels, e.g. difference, a, b);
        entries outside the member's test set are ignored.
    test0, test1 : (G, n) bool
        Test sets D \\ L of the two members.

    Returns
    -------
    phibar0, phibar1 : (k, G)
        Mean kernel over each member's test set.
    t : (k, G)
        T_p = [ΣΦ0 ΣΦ1 - ΣΦ0Φ1] / (r (r - 1)) over R_p = test0 & test1, r = |R_p|.
    """
    p0 = np.where(test0, phi0, 0.0)
    p1 = np.where(test1, phi1, 0.0)
    phibar0 = p0.sum(-1) / test0.sum(-1)
    phibar1 = p1.sum(-1) / test1.sum(-1)
    rest = test0 & test1
    r = rest.sum(-1).astype(np.float64)
    s0 = (p0 * rest).sum(-1)
    s1 = (p1 * rest).sum(-1)
    s01 = (p0 * p1 * rest).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = (s0 * s1 - s01) / (r * (r - 1.0))
    return phibar0, phibar1, t


def incomplete_stats(phibar: np.ndarray, t: np.ndarray) -> dict:
    """Δ̃, Q, T, v̂, the design variance and the design standard error of v̂ from group terms.

    ``phibar`` is (k, P, 2) (both members of every group), ``t`` is (k, P). Q, the mean of
    φ̄_f1 φ̄_f2 over ordered pairs of fits from different groups, is computed from sums:
    Q = [(Σ s_p)² - Σ s_p²] / (4 P (P - 1)) with s_p the sum of group p's two φ̄.
    """
    n_groups = phibar.shape[1]
    s = phibar.sum(-1)
    m = s / 2.0
    estimate = m.mean(-1)
    if n_groups >= 2:
        q = (s.sum(-1) ** 2 - (s ** 2).sum(-1)) / (4.0 * n_groups * (n_groups - 1))
        design_variance = m.var(-1, ddof=1) / n_groups
    else:
        q = np.full(s.shape[0], np.nan)
        design_variance = np.full(s.shape[0], np.nan)
    theta = t.mean(-1)
    # Monte Carlo (design) standard error of v̂ given the data, by linearisation: v̂ + design
    # variance = Δ̃² - T, whose per-group influence is 2 Δ̃ m_p - T_p.
    if n_groups >= 2:
        influence = 2.0 * estimate[:, None] * m - t
        variance_se = np.sqrt(influence.var(-1, ddof=1) / n_groups)
    else:
        variance_se = np.full(s.shape[0], np.nan)
    return {"estimate": estimate, "delta_sq": q, "theta_sq": theta, "variance": q - theta,
            "design_variance": design_variance, "variance_se": variance_se}


def complete_stats(phi: np.ndarray, train: np.ndarray, analysis: np.ndarray, *,
                   rows: int = COMPLETE_ROWS) -> dict:
    """Exact Δ̂, Δ̂², Θ̂² and v̂ = Δ̂² - Θ̂² from every learning set of size g.

    Parameters
    ----------
    phi : (k, C, n) float
        Kernel values of the C = C(n, g) fits; entries outside a fit's test set are ignored.
    train : (C, n) bool
        Learning sets.
    analysis : (n,) bool
        The samples of D.

    Θ̂² sums, over ordered pairs (i, j) of disjoint learning sets,
    ``(φ_i·c_j)(φ_j·c_i) - φ_i·φ_j`` with φ_i zero outside i's test set and c_j the indicator
    of D \\ L_j: that is Σ over t1 != t2 in R_ij of Φ_i(t1) Φ_j(t2). Every disjoint pair has
    r (r - 1) such quadruples, r = n - 2g, so Θ̂² is their plain mean. Cost O(C² n) in
    blocks of ``rows`` rows; memory O(rows · C).
    """
    test = analysis[None, :] & ~train
    c = test.astype(np.float64)
    tr = train.astype(np.float64)
    p = np.where(test[None], phi, 0.0)
    n_test = test.sum(-1)
    estimate = (p.sum(-1) / n_test).mean(-1)
    g = int(train[0].sum())
    r = int(analysis.sum()) - 2 * g
    k, n_fits = p.shape[0], p.shape[1]
    total = np.zeros(k)
    n_pairs = 0
    for i0 in range(0, n_fits, rows):
        i1 = min(i0 + rows, n_fits)
        disjoint = (tr[i0:i1] @ tr.T) < 0.5
        n_pairs += int(disjoint.sum())
        for h in range(k):
            a = p[h, i0:i1] @ c.T
            b = c[i0:i1] @ p[h].T
            d = p[h, i0:i1] @ p[h].T
            total[h] += float(((a * b - d) * disjoint).sum())
    theta = total / (n_pairs * r * (r - 1)) if n_pairs and r >= 2 else np.full(k, np.nan)
    return {"estimate": estimate, "delta_sq": estimate ** 2, "theta_sq": theta,
            "variance": estimate ** 2 - theta, "design_variance": np.zeros(k),
            "variance_se": np.zeros(k)}


def normal_test(estimate: float, variance: float, alpha: float) -> dict:
    """z, two-sided p-value and the (1 - alpha) interval; NaN when variance <= 0 or NaN."""
    if not np.isfinite(variance) or variance <= 0 or not np.isfinite(estimate):
        return {"se": np.nan, "z": np.nan, "p_value": np.nan, "lower": np.nan, "upper": np.nan}
    se = math.sqrt(variance)
    z = estimate / se
    q = normal_quantile(1 - alpha / 2)
    return {"se": se, "z": z, "p_value": math.erfc(abs(z) / math.sqrt(2)),
            "lower": estimate - q * se, "upper": estimate + q * se}


# ----------------------------------------------------------------------------------------
# reading the cube
# ----------------------------------------------------------------------------------------

def _subset_table(cube: xr.Dataset, where: str) -> tuple[np.ndarray, bool]:
    """The (group, member) table and whether it is the complete design."""
    if "subset_split" not in cube or cube["subset_split"].size == 0:
        raise InputError(f"cube: {where} needs the subset splits, which this store does not "
                         "have; add design.subset {size: g, pairs: P} and the estimator to the "
                         "workflow and run it again")
    table = np.asarray(cube["subset_split"].values, dtype=np.int64).reshape(-1, 2)
    if (table[:, 0] < 0).any():
        raise InputError(f"cube: {where}: subset_split has groups without a learning set")
    absent = table[:, 1] < 0
    if absent.all():
        return table, True
    if absent.any():
        raise InputError(f"cube: {where}: subset_split mixes complete (one member) and paired "
                         "groups; rebuild the design")
    return table, False


def _kernels(cube: xr.Dataset, a: int, b: int | None, splits: np.ndarray, loss: str
             ) -> np.ndarray:
    """Kernel rows (k, len(splits), n): [ℓ_a - ℓ_b, ℓ_a, ℓ_b], or [ℓ_a] in one-learner mode."""
    params = [a] if b is None else [a, b]
    lo, hi = int(splits[0]), int(splits[-1]) + 1  # splits are sorted and unique
    if splits.size * 2 >= hi - lo:
        # DESIGN CHOICE: a dense run of splits is read as one slice and picked in numpy; on a
        # store of small chunks that halves the read time against a fancy-index take.
        pred = cube["pred"].isel(param=params, split=slice(lo, hi))
        pred = pred.copy(data=np.asarray(pred.values)).isel(split=splits - lo)
    else:
        pred = cube["pred"].isel(param=params, split=splits)
    lossv = np.asarray(pointwise_loss(cube, loss, pred=pred).transpose("param", "split", "sample")
                       .values, dtype=np.float64)
    if b is None:
        return lossv
    return np.stack([lossv[0] - lossv[1], lossv[0], lossv[1]])


def _chunk_groups(n: int, n_params: int) -> int:
    return max(1, CHUNK_BYTES // (2 * 8 * max(n, 1) * (n_params + 1)))


def _incomplete_pass(cube, a, b, loss, table, analysis, chunk):
    """Stream over groups: per-fit means φ̄ (k, P, 2), T_p (k, P), and NaN-fit counts."""
    n_groups = table.shape[0]
    k = 1 if b is None else 3
    phibar = np.empty((k, n_groups, 2))
    t = np.empty((k, n_groups))
    chunk = chunk or _chunk_groups(analysis.size, 1 if b is None else 2)
    bad = set()
    for p0 in range(0, n_groups, chunk):
        rows = table[p0:p0 + chunk]
        uniq, inv = np.unique(rows, return_inverse=True)
        inv = inv.reshape(rows.shape)
        phi = _kernels(cube, a, b, uniq, loss)
        train = np.asarray(cube["train"].isel(split=uniq).values, dtype=bool)
        test = analysis[None, :] & ~train
        nan_fit = (np.isnan(phi) & test[None]).any(axis=(0, 2))
        bad.update(uniq[nan_fit].tolist())
        b0, b1, tp = pair_terms(phi[:, inv[:, 0]], phi[:, inv[:, 1]], test[inv[:, 0]],
                                test[inv[:, 1]])
        phibar[:, p0:p0 + len(rows), 0] = b0
        phibar[:, p0:p0 + len(rows), 1] = b1
        t[:, p0:p0 + len(rows)] = tp
    return phibar, t, bad


def _learning_set_size(cube: xr.Dataset, splits: np.ndarray, analysis: np.ndarray,
                       where: str) -> int:
    sizes = np.unique(np.asarray(cube["train"].isel(split=np.unique(splits)).values,
                                 dtype=bool).sum(-1))
    if sizes.size != 1:
        raise InputError(f"cube: {where}: subset learning sets have different sizes "
                         f"{sizes.tolist()}; a subset design has one size g")
    return int(sizes[0])


def _complete_pass(cube, a, b, loss, table, analysis, g, where):
    splits = table[:, 0]
    n = int(analysis.sum())
    expected = math.comb(n, g)
    uniq = np.unique(splits)
    train = np.asarray(cube["train"].isel(split=uniq).values, dtype=bool)
    distinct = np.unique(np.packbits(train, axis=1), axis=0).shape[0]
    if uniq.size != expected or distinct != expected or (train & ~analysis[None]).any():
        raise InputError(f"cube: {where}: a complete subset design needs all C({n}, {g}) = "
                         f"{expected} learning sets of D, found {distinct}")
    phi = _kernels(cube, a, b, uniq, loss)
    test = analysis[None, :] & ~train
    nan_fit = (np.isnan(phi) & test[None]).any(axis=(0, 2))
    return phi, train, set(uniq[nan_fit].tolist())


def _missing_params(cube, bad: set, a: int, b: int | None) -> int:
    """How many of the compared params lack a subset fit (failed or not written)."""
    if not bad:
        return 0
    params, splits = [a] if b is None else [a, b], sorted(bad)
    ok = np.asarray(cube["done"].values)[np.ix_(params, splits)] \
        & ~np.asarray(cube["failed"].values)[np.ix_(params, splits)]
    return max(1, int((~ok.all(axis=1)).sum()))


def _scalar(value) -> xr.DataArray:
    return xr.DataArray(float(value))


def _setup(cube, loss, compare, a, b, alpha, where):
    """Checked inputs shared by the subset reducers: (loss name, param a, param b, subset table,
    complete?, analysis mask, n, g)."""
    name = pointwise(cube, loss, where).label
    ia, ib = compare_pair(cube, compare, a, b, where)
    probability(alpha, f"{where}.alpha")
    table, complete = _subset_table(cube, where)
    analysis = ~np.asarray(cube["is_test"].values, dtype=bool)
    n = int(analysis.sum())
    g = _learning_set_size(cube, table[table >= 0], analysis, where)
    return name, ia, ib, table, complete, analysis, n, g


def ustat(cube: xr.Dataset, *, loss: str | None = None, compare=None, a=None, b=None,
          alpha: float = 0.05, chunk: int | None = None) -> xr.Dataset:
    """U-statistic estimate of Δ = e_a(g) - e_b(g), its variance and the two-learner test.

    Parameters
    ----------
    cube : xarray.Dataset
        A cube with the schema of docs/guide/cube.md holding a subset design (lazy or in
        memory).
    loss : str, optional
        Loss applied to the stored predictions; defaults to the workflow's.
    compare : list, optional
        ``[a, b]`` (two params) or ``[a]`` (one-learner mode); each an index, a learner name
        with one param, ``"learner(key=value)"`` or ``{learner: name, key: value}``.
    a, b : optional
        The same as ``compare=[a, b]``. With ``b=None`` the kernel is ℓ_a alone and the
        results are the error rate of a at training size g and its variance. A cube with
        exactly one or two params needs neither.
    alpha : float, default 0.05
        Level of the two-sided test and 1 - alpha the interval's coverage.
    chunk : int, optional
        Groups read per chunk (default: about 32 MB of losses).

    Returns
    -------
    xarray.Dataset
        Scalars ``estimate`` (Δ̃; Δ̂ for the complete design), ``variance`` (v̂ = Q - T),
        ``delta_sq`` (Q), ``theta_sq`` (T), ``design_variance``, ``total_variance``
        (v̂ + design variance), ``variance_se`` (Monte Carlo standard error of v̂ from the
        random design, by linearisation; 0 for the complete design: when it is not small
        against ``variance``, use more pairs), ``se``, ``z``, ``p_value``, ``lower``, ``upper``, ``n``,
        ``size`` (g), ``groups``, ``fits``; and per role (``a``, ``b``) the error rates
        ``error`` and their variance ``error_variance`` (v̂ + design variance of the
        one-learner kernels). attrs: ``estimator``, ``loss``, ``mode`` ("difference" or
        "error"), ``design`` ("complete" or "subset"), ``a``/``b`` (JSON settings),
        ``alpha`` and ``message`` (why z/p/interval are NaN, or "").
    """
    where = "ustat"
    name, ia, ib, table, complete, analysis, n, g = _setup(cube, loss, compare, a, b, alpha, where)
    if n < 2 * g + 2:
        raise InputError(f"cube: {where}: g = {g} needs n >= 2g + 2 = {2 * g + 2} analysis "
                         f"samples, but n = {n}; the variance estimator does not exist")
    if complete:
        phi, train, bad = _complete_pass(cube, ia, ib, name, table, analysis, g, where)
        res = complete_stats(phi, train, analysis)
        n_fits = phi.shape[1]
    else:
        phibar, t, bad = _incomplete_pass(cube, ia, ib, name, table, analysis, chunk)
        res = incomplete_stats(phibar, t)
        n_fits = 2 * table.shape[0]
    # DESIGN CHOICE: each fact is said once. Missing fits and a variance that is not positive
    # are the guardrail warnings below (missing_fits, variance_not_positive: text, JSON and
    # HTML show them); ``message`` holds only what no warning code says. It was said two to
    # four times (this note, the warning, a WARNING log on stderr): tests/test_ustat.py
    # ::test_each_ustat_warning_is_printed_once counts the lines of a whole run.
    messages = []
    if not complete and table.shape[0] < 2:
        messages.append("the subset design has one group; Q and the design variance need at "
                        "least two (use more pairs)")
    total = res["variance"] + res["design_variance"]
    main = normal_test(float(res["estimate"][0]), float(total[0]), alpha)
    if ib is None:
        # DESIGN CHOICE: one-learner mode estimates an error rate; a test of e_a = 0 means
        # nothing, so z and p are NaN and only the interval is reported.
        main["z"] = main["p_value"] = np.nan
    roles = ["a"] if ib is None else ["a", "b"]
    rows = [0] if ib is None else [1, 2]
    out = xr.Dataset({
        "estimate": _scalar(res["estimate"][0]),
        "variance": _scalar(res["variance"][0]),
        "delta_sq": _scalar(res["delta_sq"][0]),
        "theta_sq": _scalar(res["theta_sq"][0]),
        "design_variance": _scalar(res["design_variance"][0]),
        "total_variance": _scalar(total[0]),
        "variance_se": _scalar(res["variance_se"][0]),
        **{key: _scalar(main[key]) for key in ("se", "z", "p_value", "lower", "upper")},
        "n": xr.DataArray(n),
        "size": xr.DataArray(g),
        "groups": xr.DataArray(int(table.shape[0])),
        "fits": xr.DataArray(int(n_fits)),
        "error": xr.DataArray(np.asarray(res["estimate"])[rows], dims="role",
                              coords={"role": roles}),
        "error_variance": xr.DataArray(np.asarray(total)[rows], dims="role",
                                       coords={"role": roles}),
    })
    out.attrs = {
        "estimator": "ustat", "loss": name, "mode": "error" if ib is None else "difference",
        "design": "complete" if complete else "subset",
        "a": param_label(cube, ia),
        "b": param_label(cube, ib) if ib is not None else {},
        "alpha": float(alpha), "message": " ".join(m for m in messages if m),
    }
    if out.attrs["message"]:
        # INFO, as guardrails.attach logs: the reports print the note (a WARNING on stderr
        # repeated it, once per call in a simulation loop)
        log.info("ustat: %s", out.attrs["message"])
    warnings = (guardrails.variance_sign(float(res["variance"][0]), float(total[0]))
                + guardrails.sample_count(n, where)
                + guardrails.test_set_sizes([n - g], "learning set's test set"))
    if not complete:
        warnings += guardrails.variance_precision(float(res["variance"][0]),
                                                  float(res["variance_se"][0]), table.shape[0])
    warnings += guardrails.missing(_missing_params(cube, bad, ia, ib), where)
    return guardrails.attach(out, warnings, where)


def nadeau_bengio(cube: xr.Dataset, *, loss: str | None = None, compare=None, a=None, b=None,
                  alpha: float = 0.05, chunk: int | None = None) -> xr.Dataset:
    """Nadeau-Bengio corrected resampled t-test from the subset fits (docs/guide/estimators.md).

    d_f = φ̄_f (mean kernel over the test set of fit f) over the F subset fits; variance
    (1/F + (n - g)/g)·s²_d; Student t with F - 1 degrees of freedom. Options as
    :func:`ustat`. In one-learner mode d_f is the test error of fit f and the result is an
    interval for e_a (t and p are NaN).

    Returns
    -------
    xarray.Dataset
        Scalars ``estimate``, ``sample_variance`` (s²_d), ``variance``, ``se``, ``t``,
        ``df``, ``p_value``, ``lower``, ``upper``, ``fits``, ``n``, ``size``; attrs as
        :func:`ustat`.
    """
    where = "nadeau_bengio"
    name, ia, ib, table, complete, analysis, n, g = _setup(cube, loss, compare, a, b, alpha, where)
    if complete:
        phi, train, bad = _complete_pass(cube, ia, ib, name, table, analysis, g, where)
        test = analysis[None, :] & ~train
        d = (np.where(test, phi[0], 0.0).sum(-1) / test.sum(-1))
    else:
        phibar, _, bad = _incomplete_pass(cube, ia, ib, name, table, analysis, chunk)
        d = phibar[0].ravel()
    res = nadeau_bengio_stats(d, n, g, alpha)
    if ib is None:
        res["t"] = res["p_value"] = np.nan
    out = xr.Dataset({
        **{key: _scalar(res[key]) for key in ("estimate", "sample_variance", "variance", "se",
                                               "t", "p_value", "lower", "upper")},
        "df": xr.DataArray(int(res["df"])),
        "fits": xr.DataArray(int(d.size)),
        "n": xr.DataArray(n),
        "size": xr.DataArray(g),
    })
    out.attrs = {
        "estimator": "nadeau_bengio", "loss": name,
        "mode": "error" if ib is None else "difference",
        "design": "complete" if complete else "subset",
        "a": param_label(cube, ia),
        "b": param_label(cube, ib) if ib is not None else {},
        "alpha": float(alpha), "message": "",    # missing fits: the missing_fits warning
    }
    warnings = (guardrails.missing(_missing_params(cube, bad, ia, ib), where)
                + guardrails.flat_variance(float(res["sample_variance"]),
                                           float(np.abs(d).max(initial=0.0)), where))
    if n - g >= g:
        # DESIGN CHOICE: the correction (1/F + n_test/n_train) was derived for test fractions
        # well below 1/2; with learning sets of at most n/2 it inflates the variance.
        warnings.append(guardrails.warning(
            "conservative_design", f"n_test/n_train = (n − g)/g = {(n - g) / g:.3g} ≥ 1 on this "
            "subset design: the Nadeau–Bengio correction overstates the variance here (too wide, "
            "p too large); ustat on the same fits is the test built for this design",
            ratio=(n - g) / g))
    return guardrails.attach(out, warnings, where)


def describe(result: xr.Dataset) -> list[str]:
    """Text-report lines for a :func:`ustat` result."""
    at = result.attrs
    level = 100 * (1 - float(at.get("alpha", 0.05)))
    head = (f"U-statistic ({at.get('design')} design, g = {int(result['size'])}, "
            f"n = {int(result['n'])}, {int(result['fits'])} learning sets, loss {at.get('loss')})")
    lines = [head]
    if at.get("mode") == "difference":
        lines.append(f"  a = {param_text(at.get('a') or {})}")
        lines.append(f"  b = {param_text(at.get('b') or {})}")
        lines.append(f"  Δ = e_a - e_b: {fmt(float(result['estimate']))}  "
                     f"v̂ = {fmt(float(result['variance']))} (design se "
                     f"{fmt(float(result['variance_se']))})  design var of Δ = "
                     f"{fmt(float(result['design_variance']))}")
        lines.append(f"  z = {fmt(float(result['z']))}  p = {fmt(float(result['p_value']))}  "
                     f"{level:g}% CI [{fmt(float(result['lower']))}, "
                     f"{fmt(float(result['upper']))}]")
        err = result["error"].values
        lines.append(f"  e_a = {fmt(err[0])}  e_b = {fmt(err[1])}")
    else:
        lines.append(f"  param = {param_text(at.get('a') or {})}")
        lines.append(f"  error: {fmt(float(result['estimate']))}  v̂ = "
                     f"{fmt(float(result['variance']))}  {level:g}% CI "
                     f"[{fmt(float(result['lower']))}, {fmt(float(result['upper']))}]")
    if at.get("message"):
        lines.append(f"  note: {at['message']}")
    return lines


def describe_nadeau_bengio(result: xr.Dataset) -> list[str]:
    """Text-report lines for a :func:`nadeau_bengio` result."""
    at = result.attrs
    level = 100 * (1 - float(at.get("alpha", 0.05)))
    lines = [f"Nadeau-Bengio corrected t ({int(result['fits'])} learning sets, g = "
             f"{int(result['size'])}, n = {int(result['n'])}, loss {at.get('loss')})",
             f"  estimate {fmt(float(result['estimate']))}  se {fmt(float(result['se']))}  "
             f"t = {fmt(float(result['t']))} (df {int(result['df'])})  "
             f"p = {fmt(float(result['p_value']))}  {level:g}% CI "
             f"[{fmt(float(result['lower']))}, {fmt(float(result['upper']))}]"]
    if at.get("message"):
        lines.append(f"  note: {at['message']}")
    return lines


def _short(label: dict | None) -> str:
    return param_text(label) if label else "-"


def _render(label: str):
    """HTML: the estimate and its interval, beside the other subset test's when both ran."""
    return lambda result, page: _draw(label, result, page)


def _draw(label: str, result: xr.Dataset, page) -> None:
    at = result.attrs
    a, b = at.get("a") or {}, at.get("b") or None
    what = f"Δ = e({_short(a)}) − e({_short(b)})" if b else f"error of {_short(a)}"
    level = 100 * (1 - float(at.get("alpha", 0.05)))
    page.scalar_intervals("ustat", f"{'Δ' if b else 'error'}: estimate and {level:.0f}% interval",
                          label, result["estimate"], result["lower"], result["upper"],
                          zero_line=bool(b), section="U-statistic comparison",
                          caption=f"{what} at learning-set size g = {int(result['size'].values)}")


def _options() -> list[Option]:
    return [Option("compare", None, param_refs(1, 2),
                   "[a, b] (two params) or [a] (the error of one); index, name or learner(k=v)"),
            Option("a", None, param_refs(), "the first param (as compare: [a, b])"),
            Option("b", None, param_refs(), "the second param"),
            Option("alpha", 0.05, probability, "level of the test; 1 - alpha the coverage"),
            Option("chunk", None, integer(1), "groups read per chunk (default: ~32 MB)")]


def _check_grid(grid: xr.Dataset, design, options: dict, where: str) -> None:
    """``compare`` / ``a`` / ``b`` name params of the grid (or the grid has one or two)."""
    compare_pair(grid, options.get("compare"), options.get("a"), options.get("b"), where)


declare(ustat, raced=True, needs=("subset",), options=_options(), text=describe, check_grid=_check_grid,
        html=_render("U-statistic (Fuchs et al.)"),
        results={**{v: () for v in ("estimate", "variance", "delta_sq", "theta_sq",
                                    "design_variance", "total_variance", "variance_se", "se", "z",
                                    "p_value", "lower", "upper", "n", "size", "groups", "fits")},
                 "error": ("role",), "error_variance": ("role",)})
declare(nadeau_bengio, raced=True, needs=("subset",), options=_options(), text=describe_nadeau_bengio,
        check_grid=_check_grid,
        html=_render("Nadeau-Bengio corrected t"),
        results={v: () for v in ("estimate", "sample_variance", "variance", "se", "t", "df",
                                 "p_value", "lower", "upper", "fits", "n", "size")})

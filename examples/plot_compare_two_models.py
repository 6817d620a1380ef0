"""
Comparing two models honestly
=================================

Two models' K-fold scores on the same folds are not independent samples: the training sets
overlap, so the plain paired t-test on fold differences is far too confident. cvflow reads
several honest answers from one set of fold fits (no extra fit for any of them):

- ``corrected_t``: the corrected repeated K-fold t-test (Nadeau & Bengio; Bouckaert & Frank),
  variance factor 1/(K·R) + n_test/n_train;
- ``wald_cv`` with ``compare``: Bayle et al.'s test on the per-sample out-of-fold loss
  differences.

Here a ridge regression against a 15-nearest-neighbours regressor on scikit-learn's diabetes
data, 10 folds × 5 repeats, squared error.
"""

import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from scipy import stats
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import cvflow

X, y = load_diabetes(return_X_y=True)
pair = ["ridge", "knn"]
study = cvflow.Study(
    {"ridge": Ridge(alpha=1.0),
     "knn": make_pipeline(StandardScaler(), KNeighborsRegressor(n_neighbors=15))},
    cv={"folds": 10, "repeats": 5, "seed": 0},
    estimators=["kfold", {"corrected_t": {"compare": pair}}, {"wald_cv": {"compare": pair}}],
    loss="squared")
result = study.run(X, y, store=Path(tempfile.mkdtemp()) / "compare.zarr", cluster="threads")
ct, wald = result["corrected_t"], result["wald_cv"]
print("K-fold MSE:", dict(zip(pair, np.round(result["kfold"]["estimate"].values, 1))))

# %%
# The naive paired t-test on the same 50 fold differences, for contrast.
d = ct["difference"].values.ravel()
naive_se = d.std(ddof=1) / np.sqrt(d.size)
t_naive = stats.t.ppf(0.975, d.size - 1)
print(f"difference ridge − knn: {d.mean():+.1f}")
print(f"naive paired t:  p = {2 * stats.t.sf(abs(d.mean() / naive_se), d.size - 1):.2g}")
print(f"corrected_t:     p = {float(ct['p_value']):.2g}")
print(f"wald_cv:         p = {float(wald['p_value_all']):.2g} (all-pairs variance)")

# %%
# The fold differences, and the 95% intervals for the difference of the two errors.
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
ax1.hist(d, bins=15)
ax1.axvline(0, color="k", ls=":")
ax1.set_xlabel("fold MSE of ridge − fold MSE of knn (50 folds)")
ax1.set_ylabel("folds")
intervals = {
    "naive paired t": (d.mean() - t_naive * naive_se, d.mean() + t_naive * naive_se),
    "corrected_t": (float(ct["lower"]), float(ct["upper"])),
}
for row, (name, (lo, hi)) in enumerate(intervals.items()):
    ax2.plot([lo, hi], [row, row], lw=4)
    ax2.plot(d.mean(), row, "ko")
ax2.axvline(0, color="k", ls=":")
ax2.set_yticks(range(len(intervals)), list(intervals))
ax2.set_ylim(-0.7, len(intervals) - 0.3)
ax2.set_xlabel("ridge − knn, 95% interval")
fig.tight_layout()

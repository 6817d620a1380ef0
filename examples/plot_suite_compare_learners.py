"""
Comparing learners across data sets
====================================

"Is ridge better than a nearest-neighbours regressor?" has an answer per data set; across a
suite of data sets it has its own statistics (Demšar 2006; Benavoli et al. 2017). Here eight
small synthetic regression data sets, three learners, one cvflow store holding a cube per data
set, and :func:`cvflow.estimators.compare_learners` on the per-data-set K-fold estimates:
mean ranks, Friedman's test, Nemenyi's critical difference, Wilcoxon and the Bayesian
signed-rank test for every pair, the geometric mean of the MSE ratios, win/tie/loss.
"""

import tempfile
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from sklearn.datasets import make_friedman1, make_regression
from sklearn.linear_model import Lasso, Ridge
from sklearn.neighbors import KNeighborsRegressor

import cvflow
from cvflow.errors import ComparisonWarning
from cvflow.estimators import compare_learners

data = {}
for i in range(4):
    data[f"linear{i}"] = make_regression(80 + 20 * i, 6, noise=10.0, random_state=i)
    data[f"friedman{i}"] = make_friedman1(80 + 20 * i, 6, noise=1.0, random_state=i)
study = cvflow.Study({"ridge": (Ridge(), {"alpha": [1.0]}),
                      "lasso": (Lasso(), {"alpha": [0.1]}),
                      "knn": (KNeighborsRegressor(), {"n_neighbors": [10]})},
                     cv={"folds": 5, "seed": 0}, loss="squared", name="suite")
store = Path(tempfile.mkdtemp()) / "suite.zarr"
results = study.run(data, store=store, cluster="threads", progress=False)

# %%
# One number per data set and learner: the K-fold MSE (each learner has one setting here, so
# no selection optimism), with its standard error.
mse = pd.DataFrame({name: dict(zip(r.cube["learner"].values, r["kfold"]["estimate"].values))
                    for name, r in results.items()}).T
se = pd.DataFrame({name: dict(zip(r.cube["learner"].values, r["kfold"]["se"].values))
                   for name, r in results.items()}).T
print(mse.round(2))

# %%
# The comparison. Each result says what it assumes (``res.assumptions()``) and a
# :class:`~cvflow.errors.ComparisonWarning` says where that fails (few data sets, ties).
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ComparisonWarning)
    res = compare_learners(mse, se=se, rope=0.0)
print("\n".join(res.describe()[:-1]))

# %%
# The critical-difference diagram: learners on the mean-rank axis; a bar joins learners whose
# mean ranks differ by less than the critical difference (not significantly different by
# Nemenyi's test). ``cvflow report suite.zarr --html page.html`` draws the same.
ranks = res.mean_rank.to_series().sort_values()
cd = float(res.nemenyi["critical_difference"])
fig, ax = plt.subplots(figsize=(7, 2.2))
ax.hlines(0, 1, len(ranks), color="k")
for level, (name, r) in enumerate(ranks.items()):
    ax.plot([r, r], [0, -0.3 - 0.25 * level], color="grey")
    ax.text(r, -0.35 - 0.25 * level, f" {name} ({r:.2f})", va="center")
ax.plot([1, 1 + cd], [0.4, 0.4], lw=3, color="k")
ax.text(1, 0.55, f"CD = {cd:.2f}")
values = ranks.to_numpy()
for i in range(values.size):
    j = int(np.searchsorted(values, values[i] + cd)) - 1
    if j > i:
        ax.plot([values[i], values[j]], [-1.2 - 0.1 * i] * 2, lw=4, color="k")
ax.set_xlim(0.8, len(ranks) + 0.6)
ax.set_ylim(-1.6, 0.8)
ax.set_yticks([])
ax.set_xlabel("mean rank (1 = best)")
fig.tight_layout()

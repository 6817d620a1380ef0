"""
Reanalysis with another loss, without refitting
===================================================

A cvflow store keeps every fit's predictions for every sample, not its scores. So a finished
study can be reduced again under another loss (here the absolute error and two quantile
losses after a squared-error study) and the choice of hyperparameter read off each, with no
model fitted again: the store's ``done`` count stays the same.
"""

import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge

import cvflow
from cvflow.estimators import kfold

# %%
# One study: ridge over 25 penalties, 5-fold CV, squared loss by default.
X, y = load_diabetes(return_X_y=True)
alphas = np.logspace(-3, 3, 25)
study = cvflow.Study({"ridge": (Ridge(), {"alpha": alphas})}, cv=5, estimators=["kfold"],
                     loss="squared")
store = Path(tempfile.mkdtemp()) / "reanalysis.zarr"
result = study.run(X, y, store=store, cluster="threads")
print(result.selected["kfold"])

# %%
# Reopen the store and reduce it under other losses. Each call reads the stored predictions
# and applies the loss; nothing is fitted.
cube = cvflow.open(store)
fits_before = int(cube["done"].sum())
losses = ["squared", "absolute", "pinball:0.1", "pinball:0.9"]
curves = {loss: kfold(cube, loss=loss) for loss in losses}
assert int(cvflow.open(store)["done"].sum()) == fits_before   # no new fit
for loss, res in curves.items():
    chosen = res.attrs["selected_params"]
    print(f"{loss:12s} chooses alpha = {chosen['params']['alpha']:.4g}")

# %%
# Each loss has its own scale, so each curve is shown relative to its minimum; the marker is
# the alpha each loss selects.
fig, ax = plt.subplots(figsize=(7, 4))
for loss, res in curves.items():
    est = res["estimate"].values
    line, = ax.plot(alphas, est / np.nanmin(est), label=loss)
    h = int(res["selected"])
    ax.plot(alphas[h], 1.0, "o", color=line.get_color())
ax.set_xscale("log")
ax.set_xlabel("ridge alpha")
ax.set_ylabel("K-fold risk / its minimum")
ax.set_title(f"One set of {fits_before} fits, four losses")
ax.legend()
fig.tight_layout()

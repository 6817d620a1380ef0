"""
Nested CV and an interval for the error of the tuned model
==============================================================

Tuning C by K-fold and then quoting the K-fold error of the chosen C reports the minimum of
noisy estimates: an optimistic number. Nested CV (``nested_cv``, Varma & Simon) estimates the
error of the whole procedure "tune by inner K-fold, then fit": each outer fold is scored with
the C its inner CV chose. ``bates_ncv`` gives each C an interval for its prediction error
(Bates, Hastie & Tibshirani). Both are reductions of one set of fits: per C, the full fit, the
K fold fits and the K(K−1)/2 fold-pair fits.

Logistic regression on scikit-learn's breast-cancer data, 12 values of C, 5 folds × 2
repeats, log loss.
"""

import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import cvflow

X, y = load_breast_cancer(return_X_y=True)
Cs = np.logspace(-3, 2, 12)
study = cvflow.Study(make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)),
                     param_grid={"logisticregression__C": Cs},
                     cv={"folds": 5, "repeats": 2, "seed": 0},
                     estimators=["kfold", "nested_cv", {"bates_ncv": {"alpha": 0.1}}],
                     loss="log_loss")
result = study.run(X, y, store=Path(tempfile.mkdtemp()) / "nested.zarr", cluster="threads")
kf, ncv, bates = result["kfold"], result["nested_cv"], result["bates_ncv"]
h = result.selected["kfold"]["index"]
print(f"K-fold choice: C = {Cs[h]:.3g}, its K-fold log loss {float(kf['estimate'][h]):.4f}")
print(f"nested CV error of 'tune C by K-fold, then fit': {float(ncv['estimate']):.4f}")
print(f"90% interval for the chosen C's error (bates_ncv): "
      f"[{float(bates['lower'][h]):.4f}, {float(bates['upper'][h]):.4f}]; "
      f"naive: [{float(bates['naive_lower'][h]):.4f}, {float(bates['naive_upper'][h]):.4f}]")
print("C chosen by the inner CV of each outer fold:", np.round(Cs[ncv["chosen"].values.ravel()], 3))

# %%
# The K-fold curve with each C's nested-CV interval, and the nested CV error of the tuning
# procedure (dashed), which sits above the minimum of the curve.
fig, ax = plt.subplots(figsize=(7, 4))
ax.fill_between(Cs, bates["lower"], bates["upper"], alpha=0.25, label="90% interval (bates_ncv)")
ax.plot(Cs, kf["estimate"], "o-", label="K-fold")
ax.plot(Cs[h], float(kf["estimate"][h]), "s", ms=10, mfc="none", color="C3", label="K-fold choice")
ax.axhline(float(ncv["estimate"]), color="k", ls="--", label="nested CV error of the tuning")
ax.set_xscale("log")
ax.set_xlabel("C")
ax.set_ylabel("log loss")
ax.set_ylim(0, float(np.nanmax(bates["upper"][2:])) * 1.1)
ax.legend()
fig.tight_layout()

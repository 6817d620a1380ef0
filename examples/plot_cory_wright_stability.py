"""
Stability-regularised selection, λ chosen by nested CV (Cory-Wright & Gómez)
================================================================================

Cory-Wright & Gómez select the hyperparameter minimising ``kfold(h) + λ·mu(h)``, where
``mu(h)`` is the empirical hypothesis stability (how far a fold model's losses on D move from
the full fit's, eq. 5), and choose λ by nested CV (Appendix C): for each outer fold, the inner
scores and inner stabilities come from the fits on D minus two folds. Every λ is a reduction
of the same fits: the λ grid costs no fit at all.

A small version of the paper's Table 2 study: a CART tree over max_depth × min_samples_split,
trained on 100 samples of scikit-learn's diabetes data and tested on the other 342, over six
random splits (the 300-run study over six datasets is in :doc:`/results/nested`). The paper's
two claims are that the nested choice tests a little better on average, and that the nested
error m_λ* is a more honest estimate of the procedure's test error than the K-fold minimum.
Six splits settle neither (the full study finds no detectable effect on test MSE, and the
honesty gain in the averages only): read the table as what one split after another looks
like, not as evidence.
"""

import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.metrics import mean_squared_error
from sklearn.model_selection import train_test_split
from sklearn.tree import DecisionTreeRegressor

import cvflow

X, y = load_diabetes(return_X_y=True)
lambdas = [0, 0.01, 0.03, 0.1, 0.3, 1, 3, 10]
grid = {"max_depth": [1, 2, 3, 4, 6, 8], "min_samples_split": [2, 20]}
tmp = Path(tempfile.mkdtemp())

# %%
# One study per split: 12 trees, 5 folds; per tree the full fit, 5 fold fits and 10
# fold-pair fits. Each choice is refitted on the 100 samples and scored on the test set.
rows, curves = [], []
for split in range(6):
    X_train, X_test, y_train, y_test = train_test_split(X, y, train_size=100, random_state=split)
    study = cvflow.Study({"cart": (DecisionTreeRegressor(random_state=0), grid)},
                         cv={"folds": 5, "seed": split},
                         estimators=["kfold", {"stability_nested": {"lambdas": lambdas}}],
                         loss="squared")
    result = study.run(X_train, y_train, store=tmp / f"s{split}.zarr", cluster="threads")
    sn = result["stability_nested"]
    star = float(sn["lambda_star"])
    test = {name: mean_squared_error(y_test, result.refit(name).predict(X_test))
            for name in ("kfold", "stability_nested")}
    rows.append({"split": split, "lambda*": star,
                 "same": result.selected["kfold"]["index"] == result.selected["stability_nested"]["index"],
                 "CV": float(result["kfold"]["estimate"].min()), "kCV test": test["kfold"],
                 "nCV": float(sn["estimate"].sel({"lambda": star})),
                 "nested test": test["stability_nested"]})
    curves.append(sn["estimate"].values)

print(f"{'split':>5} {'λ*':>5} {'same':>5} {'CV':>7} {'kCV test':>9} {'nCV':>7} {'nested test':>11}")
for r in rows:
    print(f"{r['split']:>5} {r['lambda*']:>5g} {str(r['same']):>5} {r['CV']:>7.0f} "
          f"{r['kCV test']:>9.0f} {r['nCV']:>7.0f} {r['nested test']:>11.0f}")
mean = {k: np.mean([r[k] for r in rows]) for k in ("CV", "kCV test", "nCV", "nested test")}
print("means: " + ", ".join(f"{k} {v:.0f}" for k, v in mean.items()))

# %%
# Left: the nested CV error m_λ of each split along λ (no fit depends on λ). Right: each
# criterion's own estimate against the test MSE of its choice, per split (the diagonal is a
# perfect estimate).
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
lam = np.asarray(lambdas, dtype=float)
x = np.where(lam > 0, lam, lam[1] / 3)            # λ = 0 drawn left of the smallest positive λ
for curve in curves:
    ax1.plot(x, curve, "o-", lw=1, ms=3)
ax1.set_xscale("log")
ax1.set_xticks(x, ["0"] + [f"{v:g}" for v in lam[1:]])
ax1.set_xlabel("λ")
ax1.set_ylabel("nested CV error m_λ")
ax2.scatter([r["kCV test"] for r in rows], [r["CV"] for r in rows], label="K-fold minimum (CV)")
ax2.scatter([r["nested test"] for r in rows], [r["nCV"] for r in rows], marker="s",
            label="nested error m_λ* (nCV)")
lims = [min(ax2.get_xlim()[0], ax2.get_ylim()[0]), max(ax2.get_xlim()[1], ax2.get_ylim()[1])]
ax2.plot(lims, lims, "k:", lw=1)
ax2.set_xlabel("test MSE of the choice")
ax2.set_ylabel("the criterion's own estimate")
ax2.legend()
fig.tight_layout()

"""
Bias-corrected K-fold (Aghbalou, Portier & Sabourin)
========================================================

The plain K-fold estimate scores models trained on a fraction (K-1)/K of the data, so it is
biased upwards, and more so for the hyperparameters whose risk falls fastest with the sample
size. Burman's correction, studied by Aghbalou et al. (Section 5), adds the full fit's
empirical risk and subtracts the fold models' empirical risk on all of D::

    corrected(h) = kfold(h) + risk_D(full fit) - sum_j p_j risk_D(fold model j)

It needs each fold model's predictions on its own training points too, which the cube keeps
(every fit predicts every sample). This is a small version of the paper's Section 7: an SVR
with a sigmoid kernel over a grid of C on scikit-learn's diabetes data, one third held out,
K = 2..5, one split (the full study over 50 splits of the Concrete data is in
:doc:`/results/aghbalou`).
"""

import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import yaml

import cvflow
from cvflow.estimators import corrected_kfold
from cvflow.workflow.suite import entry_config

try:
    ROOT = Path(__file__).resolve().parents[1]
except NameError:                     # run from a notebook inside examples/
    ROOT = Path.cwd().parent

# %%
# The diabetes entry of the repository's suite (``workflows/aghbalou.yaml``, whose report
# prints the comparison over its four data sets and K = 2..5), as a one-data-set workflow,
# with a coarser grid (21 values of C) and K set per run.
# A workflow file is code (it names classes to import): this one is ours.
config = entry_config(ROOT / "workflows" / "aghbalou.yaml", "diabetes_k2")
config["learners"][0]["grid"] = {"C": {"logspace": [-1, 2, 21]}}
tmp = Path(tempfile.mkdtemp())
results = {}
for K in (2, 3, 4, 5):
    config["design"]["folds"] = K
    config["name"] = f"aghbalou_diabetes_k{K}"
    path = tmp / f"k{K}.yaml"
    path.write_text(yaml.safe_dump(config))
    workflow = cvflow.load_workflow(path)
    cvflow.run(workflow, store=tmp / f"k{K}.zarr", cluster="threads")
    results[K] = corrected_kfold(cvflow.open(tmp / f"k{K}.zarr"))

# %%
# Per K: the C each criterion selects and the held-out risk of its full fit.
C = results[2]["C"].values
print(f"{'K':>2} {'K-fold C':>9} {'test risk':>10} {'corrected C':>12} {'test risk':>10}")
for K, res in results.items():
    a, b = int(res["kfold_selected"]), int(res["selected"])
    print(f"{K:>2} {C[a]:>9.3g} {float(res['kfold_test_risk']):>10.1f} "
          f"{C[b]:>12.3g} {float(res['test_risk']):>10.1f}")
best = int(np.nanargmin(results[2]["full_test_risk"].values))
print(f"best C of the grid on the test third: {C[best]:.3g} "
      f"(test risk {float(results[2]['full_test_risk'][best]):.1f})")

# %%
# The two estimates along the grid for K = 2 (where the bias is largest) and K = 5, against
# the test risk of each C's full fit. The corrected curve sits near the test curve; the plain
# K-fold is shifted up and its minimum moves to larger C.
fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
for ax, K in zip(axes, (2, 5)):
    res = results[K]
    ax.plot(C, res["kfold"], label="K-fold")
    ax.plot(C, res["estimate"], label="bias-corrected K-fold")
    ax.plot(C, res["full_test_risk"], "k--", label="test risk of the full fit")
    ax.plot(C[int(res["kfold_selected"])], float(res["kfold"][int(res["kfold_selected"])]), "o",
            color="C0")
    ax.plot(C[int(res["selected"])], float(res["estimate"][int(res["selected"])]), "o", color="C1")
    ax.set_xscale("log")
    ax.set_xlabel("C")
    ax.set_title(f"K = {K}")
axes[0].set_ylabel("squared error")
low = float(np.nanmin(results[2]["full_test_risk"]))
axes[0].set_ylim(0.9 * low, 1.6 * low)
axes[1].legend()
fig.tight_layout()

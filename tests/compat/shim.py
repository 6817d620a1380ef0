"""``GridSearchCV`` as scikit-learn's tests call it, built as ``cvflow.SearchCV`` (issue 31 item 2),
and ``RandomizedSearchCV`` built as ``cvflow.RandomizedSearchCV`` (issue 41 item 5).

The shim is deliberately thin: every keyword a test gives is passed to ``SearchCV`` as it is, so
a keyword SearchCV lacks (``n_jobs``, ``verbose``, ``pre_dispatch``, ``error_score``) fails the
test with SearchCV's own ``TypeError``: that failure is a SearchCV gap, not the shim's. What the
shim adds, each a place it compensates for SearchCV (see known_failures.txt):

* ``select="kfold"``: GridSearchCV's choice (the best mean fold score). It is SearchCV's
  default too; spelled out so that the comparison does not depend on that default.
* ``cluster="threads"``: GridSearchCV with ``n_jobs=None`` fits in the calling process.
  SearchCV's default (``auto``) starts local worker processes for a learner's own fit code:
  seconds per search on a shared 2-core machine, and a class defined in the test module (not
  importable by the workers) would have to travel by value. With threads the fits run in this
  process, as GridSearchCV's do. (SearchCV gap: ``n_jobs=None`` should mean "this process".)

``CVFLOW_COMPAT_LENIENT=1`` (diagnosis only, never in CI) also drops the GridSearchCV keywords
SearchCV refuses, so that the failure *behind* a refused keyword shows: how many tests accepting
the keyword alone would unlock, and what fails next.
"""
from __future__ import annotations

import os

import cvflow

#: GridSearchCV keywords SearchCV does not accept (dropped only in the lenient diagnosis mode).
REFUSED = ("n_jobs", "verbose", "pre_dispatch", "error_score")

#: What the shim adds to every SearchCV it builds.
ADDED = {"select": "kfold", "cluster": "threads"}


def RandomizedSearchCV(estimator, param_distributions, **kwargs):
    """``cvflow.RandomizedSearchCV(estimator, param_distributions, select="kfold",
    cluster="threads", **kwargs)``."""
    if os.environ.get("CVFLOW_COMPAT_LENIENT"):
        kwargs = {k: v for k, v in kwargs.items() if k not in REFUSED}
    return cvflow.RandomizedSearchCV(estimator, param_distributions, **ADDED, **kwargs)


def GridSearchCV(estimator, param_grid, **kwargs):
    """``cvflow.SearchCV(estimator, param_grid, select="kfold", cluster="threads", **kwargs)``."""
    if os.environ.get("CVFLOW_COMPAT_LENIENT"):
        kwargs = {k: v for k, v in kwargs.items() if k not in REFUSED}
    return cvflow.SearchCV(estimator, param_grid, **ADDED, **kwargs)

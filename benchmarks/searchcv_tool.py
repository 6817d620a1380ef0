"""One whole-process call of ``cvflow.SearchCV`` with its defaults on a case of
``searchcv_cases.py`` (``searchcv_vs_gridsearch.py`` times it): ``python searchcv_tool.py CASE``.

Only the estimator, the grid, ``cv`` (5, or the case's splitter) and, where the case sets one,
``scoring`` are given: no ``store`` (a temporary one), no ``cluster`` (``auto``), ``progress``
is already False by default.
"""
import sys

import cvflow
from searchcv_cases import search_and_report


def make(est, grid, cv, scoring):
    return cvflow.SearchCV(est, grid, cv=cv, scoring=scoring)


search_and_report(make, sys.argv[1])

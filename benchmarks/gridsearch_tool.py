"""One whole-process call of scikit-learn's ``GridSearchCV`` on a case of ``searchcv_cases.py``
(``searchcv_vs_gridsearch.py`` times it): ``python gridsearch_tool.py CASE N_JOBS``
(``N_JOBS``: ``None`` or an int).
"""
import sys

from sklearn.model_selection import GridSearchCV

from searchcv_cases import search_and_report

N_JOBS = None if sys.argv[2] == "None" else int(sys.argv[2])


def make(est, grid, cv, scoring):
    return GridSearchCV(est, grid, cv=cv, scoring=scoring, n_jobs=N_JOBS)


search_and_report(make, sys.argv[1])

"""``cvflow.RandomizedSearchCV``: scikit-learn's ``RandomizedSearchCV`` as a cvflow study
(docs/guide/searchcv.md).

The candidates are scikit-learn's own: ``ParameterSampler(param_distributions, n_iter,
random_state=random_state)``, drawn once per ``fit`` (so ``random_state=None`` draws from numpy's
global random state, as ``RandomizedSearchCV`` does). The study fits exactly those candidates
(each its own one-point grid, in the sampler's order), so ``cv_results_`` rows are
``RandomizedSearchCV``'s; everything else is :class:`cvflow.SearchCV`'s::

    search = cvflow.RandomizedSearchCV(SVC(), {"C": loguniform(1e-2, 1e2)}, n_iter=20,
                                       random_state=0, cv=5)
    search.fit(X, y).best_params_
"""
from __future__ import annotations

import numpy as np
from sklearn.model_selection import ParameterSampler

from . import SearchCV


class RandomizedSearchCV(SearchCV):
    """Search over sampled candidates, selected by any cvflow criterion, as a scikit-learn
    estimator: ``RandomizedSearchCV``'s parameters in its order and with its defaults, then
    cvflow's (``select`` to ``racing``, as :class:`cvflow.SearchCV`).

    Parameters
    ----------
    estimator : estimator object
        As :class:`cvflow.SearchCV`'s.
    param_distributions : dict or list of dicts
        As ``RandomizedSearchCV``'s: name -> a distribution with ``rvs`` (scipy.stats) or a
        list sampled uniformly; a list of dicts samples one dict (uniformly) per candidate.
        All lists: sampled without replacement (at most the grid's size).
    n_iter : int, default 10
        The number of candidates ``ParameterSampler`` draws.
    random_state : int, RandomState instance or None, default None
        ``ParameterSampler``'s: an int repeats the draw; None draws from numpy's global random
        state, once per ``fit``. The folds are ``cv``'s (a shuffling splitter is seeded as
        :class:`cvflow.SearchCV` seeds it), not drawn from this state.
    scoring, n_jobs, refit, cv, verbose, pre_dispatch, error_score, return_train_score
        As ``RandomizedSearchCV``'s (see :class:`cvflow.SearchCV`).
    select, store, estimators, average, cluster, workers, fit_seed, progress, racing
        cvflow's, as :class:`cvflow.SearchCV`'s.

    Attributes
    ----------
    cv_results_, best_index_, best_params_, best_score_, best_estimator_, refit_time_, scorer_,
    n_splits_, multimetric_, store_, result_
        As :class:`cvflow.SearchCV`'s; ``cv_results_["params"]`` are the sampled candidates
        in ``ParameterSampler``'s order.
    """

    def __init__(self, estimator, param_distributions, *, n_iter=10, scoring=None, n_jobs=None,
                 refit=True, cv=None, verbose=0, pre_dispatch="2*n_jobs", random_state=None,
                 error_score=np.nan, return_train_score=False, select="kfold", store=None,
                 estimators=(), average="folds", cluster=None, workers=None, fit_seed=None,
                 progress=False, racing=None):
        self.estimator = estimator
        self.param_distributions = param_distributions
        self.n_iter = n_iter
        self.scoring = scoring
        self.n_jobs = n_jobs
        self.refit = refit
        self.cv = cv
        self.verbose = verbose
        self.pre_dispatch = pre_dispatch
        self.random_state = random_state
        self.error_score = error_score
        self.return_train_score = return_train_score
        self.select = select
        self.store = store
        self.estimators = estimators
        self.average = average
        self.cluster = cluster
        self.workers = workers
        self.fit_seed = fit_seed
        self.progress = progress
        self.racing = racing

    def _candidates(self) -> list[dict]:
        """``ParameterSampler``'s draw (its checks and warnings, its order)."""
        return list(ParameterSampler(self.param_distributions, self.n_iter,
                                     random_state=self.random_state))

    def _study_grid(self, candidates: list[dict]) -> list[dict]:
        """Each candidate its own one-point grid: the study fits exactly the draw, in order (a
        candidate drawn twice is fitted twice, as ``RandomizedSearchCV`` fits it)."""
        return [{name: [c[name]] for name in sorted(c)} for c in candidates]

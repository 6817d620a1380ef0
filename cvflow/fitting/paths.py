"""Path-aware fitting: one training set, a whole regularisation path in one go.

When a block holds several params of one learner that differ only in the strength of the
penalty, fitting them one by one repeats most of the work. Here:

- ``Ridge`` / ``RidgeClassifier`` (``alpha``): one SVD of the (centred) training matrix gives
  the exact solution for every alpha, ``w(a) = V diag(s / (s^2 + a)) U^T y``. This is the
  closed-form solution scikit-learn's exact solvers compute, so predictions agree to ~1e-10.
- ``Lasso`` / ``ElasticNet`` (``alpha``): :func:`sklearn.linear_model.enet_path` on the
  centred training data, alphas in decreasing order with warm starts. Same objective and
  alpha scaling as the estimators (``1/(2 n) ||y - Xw||^2 + ...``); the intercept is
  ``mean(y) - mean(X) w`` as ``fit_intercept=True`` gives. Agreement: the solver tolerance.
  An alpha whose coordinate descent stops at ``max_iter`` (not converged) is refitted cold, as
  the estimator itself (its result depends on where the solver started).
- ``LogisticRegression`` (``C``): every C fitted cold, exactly as the generic route fits it
  (bit for bit), with scikit-learn's per-fit checks done once per path, not per C.

:func:`plan` partitions a block's params into path groups and single params;
:func:`fit_path` fits one group on one training set. Anything unusual (a setting the kernel
does not reproduce exactly) is left to the generic one-fit-per-param route.
"""
from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass
from typing import Callable
import warnings

import numpy as np

from .learners import fit_model, predict_output
from ..workflow.params import Param, import_estimator

log = logging.getLogger(__name__)


@dataclass(repr=False, eq=False)
class Group:
    """Params fitted together: ``index`` into the block's params; ``kernel`` None = one by one."""

    index: tuple[int, ...]
    kernel: str | None = None


# ---------------------------------------------------------------------------------------------
# numpy kernels: (X, y, train, path values, settings) -> predictions (len(path), n)


def _training_rows(X, y, train, fit_intercept: bool):
    """(X, X[train], y[train], x mean, y mean) in float64; zero means without an intercept
    (the centring scikit-learn's linear models do before solving)."""
    X = np.asarray(X, dtype=np.float64)
    Xt, yt = X[train], np.asarray(y, dtype=np.float64)[train]
    if fit_intercept:
        return X, Xt, yt, Xt.mean(axis=0), yt.mean()
    return X, Xt, yt, np.zeros(X.shape[1]), 0.0


def ridge_path(X: np.ndarray, y: np.ndarray, train: np.ndarray, alphas: np.ndarray, *,
               fit_intercept: bool = True) -> np.ndarray:
    """Ridge predictions on every row of ``X`` for every alpha, from one SVD.

    Parameters
    ----------
    X : (n, p) float array; y : (n,) float array; train : (n,) bool mask of the training rows.
    alphas : (A,) penalties, as :class:`sklearn.linear_model.Ridge` ``alpha``.
    fit_intercept : centre X and y on the training rows first (as Ridge does).

    Returns
    -------
    (A, n) predictions.
    """
    X, Xt, yt, x_mean, y_mean = _training_rows(X, y, train, fit_intercept)
    U, s, Vt = np.linalg.svd(Xt - x_mean, full_matrices=False)
    alphas = np.asarray(alphas, dtype=np.float64)
    # DESIGN CHOICE: singular values at rounding level are dropped (as lstsq would) so that an
    # unpenalised, rank-deficient fit gives the minimum-norm solution rather than noise / 0.
    tiny = s <= s.max(initial=0.0) * max(Xt.shape) * np.finfo(np.float64).eps
    denom = s[None, :] ** 2 + alphas[:, None]
    shrink = np.divide(s[None, :], denom, out=np.zeros_like(denom), where=~tiny[None, :] & (denom > 0))
    coef = (shrink * (U.T @ (yt - y_mean))[None, :]) @ Vt        # (A, p)
    return ((X - x_mean) @ coef.T).T + y_mean


def enet_path_predictions(X: np.ndarray, y: np.ndarray, train: np.ndarray, alphas: np.ndarray, *,
                          l1_ratio: float = 1.0, fit_intercept: bool = True, tol: float = 1e-4,
                          max_iter: int = 1000, positive: bool = False, selection: str = "cyclic",
                          random_state=None, return_n_iter: bool = False):
    """Lasso (``l1_ratio=1``) / elastic-net predictions for every alpha via ``enet_path``.

    Alphas are fitted in decreasing order with warm starts and returned in the given order;
    shape (A, n). With ``return_n_iter``, also each alpha's coordinate-descent iterations (A,)
    (``max_iter`` or more: that alpha did not converge).
    """
    from sklearn.linear_model import enet_path

    X, Xt, yt, x_mean, y_mean = _training_rows(X, y, train, fit_intercept)
    alphas = np.asarray(alphas, dtype=np.float64)
    order = np.argsort(-alphas, kind="stable")
    gram_route = Xt.shape[0] > Xt.shape[1]
    # X[train] is a copy of its own: centred in place. Coordinate descent on the Gram matrix
    # reads X only for its shape, so only the other route needs it in Fortran order (the
    # Fortran copy of a 16000 x 500 fold was a fifth of a path's time).
    Xc = np.subtract(Xt, x_mean, out=Xt if Xt.base is None and Xt is not X else None)
    Xc = Xc if gram_route else np.asfortranarray(Xc)
    yc = np.ascontiguousarray(yt - y_mean)
    # DESIGN CHOICE: coordinate descent on the Gram matrix when there are more training rows
    # than features, as LassoCV / ElasticNetCV do ("auto"): each pass costs p^2, not n p. The
    # Gram matrix and X'y are computed here as enet_path's "auto" computes them (C-ordered
    # np.dot), and the arrays are passed validated (check_input=False): with check_input=True
    # enet_path re-validates the Gram matrix before every alpha (~0.3 ms each, two thirds of a
    # 100-alpha path of a 1600 x 200 fold; LassoCV pays it too).
    gram: np.ndarray | bool = False
    xy = None
    if gram_route:
        gram = np.empty((Xc.shape[1], Xc.shape[1]), order="C")
        np.dot(Xc.T, Xc, out=gram)
        xy = np.empty(Xc.shape[1])
        np.dot(Xc.T, yc, out=xy)
    _, coefs, _, n_iter = enet_path(Xc, yc, l1_ratio=l1_ratio, alphas=alphas[order],
                                    precompute=gram, Xy=xy, tol=tol, max_iter=max_iter,
                                    positive=positive, selection=selection,
                                    random_state=random_state, check_input=False,
                                    return_n_iter=True)
    # X @ coefs less the mean's share: no centred copy of the whole X (n x p) per path
    out = np.empty((len(alphas), X.shape[0]))
    out[order] = (X @ coefs).T + (y_mean - x_mean @ coefs)[:, None]
    if not return_n_iter:
        return out
    iterations = np.empty(len(alphas), dtype=np.int64)
    iterations[order] = n_iter
    return out, iterations


# ---------------------------------------------------------------------------------------------
# which params go together


def _classes():
    from sklearn.linear_model import ElasticNet, Lasso, LogisticRegression, Ridge, RidgeClassifier

    return {Ridge: "ridge", RidgeClassifier: "ridge_classifier", Lasso: "lasso",
            ElasticNet: "enet", LogisticRegression: "logistic"}


PATH_KEY = {"ridge": "alpha", "ridge_classifier": "alpha", "lasso": "alpha", "enet": "alpha",
            "logistic": "C"}
WARM_START_SOLVERS = ("lbfgs", "newton-cg", "newton-cholesky", "sag", "saga")


def _is_number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def kernel_of(param: Param) -> str | None:
    """The path kernel that reproduces ``param``'s estimator exactly, or None."""
    if param.preprocess:
        return None     # a pipeline: the transformers change X per training set
    try:
        settings_json = param.settings_json
    except (TypeError, ValueError):
        return None     # settings that are not plain values: leave them to the generic route
    return _kernel_of(param.estimator, param.output, settings_json)


@functools.lru_cache(maxsize=4096)
def _rest(kernel: str, settings_json: str) -> str:
    """The settings but the path hyperparameter, as sorted JSON: what a path group shares."""
    rest = {k: v for k, v in json.loads(settings_json).items() if k != PATH_KEY[kernel]}
    return json.dumps(rest, sort_keys=True, default=str)


@functools.lru_cache(maxsize=4096)
def _kernel_of(estimator: str, output: str, settings_json: str) -> str | None:
    param = Param("", estimator, fixed=json.loads(settings_json), output=output)
    try:
        cls = import_estimator(param.estimator)
    except Exception:  # noqa: BLE001 - the generic route reports the import error per fit
        return None
    kernel = _classes().get(cls)
    if kernel is None:
        return None
    try:
        settings = cls(**param.settings()).get_params()
    except Exception:  # noqa: BLE001
        return None
    key = PATH_KEY[kernel]
    value = settings[key]
    # invalid settings (alpha < 0, an unknown solver) must fail per fit as on the generic route:
    # the path value is checked here, the other settings by scikit-learn itself
    if not (_is_number(value) and np.isfinite(value) and (value > 0 if key == "C" else value >= 0)):
        return None
    if not _valid_settings(estimator, json.dumps({**json.loads(settings_json), key: 1.0},
                                                 sort_keys=True)):
        return None
    if kernel in ("ridge", "ridge_classifier"):
        # only scikit-learn's exact solvers: iterative ones (sag, saga, lbfgs, lsqr, sparse_cg)
        # stop at a tolerance, and positive=True is a different problem.
        if settings.get("positive") or settings["solver"] not in ("auto", "svd", "cholesky"):
            return None
        if kernel == "ridge_classifier" and (settings["class_weight"] is not None
                                             or param.output == "predict_proba"):
            return None
    if kernel in ("lasso", "enet"):
        if not _is_number(settings.get("l1_ratio", 1.0)):
            return None
    if kernel == "logistic":
        if settings["solver"] not in WARM_START_SOLVERS:
            return None
    return kernel


@functools.lru_cache(maxsize=256)
def _valid_settings(estimator: str, settings_json: str) -> bool:
    """Whether scikit-learn accepts these settings: one fit on four rows (parameters are
    validated when ``fit`` starts). Cached per setting apart from the path value."""
    X = np.arange(4.0).reshape(4, 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import_estimator(estimator)(**json.loads(settings_json)).fit(X, [0, 1, 0, 1])
    except Exception:  # noqa: BLE001 - whatever scikit-learn refuses goes the generic route
        return False
    return True


def plan(params: list[Param]) -> list[Group]:
    """Partition a block's params into path groups (>= 2 params) and single params.

    A path group holds params of the same estimator, output and settings except the path
    hyperparameter (``alpha`` or ``C``); groups keep the params' order of first appearance.
    """
    groups: dict[tuple, list[int]] = {}
    kernels: dict[tuple, str | None] = {}
    for h, param in enumerate(params):
        kernel = kernel_of(param)
        if kernel is None:
            key: tuple = ("single", h)
        else:
            key = (kernel, param.estimator, param.output, _rest(kernel, param.settings_json))
        groups.setdefault(key, []).append(h)
        kernels[key] = kernel
    out = []
    for key, index in groups.items():
        kernel = kernels[key] if len(index) > 1 else None
        out.append(Group(tuple(index), kernel))
    return out


# ---------------------------------------------------------------------------------------------
# fitting one group


def fit_path(params: list[Param], X, y, train: np.ndarray, *, positive=None,
             kernel: str | None = None) -> np.ndarray:
    """Predictions (len(params), n) of params that differ only in their path hyperparameter.

    Raises on anything the kernel cannot do (the caller falls back to one fit per param);
    non-finite predictions raise too, so that the generic route decides what they mean.
    """
    if kernel is None:
        kernels = {kernel_of(p) for p in params}
        if len(kernels) != 1 or None in kernels:
            raise ValueError("params are not one path-aware learner")
        kernel = kernels.pop()
    fn: Callable = _KERNELS[kernel]
    pred = fn(params, X, y, np.asarray(train, dtype=bool), positive)
    if not np.isfinite(pred).all():
        raise FloatingPointError("path fit gave non-finite predictions")
    return pred


def _settings(param: Param) -> dict:
    return import_estimator(param.estimator)(**param.settings()).get_params()


def _path_values(params: list[Param], key: str) -> np.ndarray:
    default = _settings(params[0])[key]
    return np.array([float(p.settings().get(key, default)) for p in params])


def _ridge(params, X, y, train, positive):
    s = _settings(params[0])
    return ridge_path(X, y, train, _path_values(params, "alpha"), fit_intercept=s["fit_intercept"])


def _ridge_classifier(params, X, y, train, positive):
    s = _settings(params[0])
    y = np.asarray(y)
    classes = np.unique(y[train])
    if len(classes) != 2:
        raise ValueError("path-aware RidgeClassifier handles two classes")
    # RidgeClassifier codes classes_[1] as +1 and classes_[0] as -1
    coded = np.where(y == classes[1], 1.0, -1.0)
    scores = ridge_path(X, coded, train, _path_values(params, "alpha"),
                        fit_intercept=s["fit_intercept"])
    output = params[0].output
    if output == "decision_function":
        return scores
    if output == "predict":
        labels = np.where(scores > 0, classes[1], classes[0])
        return labels.astype(np.float64)
    raise ValueError(f"RidgeClassifier has no {output}")


def _enet(params, X, y, train, positive):
    s = _settings(params[0])
    # DESIGN CHOICE: on wide data (as many features as training rows or more) the estimator's
    # own cold fit is where coordinate descent stops at max_iter while a warm-started path
    # converges (a 100 x 300 regression: 15 of 45 alphas, predictions 1.7 x max|y| apart),
    # which the path cannot detect (below); with more rows than features no cold fit stopped
    # at max_iter in the cases measured (diabetes; 200 x 150, 400 x 300 of effective rank 20,
    # 2000 x 200: 0 of 30 alphas each). So wide training sets are fitted cold, alpha by alpha.
    if np.count_nonzero(train) <= X.shape[1]:
        return np.stack([_cold(p, X, y, train, positive) for p in params])
    pred, n_iter = enet_path_predictions(
        X, y, train, _path_values(params, "alpha"), l1_ratio=float(s.get("l1_ratio", 1.0)),
        fit_intercept=s["fit_intercept"], tol=s["tol"], max_iter=s["max_iter"],
        positive=s["positive"], selection=s["selection"], random_state=s["random_state"],
        return_n_iter=True)
    # DESIGN CHOICE: a converged alpha is the estimator's optimum within its tolerance (the
    # duality gap bounds the predictions' distance to it, wherever the solver started). A fit
    # stopped by max_iter is wherever the iterations left it, which depends on the start, and
    # warm starts converge in fewer iterations than the estimator's own cold fit: a path
    # alpha can converge where Lasso(alpha, max_iter) does not. So once any alpha of the
    # path stops at max_iter (max_iter binds on this training set), every alpha is refitted
    # cold, exactly as the generic route fits it. Not detected: a path whose warm-started
    # alphas all converge while a cold fit would not, with more rows than features
    # (docs/guide/paths.md says so; none was found in the cases measured).
    if (n_iter >= s["max_iter"]).any():
        return np.stack([_cold(p, X, y, train, positive) for p in params])
    return pred


def _cold(param: Param, X, y, train, positive) -> np.ndarray:
    """``param``'s estimator fitted from scratch on the training rows by the generic route's
    :func:`cvflow.fitting.learners.fit_model`; its predictions on every row."""
    return predict_output(fit_model(param, X, np.asarray(y), train), X, param.output, positive)


def _logistic(params, X, y, train, positive):
    from sklearn import config_context

    if not np.isfinite(X).all():
        raise ValueError("X has non-finite values")    # the generic route reports them per fit
    # DESIGN CHOICE: every C is fitted cold, as LogisticRegression(C=c).fit gives, never warm
    # started from the previous C. lbfgs (and the other solvers) stop at a gradient tolerance
    # or at max_iter, and where they stop depends on where they started: measured on breast
    # cancer / wine, 5 folds, 13 Cs, warm-started fits differed from the cold ones by up to 186
    # in decision value (0.97 in probability) even when every fit converged, and flipped
    # predictions (zero_one changed by up to 0.018). The path only saves scikit-learn's
    # per-fit checks: the settings were validated once (kernel_of) and X is finite, so the
    # fits skip parameter validation and finiteness checks (~12% of a 20-C path on 1600 x 50),
    # which changes no number.
    with config_context(skip_parameter_validation=True, assume_finite=True):
        return np.stack([_cold(p, X, y, train, positive) for p in params])


_KERNELS: dict[str, Callable] = {"ridge": _ridge, "ridge_classifier": _ridge_classifier,
                                 "lasso": _enet, "enet": _enet, "logistic": _logistic}

"""What a search adds to ``GridSearchCV``'s answer, for its chosen candidate: the K-fold
estimate with its standard error, the bias-corrected K-fold estimate (Burman 1989) and the
warnings (``SearchCV.report``, docs/guide/searchcv.md).

The corrected estimate needs the chosen candidate fitted on all the data (``best_estimator_``,
whose predictions :func:`full_predictions` keeps at ``fit``) and its fold models' predictions
on every sample (the cube's ``pred``): corrected = K-fold + the full fit's risk on D − Σ_j p_j
· the risk of fold model j on D, computed by :func:`cvflow.estimators.corrected.corrected_scores`,
the ``corrected_kfold`` estimator's own kernel, for the one candidate.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np

from ..estimators import guardrails
from ..estimators.corrected import corrected_with_full
from ..estimators.kfold import kfold
from ..estimators.losses import Loss, apply_loss, get_loss
from ..fitting.learners import fit_and_score, predict_output
from ..report.tables import fit_records

#: a per-fold metric -> the pointwise loss whose mean it is one minus (the corrected estimate
#: is computed on the loss and shown on the metric's scale)
COMPLEMENT = {"accuracy": "zero_one"}


def pointwise_loss(decl: Loss | None) -> Loss | None:
    """The pointwise loss the corrected estimate of scoring ``decl`` is computed on, or None."""
    if decl is None:
        return None
    if decl.pointwise:
        return decl
    name = COMPLEMENT.get(decl.name)
    return None if name is None else get_loss(name)


def full_predictions(model, X, cube, h: int) -> np.ndarray:
    """The predictions of ``model`` (the chosen candidate fitted on all of X) in the form the
    cube stores candidate ``h``'s (:func:`cvflow.fitting.learners.predict_output`)."""
    classes = json.loads(cube.attrs.get("classes") or "null")
    positive = None if not classes else classes[-1] if len(classes) == 2 else tuple(classes)
    output = str(cube["output"].values[h]) if "output" in cube.coords else "predict"
    return predict_output(model, X, output, positive)


def every_row(result, cube, h: int, X, y, sample_weight):
    """Candidate ``h``'s slice of ``cube`` with its fold models' predictions of every sample.

    A search without a store predicts each fit's test rows alone (``execution.predict_rows:
    test``); the corrected estimate also reads the fold models' predictions of their training
    rows, so each fold model of ``h`` that did not fail is fitted again here as the run fitted
    it (the study's own param, its training rows and sample weights; no fit hooks) and
    predicts every sample: K fits, only when the report is asked for."""
    one = cube.isel(param=[h]).copy(deep=True)
    param = result.run_params.get(str(cube["param_json"].values[h]))
    if param is None:
        return one
    param = dataclasses.replace(param, fit_hook=None)
    classes = json.loads(cube.attrs.get("classes") or "null")
    positive = None if not classes else classes[-1] if len(classes) == 2 else tuple(classes)
    pred = one["pred"].values
    failed = one["failed"].values
    train = np.asarray(one["train"].values, dtype=bool)
    for s in range(pred.shape[1]):
        if failed[0, s] or not train[s].any():
            continue
        full, _, error, _ = fit_and_score(param, X, y, train[s], positive, sample_weight)
        if not error:
            pred[0, s] = full
    return one


def estimates(cube, h: int, decl: Loss | None, full_pred: np.ndarray | None) -> dict[str, Any]:
    """``kfold``, ``kfold_se`` (the K-fold estimate of candidate ``h`` over every sample and
    sd(fold scores) / sqrt(K), as the ``kfold`` estimator), ``corrected``, ``corrected_se``
    (NaN, with ``why``, when it cannot be computed), ``loss`` (what they measure) and
    ``warnings`` (the ``kfold`` estimator's)."""
    out: dict[str, Any] = {"loss": None if decl is None else decl.label, "kfold": np.nan,
                           "kfold_se": np.nan, "corrected": np.nan, "corrected_se": np.nan,
                           "why": "", "warnings": []}
    if decl is None:
        out["why"] = "the scoring is computed at fit time (no stored loss)"
        return out
    result = kfold(cube.isel(param=[h]), loss=decl.label)
    out["kfold"] = float(result["estimate"].values[0])
    out["kfold_se"] = float(result["se"].values[0])
    sizes = np.asarray(result["fold_size"].values) if "fold_size" in result else []
    out["warnings"] = [w["message"] for w in guardrails.read(result)
                       + guardrails.test_set_sizes(sizes, "test fold")]
    loss = pointwise_loss(decl)
    if loss is None:
        out["why"] = (f"{decl.label} is a per-fold metric; a pointwise scoring (accuracy, "
                      "neg_log_loss, neg_brier_score, neg_mean_squared_error) has one")
        return out
    if full_pred is None:
        out["why"] = "refit=False: it needs the chosen candidate fitted on all the data"
        return out
    one = cube.isel(param=[h])
    classes = json.loads(cube.attrs.get("classes") or "null")
    outputs = [str(one["output"].values[0])] if "output" in one.coords else None
    full = np.asarray(apply_loss(loss, np.asarray(cube["y"].values), full_pred[None], classes,
                                 outputs))
    scores = corrected_with_full(one, full, loss=loss.label)
    corrected, se = float(scores["estimate"].values[0]), float(scores["se"].values[0])
    if not np.isfinite(corrected):
        out["why"] = "the cube holds no fold model's predictions of its training samples"
        return out
    if loss is not decl:                   # the metric's scale: 1 - the loss
        corrected = 1.0 - corrected
    out["corrected"], out["corrected_se"] = corrected, se
    return out


def text(search) -> str:
    """The lines ``SearchCV.report`` prints."""
    sc = search._scoring
    key = sc.key
    decl = sc.decls.get(key) if key in sc.losses else None
    column = search._column(key)
    h = int(search.best_index_)
    splits = search.n_splits_
    name = type(search).__name__
    scoring = sc.losses.get(key, key)
    lines = [f"{name}: {len(search.cv_results_['params'])} candidates x {splits} splits; "
             f"chosen {search.best_params_} (best_index_ {h})"]
    cube = search.result_.cube
    best = getattr(search, "best_estimator_", None)
    X = search.__dict__.get("_fit_X")
    full_pred = (full_predictions(best, X[0], cube, h)
                 if best is not None and X is not None and pointwise_loss(decl) is not None
                 else None)
    if full_pred is not None and search.__dict__.get("_test_only"):
        est = estimates(every_row(search.result_, cube, h, *X), 0, decl, full_pred)
    else:
        est = estimates(cube, h, decl, full_pred)
    if best is not None and X is None and pointwise_loss(decl) is not None:
        est["why"] = "a copied (pickled) search does not keep X; report() on the fitted one"
    if decl is None:
        scores = np.array([search.cv_results_[f"split{k}_test_{column}"][h]
                           for k in range(splits)], dtype=float)
        est["kfold"] = float(scores.mean())
        est["kfold_se"] = float(scores.std(ddof=1) / np.sqrt(splits)) if splits > 1 else np.nan
    what = est["loss"] or scoring
    lines.append(f"  K-fold estimate ({what}):            {est['kfold']:.6g}  "
                 f"se {est['kfold_se']:.3g}")
    if np.isfinite(est["corrected"]):
        lines.append(f"  corrected K-fold estimate ({what}):  {est['corrected']:.6g}  "
                     f"se {est['corrected_se']:.3g}  (Burman 1989: without the bias of "
                     "fitting (K-1)/K of the data)")
    else:
        lines.append(f"  corrected K-fold estimate: not computed: {est['why']}")
    if hasattr(search, "best_score_"):
        lines.append(f"  best_score_ ({scoring}, scikit-learn's mean of the fold scores): "
                     f"{search.best_score_:.6g}")
    warnings = list(est["warnings"])
    failed, _, _ = fit_records(search.result_)
    if failed.any():
        warnings.append(f"{int(failed.sum())} of {failed.size} fits failed "
                        f"({int(failed[h].sum())} of the chosen candidate's)")
    if search.select != "kfold":
        res = search.result_[search._select()[0]]
        warnings += [w["message"] for w in guardrails.read(res)]
    lines += [f"  warning: {w}" for w in warnings] or ["  warnings: none"]
    return "\n".join(lines)

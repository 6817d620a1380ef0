"""Diagnostics of one param's out-of-fold predictions, read from the cube (no refit).

Each analysis sample i of repeat r has one out-of-fold prediction: the stored prediction of
the fit of the fold it is in, ``pred[h, fold_split[r, fold[r, i]], i]`` (:func:`out_of_fold`).
From these, with scikit-learn's public functions:

- classification with a score (``decision_function`` or ``predict_proba``): ROC
  (:func:`sklearn.metrics.roc_curve`) and precision-recall
  (:func:`sklearn.metrics.precision_recall_curve`) curves, pooled over every fold and repeat
  and one per fold (the fold spread); more than two classes: one-vs-rest per class, pooled;
- classification with ``predict_proba``: the reliability diagram
  (:func:`sklearn.calibration.calibration_curve`, 10 uniform bins), pooled and per fold
  (one-vs-rest per class for more than two classes);
- classification, any output: the confusion matrix (:func:`sklearn.metrics.confusion_matrix`)
  of the predicted classes (a binary decision value > 0, a probability > 0.5, the argmax of
  per-class scores, or the stored label), summed over repeats;
- regression: predicted against observed, every out-of-fold prediction (up to
  ``MAX_POINTS``), with R² and the mean squared error pooled.

The kernels (``*_data``) return plain dicts of numpy arrays; :func:`figures` draws them with
bokeh, every data source named (``roc-pooled``, ``roc-folds``, ``pr-pooled``, ``pr-folds``,
``calibration-pooled``, ``calibration-folds``, ``confusion-cells``, ``pred-obs-points``, ...)
so tests read the numbers back from the page.
"""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass

import numpy as np
import xarray as xr

from ...estimators.memory import compute_here, is_lazy
from .style import LEARNER_COLORS, WIDTH, figure, plain

N_BINS = 10
MAX_POINTS = 5000


@dataclass(frozen=True)
class OutOfFold:
    """The out-of-fold predictions of one param on the analysis samples.

    ``score`` is (R, n) (binary: the positive class's score; regression: the prediction) or
    (R, n, C) for more than two classes, NaN where the fold's fit failed or the sample is in
    no fold of that repeat; ``fold`` (R, n) the fold of each sample (-1: none); ``y`` (n,) the
    targets as stored; ``classes`` the class labels (the last is the positive class of a
    binary task), None for regression.
    """

    param: int
    output: str
    y: np.ndarray
    score: np.ndarray
    fold: np.ndarray
    classes: list | None

    @property
    def multiclass(self) -> bool:
        return self.classes is not None and len(self.classes) > 2

    def pooled(self) -> tuple[np.ndarray, np.ndarray]:
        """(y, score) of every (repeat, sample) with a prediction, repeats one after another."""
        y = np.broadcast_to(self.y, self.fold.shape).reshape(-1)
        score = self.score.reshape((-1,) + self.score.shape[2:])
        keep = self._keep(score)
        return y[keep], score[keep]

    def folds(self):
        """(repeat, fold, y, score) of every fold of every repeat, predictions present."""
        for r in range(self.fold.shape[0]):
            for j in np.unique(self.fold[r][self.fold[r] >= 0]):
                rows = self.fold[r] == j
                score = self.score[r][rows]
                keep = self._keep(score)
                yield r, int(j), self.y[rows][keep], score[keep]

    @staticmethod
    def _keep(score: np.ndarray) -> np.ndarray:
        return ~np.isnan(score.reshape(len(score), -1)).any(axis=1)


def out_of_fold(cube: xr.Dataset, param: int) -> OutOfFold | None:
    """The out-of-fold predictions of ``param`` (reads its K·R fold fits only), or None when
    the store has no complete set of fold splits."""
    table = np.asarray(cube["fold_split"].values)
    if table.size == 0 or (table < 0).any():
        return None
    analysis = ~np.asarray(cube["is_test"].values, dtype=bool)
    fold = np.asarray(cube["fold"].values)[:, analysis]
    splits = np.unique(table)
    # the K·R fold fits of one param: small, read in this process (no distributed import)
    selected = cube["pred"].isel(param=int(param), split=splits.tolist()).data
    pred = np.asarray(compute_here(selected) if is_lazy(selected) else selected,
                      dtype=float)[:, analysis]
    where = np.searchsorted(splits, table)              # (R, K) -> row of ``pred``
    score = np.full((fold.shape[0],) + pred.shape[1:], np.nan)
    columns = np.arange(fold.shape[1])
    for r in range(fold.shape[0]):
        inside = fold[r] >= 0
        score[r, inside] = pred[where[r, fold[r, inside]], columns[inside]]
    classes = json.loads(cube.attrs.get("classes") or "null") or None
    output = str(cube["output"].values[int(param)]) if "output" in cube.coords else "predict"
    return OutOfFold(int(param), output, np.asarray(cube["y"].values)[analysis], score,
                     np.where(np.isnan(score.reshape(score.shape[:2] + (-1,))).any(-1), -1, fold),
                     classes)


# ---------------------------------------------------------------------------------------------
# kernels: numpy arrays in, numbers out (scikit-learn's public functions)


def _finite_scores(score: np.ndarray) -> np.ndarray:
    """-inf (a class absent from a fold's training set) below every finite score, same order."""
    finite = score[np.isfinite(score)]
    low = float(finite.min()) - 1.0 if finite.size else 0.0
    return np.where(np.isneginf(score), low, score)


def _one_vs_rest(oof: OutOfFold, y, score):
    """(name, is-positive, score) per curve: the positive class of a binary task, each class
    against the rest for more."""
    classes = oof.classes or []
    if not oof.multiclass:
        yield str(classes[-1]), np.asarray(y) == classes[-1], score
        return
    for c, label in enumerate(classes):
        yield str(label), np.asarray(y) == label, _finite_scores(score[:, c])


def _two_classes(truth: np.ndarray) -> bool:
    return 0 < int(truth.sum()) < truth.size


def roc_data(oof: OutOfFold) -> dict:
    """ROC curves: ``pooled`` {class: (fpr, tpr, thresholds, auc)} and ``folds`` (binary only)
    [(repeat, fold, fpr, tpr, auc)], folds with one class left out."""
    from sklearn.metrics import roc_auc_score, roc_curve

    y, score = oof.pooled()
    pooled = {}
    for name, truth, s in _one_vs_rest(oof, y, score):
        if _two_classes(truth):
            fpr, tpr, thr = roc_curve(truth, s)
            pooled[name] = (fpr, tpr, thr, float(roc_auc_score(truth, s)))
    folds = []
    if not oof.multiclass:
        for r, j, yf, sf in oof.folds():
            truth = np.asarray(yf) == oof.classes[-1]
            if _two_classes(truth):
                fpr, tpr, _ = roc_curve(truth, sf)
                folds.append((r, j, fpr, tpr, float(roc_auc_score(truth, sf))))
    return {"pooled": pooled, "folds": folds}


def pr_data(oof: OutOfFold) -> dict:
    """Precision-recall curves: ``pooled`` {class: (recall, precision, average precision)}
    and ``folds`` (binary only) [(repeat, fold, recall, precision, average precision)]."""
    from sklearn.metrics import average_precision_score, precision_recall_curve

    y, score = oof.pooled()
    pooled = {}
    for name, truth, s in _one_vs_rest(oof, y, score):
        if _two_classes(truth):
            precision, recall, _ = precision_recall_curve(truth, s)
            pooled[name] = (recall, precision, float(average_precision_score(truth, s)))
    folds = []
    if not oof.multiclass:
        for r, j, yf, sf in oof.folds():
            truth = np.asarray(yf) == oof.classes[-1]
            if _two_classes(truth):
                precision, recall, _ = precision_recall_curve(truth, sf)
                folds.append((r, j, recall, precision, float(average_precision_score(truth, sf))))
    return {"pooled": pooled, "folds": folds}


def calibration_data(oof: OutOfFold, n_bins: int = N_BINS) -> dict:
    """Reliability diagram of probabilities: ``pooled`` {class: (mean predicted, fraction
    positive)} and ``folds`` (binary only) [(repeat, fold, mean predicted, fraction positive)]."""
    from sklearn.calibration import calibration_curve

    y, score = oof.pooled()
    pooled = {}
    for name, truth, s in _one_vs_rest(oof, y, score):
        if _two_classes(truth):
            prob_true, prob_pred = calibration_curve(truth, np.clip(s, 0.0, 1.0), n_bins=n_bins)
            pooled[name] = (prob_pred, prob_true)
    folds = []
    if not oof.multiclass:
        for r, j, yf, sf in oof.folds():
            truth = np.asarray(yf) == oof.classes[-1]
            if _two_classes(truth):
                prob_true, prob_pred = calibration_curve(truth, np.clip(sf, 0.0, 1.0),
                                                         n_bins=n_bins)
                folds.append((r, j, prob_pred, prob_true))
    return {"pooled": pooled, "folds": folds}


def predicted_classes(oof: OutOfFold, score: np.ndarray) -> np.ndarray:
    """The class each score predicts: argmax of per-class scores; binary: decision value > 0,
    probability > 0.5, or the stored label."""
    classes = np.asarray(oof.classes, dtype=object)
    if oof.multiclass:
        return classes[np.asarray(score).argmax(axis=1)]
    if oof.output == "predict":
        positive = np.asarray(score) == float(classes[-1])
    else:
        positive = np.asarray(score) > (0.0 if oof.output == "decision_function" else 0.5)
    return np.where(positive, classes[-1], classes[0])


def confusion_data(oof: OutOfFold) -> dict:
    """``matrix`` (C, C): rows the true class, columns the predicted one (repeats summed),
    ``classes`` their labels."""
    from sklearn.metrics import confusion_matrix

    y, score = oof.pooled()
    labels = list(oof.classes or [])
    predicted = predicted_classes(oof, score)
    truth = np.asarray(y, dtype=object)
    keyed = {str(c): c for c in labels}               # labels as the store keeps them
    matrix = confusion_matrix([keyed.get(str(v), v) for v in truth],
                              [keyed.get(str(v), v) for v in predicted], labels=labels)
    return {"matrix": matrix, "classes": [str(c) for c in labels]}


def regression_data(oof: OutOfFold, max_points: int = MAX_POINTS) -> dict:
    """Observed and predicted of every out-of-fold prediction (with repeat and fold), at most
    ``max_points`` of them (a fixed random subset, ``shown`` < ``total``), and R² and the mean
    squared error pooled over all of them."""
    from sklearn.metrics import mean_squared_error, r2_score

    R, n = oof.fold.shape
    repeat = np.repeat(np.arange(R), n)
    fold = oof.fold.reshape(-1)
    observed = np.broadcast_to(np.asarray(oof.y, dtype=float), (R, n)).reshape(-1)
    predicted = oof.score.reshape(-1)
    keep = np.flatnonzero(np.isfinite(predicted))
    total = keep.size
    r2 = float(r2_score(observed[keep], predicted[keep])) if total > 1 else float("nan")
    mse = float(mean_squared_error(observed[keep], predicted[keep])) if total else float("nan")
    if keep.size > max_points:
        keep = np.sort(np.random.default_rng(0).choice(keep, max_points, replace=False))
    return {"observed": observed[keep], "predicted": predicted[keep], "repeat": repeat[keep],
            "fold": fold[keep], "total": int(total), "r2": r2, "mse": mse}


# ---------------------------------------------------------------------------------------------
# figures


def _fold_lines(fig, name: str, folds: list, what: str) -> None:
    """Per-fold curves as one thin grey multi-line (source ``name``: xs, ys, repeat, fold, and
    the per-fold number ``what`` when the tuples carry one)."""
    from bokeh.models import ColumnDataSource

    if not folds:
        return
    data = {"xs": [plain(f[2]) for f in folds], "ys": [plain(f[3]) for f in folds],
            "repeat": [f[0] for f in folds], "fold": [f[1] for f in folds]}
    if len(folds[0]) > 4:
        data[what] = [f[4] for f in folds]
    fig.multi_line("xs", "ys", source=ColumnDataSource(data, name=name), color="#999999",
                   alpha=0.6, line_width=1, legend_label=f"each fold ({len(folds)})")


def _pooled_lines(fig, name: str, pooled: dict, columns: tuple[str, str], legend) -> None:
    from bokeh.models import ColumnDataSource

    for k, (label, curve) in enumerate(pooled.items()):
        source = f"{name}-pooled" if len(pooled) == 1 else f"{name}-class-{k}"
        src = ColumnDataSource({columns[0]: plain(curve[0]), columns[1]: plain(curve[1]),
                                "class": [label] * len(curve[0])}, name=source)
        color = LEARNER_COLORS[k % len(LEARNER_COLORS)]
        fig.line(*columns, source=src, color=color, line_width=2.5,
                 legend_label=legend(label, curve))
        if name == "calibration":
            fig.scatter(*columns, source=src, color=color, size=6)


def _legend(fig, location: str) -> None:
    fig.legend.location = location
    fig.legend.label_text_font_size = "8pt"
    fig.legend.background_fill_alpha = 0.8
    fig.legend.click_policy = "hide"


def roc_figure(oof: OutOfFold):
    data = roc_data(oof)
    if not data["pooled"]:
        return None
    fig = figure("ROC, out of fold", "roc", "false positive rate",
                 "true positive rate", x_range=(-0.02, 1.02), y_range=(-0.02, 1.02))
    fig.line([0, 1], [0, 1], color="#bbbbbb", line_dash="dashed")
    _fold_lines(fig, "roc-folds", data["folds"], "auc")
    multi = oof.multiclass
    _pooled_lines(fig, "roc", data["pooled"], ("fpr", "tpr"),
                  lambda label, c: (f"{label} vs rest: AUC {c[3]:.3f}" if multi
                                    else f"all folds pooled: AUC {c[3]:.3f}"))
    _legend(fig, "bottom_right")
    return fig


def pr_figure(oof: OutOfFold):
    data = pr_data(oof)
    if not data["pooled"]:
        return None
    fig = figure("precision-recall, out of fold", "precision-recall", "recall",
                 "precision", x_range=(-0.02, 1.02), y_range=(-0.02, 1.02))
    _fold_lines(fig, "pr-folds", data["folds"], "average_precision")
    multi = oof.multiclass
    _pooled_lines(fig, "pr", data["pooled"], ("recall", "precision"),
                  lambda label, c: (f"{label} vs rest: AP {c[2]:.3f}" if multi
                                    else f"all folds pooled: AP {c[2]:.3f}"))
    _legend(fig, "bottom_left")
    return fig


def calibration_figure(oof: OutOfFold):
    data = calibration_data(oof)
    if not data["pooled"]:
        return None
    fig = figure("calibration (reliability diagram), out of fold", "calibration",
                 "mean predicted probability (10 bins)", "fraction of positives",
                 x_range=(-0.02, 1.02), y_range=(-0.02, 1.02))
    fig.line([0, 1], [0, 1], color="#bbbbbb", line_dash="dashed", legend_label="perfectly calibrated")
    _fold_lines(fig, "calibration-folds", data["folds"], "")
    multi = oof.multiclass
    _pooled_lines(fig, "calibration", data["pooled"], ("mean_predicted", "fraction_positive"),
                  lambda label, c: f"{label} vs rest" if multi else "all folds pooled")
    _legend(fig, "top_left")
    return fig


def confusion_figure(oof: OutOfFold):
    from bokeh.models import ColumnDataSource, FactorRange, LinearColorMapper
    from bokeh.palettes import Blues256

    data = confusion_data(oof)
    matrix, names = data["matrix"], data["classes"]
    totals = matrix.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(totals > 0, matrix / np.maximum(totals, 1), 0.0)
    true, pred = np.meshgrid(np.arange(len(names)), np.arange(len(names)), indexing="ij")
    repeats = oof.fold.shape[0]
    src = ColumnDataSource({
        "true": [names[i] for i in true.ravel()], "predicted": [names[j] for j in pred.ravel()],
        "count": matrix.ravel().tolist(), "share": share.ravel().tolist(),
        "text": [f"{c}\n{s:.0%}" for c, s in zip(matrix.ravel(), share.ravel())],
        "text_color": ["#ffffff" if s > 0.5 else "#000000" for s in share.ravel()]},
        name="confusion-cells")
    side = min(WIDTH, 200 + 60 * len(names))
    summed = f", {repeats} repeats summed" if repeats > 1 else ""
    fig = figure(f"confusion matrix, out of fold{summed}", "confusion",
                 "predicted class", "true class", width=max(side, 420), height=max(side - 40, 340),
                 x_range=FactorRange(*names), y_range=FactorRange(*reversed(names)),
                 tooltips=[("true", "@true"), ("predicted", "@predicted"), ("count", "@count"),
                           ("share of the true class", "@share{0.0%}")])
    mapper = LinearColorMapper(palette=list(reversed(Blues256)), low=0.0, high=1.0)
    fig.rect("predicted", "true", width=1, height=1, source=src,
             fill_color={"field": "share", "transform": mapper}, line_color="#ffffff")
    fig.text("predicted", "true", text="text", source=src, text_align="center",
             text_baseline="middle", text_font_size="9pt", text_color="text_color")
    fig.grid.grid_line_color = None
    fig.xaxis.major_label_orientation = 0.7 if sum(map(len, names)) > 40 else 0
    return fig


def regression_figure(oof: OutOfFold):
    from bokeh.models import ColumnDataSource

    data = regression_data(oof)
    if data["total"] == 0:
        return None
    shown = "" if data["observed"].size == data["total"] else \
        f", {data['observed'].size} of {data['total']} shown"
    fig = figure(f"predicted vs observed, out of fold (R² {data['r2']:.3f}, MSE "
                 f"{data['mse']:.4g}{shown})", "pred-vs-obs", "observed",
                 "predicted (out of fold)",
                 tooltips=[("observed", "@observed{0.000g}"), ("predicted", "@predicted{0.000g}"),
                           ("fold", "@fold"), ("repeat", "@repeat")])
    lo = float(min(data["observed"].min(), data["predicted"].min()))
    hi = float(max(data["observed"].max(), data["predicted"].max()))
    fig.line([lo, hi], [lo, hi], color="#bbbbbb", line_dash="dashed", legend_label="predicted = observed")
    folds = data["fold"]
    src = ColumnDataSource({"observed": data["observed"].tolist(),
                            "predicted": data["predicted"].tolist(),
                            "repeat": data["repeat"].tolist(), "fold": folds.tolist(),
                            "color": [LEARNER_COLORS[int(j) % len(LEARNER_COLORS)] for j in folds]},
                           name="pred-obs-points")
    fig.scatter("observed", "predicted", source=src, color="color", alpha=0.6, size=5,
                legend_label="one sample (colour: its fold)")
    _legend(fig, "top_left")
    return fig


def figures(cube: xr.Dataset, param: int) -> list:
    """The bokeh figures of ``param``'s out-of-fold predictions:
    classification ROC, precision-recall, calibration (probabilities only) and the confusion
    matrix; regression predicted vs observed. Empty when the store has no fold splits."""
    oof = out_of_fold(cube, param)
    if oof is None:
        return []
    if cube.attrs.get("task") != "classification":
        return [f for f in [regression_figure(oof)] if f is not None]
    made = []
    with warnings.catch_warnings():
        # a fold with few positives: scikit-learn warns, the curve is still drawn
        warnings.simplefilter("ignore", UserWarning)
        if oof.output != "predict":
            made += [roc_figure(oof), pr_figure(oof)]
        if oof.output == "predict_proba":
            made.append(calibration_figure(oof))
        made.append(confusion_figure(oof))
    return [f for f in made if f is not None]

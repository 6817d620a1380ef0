"""Small studies for the plot tests (tests/test_plots_grid.py, tests/test_plots_oof.py), run
with the CLI users run, each once per pytest session; and the report's bokeh document read
back from its HTML file (the numbers a plot carries, for checks against scikit-learn)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from cvtest import run_cli

# regression: ridge on a log axis, lasso (span 15x: log), enet (span 4.5x: linear), knn weights (strings: categorical),
# a tree's max_depth x min_samples_leaf (a heatmap); two repeats
REGRESSION = """\
name: plots-regression
data: {source: npz, path: data.npz}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {alpha: {logspace: [-3, 3, 5]}}
  - name: lasso
    class: sklearn.linear_model.Lasso
    grid: {alpha: [0.1, 0.3, 1.5]}
  - name: enet
    class: sklearn.linear_model.ElasticNet
    grid: {l1_ratio: [0.2, 0.5, 0.9]}
  - name: knn
    class: sklearn.neighbors.KNeighborsRegressor
    grid: {weights: [uniform, distance]}
  - name: tree
    class: sklearn.tree.DecisionTreeRegressor
    params: {random_state: 0}
    grid: {max_depth: [1, 2, 4, 8], min_samples_leaf: [1, 5, 20]}
design: {folds: 4, repeats: 2, seed: 0}
estimators: [kfold, corrected_kfold]
"""

# binary: logistic regression probabilities, C x class_weight (a heatmap with None as a level)
BINARY = """\
name: plots-binary
data: {source: npz, path: data.npz}
task: classification
loss: log_loss
learners:
  - name: logreg
    class: sklearn.linear_model.LogisticRegression
    output: predict_proba
    grid: {C: [0.01, 0.1, 1.0, 10.0], class_weight: [null, balanced]}
design: {folds: 5, seed: 1}
estimators: [kfold, corrected_kfold]
"""

# binary, decision values (SVC): ROC and precision-recall, no calibration
MARGIN = """\
name: plots-margin
data: {source: npz, path: data.npz}
task: classification
learners:
  - name: svc
    class: sklearn.svm.LinearSVC
    grid: {C: [0.01, 1.0]}
design: {folds: 3, seed: 0}
estimators: [kfold]
"""

# three classes (labels 5, 15, 25), two repeats
MULTICLASS = """\
name: plots-multiclass
data: {source: npz, path: data.npz}
task: classification
loss: log_loss
learners:
  - name: logreg
    class: sklearn.linear_model.LogisticRegression
    output: predict_proba
    grid: {C: [0.01, 1.0]}
design: {folds: 4, repeats: 2, seed: 0}
estimators: [kfold]
"""

STUDIES = {"regression": REGRESSION, "binary": BINARY, "margin": MARGIN, "multiclass": MULTICLASS}


def _data(name: str) -> dict:
    from sklearn.datasets import make_classification, make_regression

    if name == "regression":
        X, y = make_regression(n_samples=90, n_features=4, noise=10.0, random_state=0)
    elif name == "multiclass":
        X, y = make_classification(n_samples=120, n_features=5, n_informative=3, n_classes=3,
                                   random_state=0)
        y = y * 10 + 5
    else:
        X, y = make_classification(n_samples=150, n_features=5, n_informative=3,
                                   weights=[0.7, 0.3], flip_y=0.08, random_state=0)
    return {"X": X, "y": y}


def study(root: Path, name: str) -> tuple[Path, Path]:
    """(store, html report) of study ``name`` under ``root``: run and reported by the CLI the
    first time, reused afterwards."""
    folder = Path(root) / f"plots-{name}"
    store, html = folder / "study.zarr", folder / "report.html"
    if html.exists():
        return store, html
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "data.npz", **_data(name))
    (folder / "wf.yaml").write_text(STUDIES[name])
    done = run_cli("run", folder / "wf.yaml", "--store", store, "--workers", "1")
    assert done.returncode == 0, done.stderr
    made = run_cli("report", store, "--html", html)
    assert made.returncode == 0, made.stderr
    return store, html


def document(html: Path):
    """The bokeh Document embedded in a report file (bokeh's own deserialiser)."""
    from bokeh.document import Document

    text = Path(html).read_text(encoding="utf-8")
    docs = re.findall(r'<script type="application/json" id="[^"]+">\s*(.*?)\s*</script>', text,
                      re.S)
    assert len(docs) == 1, "one embedded bokeh document"
    return Document.from_json(next(iter(json.loads(docs[0]).values())))


def source(doc, name: str) -> dict:
    """The columns of the ColumnDataSource ``name`` (lists; None / NaN as NaN floats)."""
    from bokeh.models import ColumnDataSource

    found = [m for m in doc.select({"type": ColumnDataSource}) if m.name == name]
    assert len(found) == 1, f"{len(found)} data sources named {name!r}"
    return {k: list(v) for k, v in found[0].data.items()}


def floats(values) -> np.ndarray:
    return np.asarray([np.nan if v is None else v for v in values], dtype=float)


def reference_oof(store: Path, param: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Out-of-fold predictions of ``param`` found without cvflow's readers: for each fold split
    (by ``split_kind``), the analysis samples it did not train on. Returns y (n,), pred
    (R, n[, C]) and fold (R, n) over the analysis samples."""
    import xarray as xr

    cube = xr.open_zarr(store)
    analysis = ~cube["is_test"].values
    train = cube["train"].values
    pred = np.asarray(cube["pred"].values[param], dtype=float)
    kind = cube["split_kind"].values
    repeats = int(cube.sizes["repeat"])
    fold = cube["fold"].values
    out = np.full((repeats,) + pred.shape[1:], np.nan)
    for r in range(repeats):
        for j in np.unique(fold[r][analysis]):
            members = analysis & (fold[r] == j)
            fits = [s for s in range(train.shape[0]) if str(kind[s]) == "fold"
                    and not train[s][members].any() and train[s][analysis & ~members].all()]
            assert len(fits) == 1, (r, j, fits)
            out[r, members] = pred[fits[0], members]
    return cube["y"].values[analysis], out[:, analysis], fold[:, analysis]

"""The grid plots of the HTML report: a value axis for a 1-D grid (log, linear or
categorical), a heatmap for a 2-D grid with the choices marked; the numbers each carries are
read back from the report file and checked against scikit-learn on the stored predictions."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import mean_squared_error

from cvflow.report.plots.grid import grid_layout
from plot_studies import document, floats, reference_oof, source, study


@pytest.fixture(scope="module")
def regression(tmp_path_factory):
    store, html = study(tmp_path_factory.getbasetemp(), "regression")
    return store, document(html)


# ---- the layout of a learner's grid -----------------------------------------------------------

@pytest.mark.parametrize("values, kind", [
    ([0.001, 0.1, 10.0], "log"),
    ([0.1, 1.0], "log"),                       # exactly 10x: log
    ([0.1, 0.3, 0.9], "linear"),               # 9x: linear
    ([-1.0, 0.0, 1.0], "linear"),              # not all positive
    ([0, 5, 10], "linear"),
    (["uniform", "distance"], "categorical"),
    ([None, 2, 4], "categorical"),             # None among numbers (max_depth)
    ([True, False], "categorical"),
    ([[10], [10, 10]], "categorical"),          # lists (hidden_layer_sizes)
])
def test_one_varying_hyperparameter_gets_a_value_axis(values, kind):
    layout = grid_layout([{"v": v, "fixed": 1} for v in values])
    assert not layout.heatmap and layout.x.kind == kind and layout.x.key == "v"
    if kind == "categorical":
        assert len(layout.x.factors) == len(values) == len(set(layout.x.factors))
    else:
        assert layout.x.values == [float(v) for v in values]


def test_two_varying_hyperparameters_get_a_heatmap():
    settings = [{"C": c, "gamma": g, "kernel": "rbf"} for c in (0.1, 1.0, 10.0, 100.0)
                for g in (0.01, 0.001)]
    layout = grid_layout(settings)
    assert layout.heatmap
    assert (layout.x.key, layout.y.key) == ("C", "gamma")          # more levels across
    assert layout.x.factors == ("0.1", "1", "10", "100")
    assert layout.y.factors == ("0.001", "0.01")                   # numbers sorted
    assert layout.x.values[1] == "0.1" and layout.y.values[1] == "0.001"


def test_repeated_pairs_or_three_hyperparameters_fall_back_to_grid_order():
    three = [{"a": a, "b": b, "c": c} for a in (1, 2) for b in (1, 2) for c in (1, 2)]
    assert grid_layout(three).x.kind == "index"
    repeated = [{"a": 1, "b": 1}, {"a": 1, "b": 1}, {"a": 2, "b": 2}]
    assert grid_layout(repeated).x.kind == "index"


def test_factors_stay_distinct_when_four_digits_do_not_tell_values_apart():
    layout = grid_layout([{"a": 1.00001}, {"a": "x"}, {"a": 1.00002}])
    assert len(set(layout.x.factors)) == 3


# ---- the report ---------------------------------------------------------------------------

def _kfold(store, param: int) -> float:
    """K-fold squared error of ``param`` from scikit-learn on the out-of-fold predictions:
    per repeat, folds weighted by size (= the pooled mean), then the mean over repeats."""
    y, pred, fold = reference_oof(store, param)
    per_repeat = []
    for r in range(pred.shape[0]):
        per_repeat.append(sum(mean_squared_error(y[fold[r] == j], pred[r][fold[r] == j])
                              * (fold[r] == j).mean() for j in np.unique(fold[r])))
    return float(np.mean(per_repeat))


def _params(store, learner: str) -> list[tuple[int, dict]]:
    import json

    import xarray as xr

    cube = xr.open_zarr(store)
    settings = [json.loads(str(t)) for t in cube["param_json"].values]
    return [(h, s["params"]) for h, s in enumerate(settings) if s["learner"] == learner]


@pytest.mark.parametrize("learner, scale, key", [("ridge", "LogScale", "alpha"),
                                                 ("lasso", "LogScale", "alpha"),
                                                 ("enet", "LinearScale", "l1_ratio")])
def test_one_d_numeric_grid_is_plotted_against_its_value(regression, learner, scale, key):
    store, doc = regression
    fig = doc.select_one({"name": f"kfold-{learner}"})
    assert type(fig.x_scale).__name__ == scale
    assert fig.xaxis[0].axis_label == key
    curve = source(doc, f"kfold-{learner}-kfold")
    params = _params(store, learner)
    by_value = {p[key]: h for h, p in params}
    assert sorted(curve["x"]) == curve["x"] == sorted(by_value)             # in value order
    for x, y in zip(curve["x"], curve["y"]):
        assert y == pytest.approx(_kfold(store, by_value[x]), rel=1e-9)


def test_string_grid_gets_a_categorical_axis(regression):
    store, doc = regression
    fig = doc.select_one({"name": "kfold-knn"})
    assert list(fig.x_range.factors) == ["uniform", "distance"]
    curve = source(doc, "kfold-knn-kfold")
    assert curve["x"] == ["uniform", "distance"]
    by_value = {p["weights"]: h for h, p in _params(store, "knn")}
    assert curve["y"] == pytest.approx([_kfold(store, by_value[w]) for w in curve["x"]], rel=1e-9)


def test_two_d_grid_is_a_heatmap_of_kfold_and_corrected_kfold(regression):
    """The tree's max_depth x min_samples_leaf: one cell per param at its two values, carrying
    K-fold and corrected K-fold (scikit-learn on the stored predictions)."""
    import xarray as xr

    store, doc = regression
    params = _params(store, "tree")
    cube = xr.open_zarr(store)
    analysis = ~cube["is_test"].values
    y = cube["y"].values[analysis]
    full = int(cube.attrs["full_split"])
    kinds = [str(k) for k in cube["split_kind"].values]
    expected_kfold, expected_corrected = {}, {}
    for h, p in params:
        cell = (str(p["max_depth"]), str(p["min_samples_leaf"]))
        kfold = _kfold(store, h)
        pred = cube["pred"].values[h][:, analysis]
        _, _, fold = reference_oof(store, h)
        # corrected: + risk of the full fit on D - size-weighted risk of each fold fit on D
        fold_fits = [s for s, k in enumerate(kinds) if k == "fold"]
        weights = [(fold[int(cube["split_repeat"].values[s])] == int(cube["split_outer"].values[s])
                    ).mean() for s in fold_fits]
        repeats = cube.sizes["repeat"]
        fold_term = sum(w * mean_squared_error(y, pred[s]) for w, s in zip(weights, fold_fits))
        expected_kfold[cell] = kfold
        expected_corrected[cell] = kfold + mean_squared_error(y, pred[full]) - fold_term / repeats
    for name, expected in (("kfold-tree", expected_kfold),
                           ("corrected-kfold-tree", expected_corrected)):
        fig = doc.select_one({"name": name})
        assert list(fig.x_range.factors) == ["1", "2", "4", "8"]            # max_depth across
        assert list(fig.y_range.factors) == ["1", "5", "20"]
        cells = source(doc, f"{name}-cells")
        got = {(x, y_): v for x, y_, v in zip(cells["x"], cells["y"], floats(cells["value"]))}
        assert got.keys() == expected.keys()
        for cell, value in expected.items():
            assert got[cell] == pytest.approx(value, rel=1e-9), (name, cell)


def test_heatmap_marks_the_chosen_cell(tmp_path_factory):
    """The binary study's only learner has a 2-D grid (C x class_weight, None a level): the
    K-fold and corrected K-fold choices are outlined on the cells of the params the text
    report names."""
    import cvflow
    from cvflow.estimators import corrected_kfold, kfold

    store, html = study(tmp_path_factory.getbasetemp(), "binary")
    doc = document(html)
    cube = cvflow.open(store)
    chosen = {"K-fold choice": int(kfold(cube)["selected"]),
              "corrected choice": int(corrected_kfold(cube)["selected"])}
    params = dict(_params(store, "logreg"))
    fig = doc.select_one({"name": "kfold-logreg"})
    assert list(fig.x_range.factors) == ["0.01", "0.1", "1", "10"]
    assert list(fig.y_range.factors) == ["null", "balanced"]
    marks = {}
    for k in range(2):
        m = source(doc, f"kfold-logreg-choice-{k}")
        marks[m["choice"][0]] = (m["x"][0], m["y"][0])
    for label, h in chosen.items():
        p = params[h]
        c = f"{p['C']:.4g}"
        assert marks[label] == (c, "null" if p["class_weight"] is None else p["class_weight"])
    cells = source(doc, "kfold-logreg-cells")
    values = floats(cells["value"])
    best = int(np.nanargmin(values))
    assert (cells["x"][best], cells["y"][best]) == marks["K-fold choice"]

"""Malformed workflows (hypothesis): random corruptions of a valid workflow (wrong types,
missing keys, absurd numbers, unknown keys, bad dotted paths, broken YAML) through
``cvflow validate`` and ``cvflow run``: exit 2, exactly one line on stderr, no traceback, no
new store, and an existing store beside them byte-identical."""
from __future__ import annotations

import copy
import math
import os
import string
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from cvflow.cli import main

from cvtest import tree_digest

BASE = {
    "name": "base",
    "data": {"source": "sklearn", "name": "diabetes", "test_fraction": 0.2, "seed": 0},
    "task": "regression",
    "loss": "squared",
    "learners": [
        {"name": "ridge", "class": "sklearn.linear_model.Ridge",
         "grid": {"alpha": {"logspace": [-2, 2, 3]}}},
        {"name": "lasso", "class": "sklearn.linear_model.Lasso", "params": {"max_iter": 2000},
         "grid": {"alpha": [0.1, 1.0]}},
    ],
    "design": {"folds": 3, "repeats": 1, "seed": 0},
    "estimators": ["kfold", {"corrected_t": {"compare": ["ridge(alpha=1.0)", "lasso(alpha=0.1)"]}},
                   {"stability": {"lambdas": [0, 1]}}],
    "execution": {"cluster": "threads", "workers": 1},
}
ANALYSIS_SAMPLES = 353          # diabetes (442) less its held-out 20%

# --- corruptions: each one alone makes the workflow invalid ----------------------------------

junk = st.text(string.ascii_lowercase + "_", min_size=1, max_size=8).map(lambda s: f"zz{s}")
scalars = st.one_of(st.integers(-5, 5), st.floats(allow_nan=True), junk, st.booleans(), st.none())
not_mapping = st.one_of(st.integers(), junk, st.lists(st.integers(), max_size=3), st.booleans(),
                        st.floats(allow_nan=True))
not_list = st.one_of(st.integers(), junk, st.booleans(),
                     st.dictionaries(junk, st.integers(), min_size=1, max_size=2))
not_whole = st.one_of(junk, st.floats(allow_nan=True).filter(lambda x: not float(x).is_integer()),
                      st.lists(st.integers(), max_size=2), st.booleans())
huge = st.integers(10**7, 10**30)
bad_count = st.one_of(st.integers(max_value=-1), st.floats(0.1, 1e3).filter(
    lambda x: not x.is_integer()), st.just(math.inf), st.just(math.nan), huge, junk)
bad_fraction = st.one_of(st.floats(min_value=1.0), st.floats(max_value=-1e-9), st.just(math.nan),
                         junk, st.lists(st.floats(0.1, 0.5), min_size=1, max_size=2))
bad_seed = st.one_of(st.integers(max_value=-1), st.integers(min_value=2**32), junk,
                     st.floats(0.1, 10).filter(lambda x: not x.is_integer()))
bad_class = st.one_of(junk.map(lambda s: f"{s}.Thing"), st.sampled_from([
    "numpy.linalg.norm", "sklearn.linear_model", "sklearn.linear_model.NoSuch", "os.path.join",
    "sklearn", "sklearn.preprocessing.StandardScaler", "", "sklearn..Ridge"]), st.integers())

SET = {   # path -> invalid values
    ("name",): st.one_of(st.integers(), st.lists(junk, max_size=2), st.just(""), st.just("  ")),
    ("data",): not_mapping,
    ("data", "source"): st.one_of(junk, st.integers(), st.none()),
    ("data", "name"): st.one_of(junk, st.integers(), st.lists(junk, min_size=1, max_size=2)),
    ("data", "test_fraction"): bad_fraction,
    ("data", "seed"): bad_seed,
    ("task",): st.one_of(junk, st.integers(), st.none(), st.just("classification")),
    ("loss",): st.one_of(junk, st.integers(), junk.map(lambda s: f"{s}.loss"),
                         st.sampled_from(["hinge", "log_loss", "zero_one", "pinball:2",
                                          "pinball:x"])),
    ("learners",): st.one_of(not_list, st.just([])),
    ("learners", 0): not_mapping,
    ("learners", 0, "class"): bad_class,
    ("learners", 0, "grid"): st.one_of(st.integers().filter(bool), junk,
                                       st.lists(st.integers(), min_size=1)),
    ("learners", 0, "grid", "alpha"): st.one_of(
        st.builds(lambda c: {"logspace": [-2, 2, c]}, bad_count),
        st.builds(lambda c: {"linspace": [0, 1, c]}, bad_count),
        st.builds(lambda a: {"range": [0, 1, 0]}, st.none()),
        st.builds(lambda a: {"range": [0, a, 1]}, st.just(math.inf) | huge),
        st.builds(lambda k: {k: [0, 1, 2]}, junk),
        st.just([]), st.lists(junk, min_size=1, max_size=2)),
    ("learners", 1, "grid"): st.one_of(
        st.builds(lambda k: [{"alpha": [1.0]}, {k: [1]}], junk),
        st.just([{"alpha": [1.0]}, 3]), st.just({"alpha": [-1.0, -2.0]}),
        st.just({"alpha": {"logspace": [0, 400, 3]}})),
    ("learners", 0, "preprocess"): st.one_of(
        junk, st.builds(lambda k: [f"{k}.Scaler"], junk),
        st.just(["sklearn.linear_model.Ridge"]), st.just([{"a": 1, "b": 2}]),
        st.just([{"sklearn.preprocessing.StandardScaler": 3}])),
    ("learners", 0, "output"): st.one_of(junk, st.sampled_from(["predict_proba",
                                                                "decision_function"])),
    ("learners", 1, "params"): st.one_of(not_mapping.filter(bool), st.builds(
        lambda k: {k: 1}, junk), st.just({"max_iter": "zzmany"})),
    ("learners", 1, "name"): st.just("ridge"),                      # a duplicate name
    ("design",): not_mapping.filter(bool),
    ("design", "folds"): st.one_of(st.integers(max_value=1), st.integers(ANALYSIS_SAMPLES + 1),
                                   not_whole, st.none()),
    ("design", "repeats"): st.one_of(st.integers(max_value=0), st.integers(10**6, 10**30),
                                     not_whole),
    ("design", "seed"): bad_seed,
    ("design", "subset"): st.one_of(
        not_mapping.filter(bool), st.builds(lambda v: {"size": v, "pairs": 2}, st.one_of(
            st.integers(max_value=0), not_whole)),
        st.builds(lambda v: {"size": 10, "pairs": v}, st.one_of(st.integers(max_value=0),
                                                                 not_whole)),
        st.builds(lambda v: {"size": 10, "pairs": 2, "complete": v}, junk),
        st.builds(lambda v: {"size": 10, "pairs": 2, "seed": v}, bad_seed),
        st.just({"pairs": 2})),
    ("design", "shuffle"): st.one_of(junk, st.integers(2, 5), st.none()),
    ("design", "full_fit"): st.one_of(junk, st.integers(2, 5), st.none()),
    ("design", "splitter"): st.one_of(junk, st.integers(), st.builds(
        lambda c: {"class": c}, bad_class), st.just("stratified"),
        st.just({"class": "sklearn.model_selection.KFold", "n_splits": 1})),
    ("estimators",): st.one_of(not_list.filter(bool),
                               st.lists(junk, min_size=1, max_size=2)),
    ("estimators", 1): st.one_of(
        st.builds(lambda k: {"corrected_t": {"compare": [k, "lasso(alpha=0.1)"]}},
                  junk.map(lambda s: f"ridge(alpha={len(s) + 0.5})")),
        st.builds(lambda k: {"corrected_t": {"compare": [k]}}, junk),
        st.just({"corrected_t": {"compare": [0, 99]}}), st.just("corrected_t"),
        st.just({"corrected_t": {"alpha": 2}}), st.just({"bates_ncv": {"param": 50}}),
        st.builds(lambda k: {"cv_confidence": {"simplest": {k: "max"}}}, junk),
        st.just({"cv_confidence": {"repeat": 4}}), st.just({"stability": {"lambdas": [-1]}}),
        junk.map(lambda s: f"{s}.reducer"), st.just("numpy.sum"),
        st.just({"kfold": 1, "nested_cv": 2}),
        st.builds(lambda name, option, value: {name: {option: value}},
                  st.sampled_from(["stability", "stability_nested", "bates_ncv", "wald_cv",
                                   "bbc_cv", "cv_confidence"]),
                  st.sampled_from(["lambdas", "alpha", "B", "seed", "param", "repeat"]),
                  st.one_of(junk, st.integers(max_value=-1), st.just(math.inf),
                            st.just(math.nan), st.lists(junk, min_size=1, max_size=2)))),
    ("execution",): not_mapping.filter(bool),
    ("execution", "workers"): st.one_of(st.integers(max_value=0), not_whole),
    ("execution", "cluster"): st.one_of(junk, st.integers(), st.just("")),
    ("execution", "fits_per_task"): st.one_of(st.integers(max_value=0), junk, st.floats(0.1, 0.9)),
    ("execution", "dtype"): st.one_of(junk, st.just("float16")),
    ("execution", "path_aware"): st.one_of(junk, st.integers(2, 5)),
    ("execution", "fit_seed"): bad_seed,
}
SECTIONS = {(): "name description data task loss learners design estimators execution",
            ("data",): "source name path target features groups test_fraction seed params "
                       "dropna frame",
            ("design",): "folds repeats splitter seed shuffle subset gap max_train_size full_fit",
            ("learners", 0): "name class estimator params grid output preprocess",
            ("execution",): "cluster workers fits_per_task path_aware dtype fit_seed",
            ("estimators", 2, "stability"): "lambdas"}
# data files beside the workflow that no source can read as data
FILES = {
    "csv": [b"", b"\x00\x01binary\xff\xfe", b'"a,b\n1,2\n', b"a,y\n", b"a,b\n1,2\n3,4\n",
            b"a,y\n1,2\n3,4\n", b"a,y\nx,1\ny,2\nz,3\nw,4\n", b"a;y\n1;2\n"],
    "npz": [b"", b"garbage", b"PK\x03\x04garbage", b"\x93NUMPY"],
}
data_file = st.sampled_from(sorted(FILES)).flatmap(
    lambda kind: st.tuples(st.just("file"), st.just(kind), st.sampled_from(FILES[kind])))
REQUIRED = [("data",), ("learners",), ("data", "name"), ("learners", 0, "class"),
            ("data", "source")]

corruption = st.one_of(
    st.sampled_from(sorted(SET, key=str)).flatmap(
        lambda path: st.tuples(st.just("set"), st.just(path), SET[path])),
    st.sampled_from(sorted(SECTIONS, key=str)).flatmap(
        lambda path: st.tuples(st.just("add"), st.just(path), junk.filter(
            lambda k: k not in SECTIONS[path].split()))),
    st.tuples(st.just("del"), st.sampled_from(REQUIRED), st.none()),
    data_file,
)
YAML_DAMAGE = st.sampled_from([
    "learners: [unclosed\n",                              # does not parse
    "data:\n\t source: sklearn\n",                        # a tab
    "description: &r [*r]\n",                             # a recursive alias
    "description: {a0: &a0 [x, x, x, x, x, x, x, x, x, x], a1: &a1 [*a0, *a0, *a0, *a0, *a0, "
    "*a0, *a0, *a0, *a0, *a0], a2: &a2 [*a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1], "
    "a3: &a3 [*a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2], a4: &a4 [*a3, *a3, *a3, *a3, "
    "*a3, *a3, *a3, *a3, *a3, *a3], a5: [*a4, *a4, *a4, *a4, *a4, *a4, *a4, *a4, *a4, *a4]}\n",
    "- a list at the top\n",
    "\x00",
])


def corrupt(base: dict, corruptions) -> dict:
    """``base`` with the corruptions applied in order (one whose parent a previous corruption
    replaced by a scalar or removed is skipped; at least the first always applies)."""
    out = copy.deepcopy(base)
    for op, path, value in corruptions:
        if op == "file":                      # written beside the workflow by the test
            out["data"] = {"source": path, "path": f"d.{path}", "target": "y"}
            continue
        parent = out
        try:
            for key in path[:-1] if op != "add" else path:
                parent = parent[key]
        except (KeyError, IndexError, TypeError):
            continue
        if op == "add":
            if isinstance(parent, dict):
                parent[value] = 1
        elif op == "del":
            if isinstance(parent, dict):
                parent.pop(path[-1], None)
        elif isinstance(parent, (dict, list)):
            try:
                parent[path[-1]] = copy.deepcopy(value)
            except (IndexError, TypeError):
                continue
    return out


def _text(config: dict, damage: str | None) -> str:
    text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
    return text if damage is None else text + damage


@pytest.fixture(scope="module")
def existing(tmp_path_factory) -> tuple[Path, str]:
    """A finished store of BASE and its digest."""
    root = tmp_path_factory.mktemp("existing")
    wf = root / "base.yaml"
    wf.write_text(_text(BASE, None))
    assert main(["run", str(wf), "--store", str(root / "s.zarr")]) == 0
    return root / "s.zarr", tree_digest(root / "s.zarr")


def _refused(capsys, argv: list[str]) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (argv, out, err)
    assert err.startswith("cvflow: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "fits to do" not in out + err
    # a warning Python shows by default would be a second line on the real program's stderr
    shown = [w for w in caught if not issubclass(w.category, (
        ResourceWarning, PendingDeprecationWarning, ImportWarning, DeprecationWarning))
        or issubclass(w.category, DeprecationWarning) and "cvflow" in str(w.filename)]
    assert not shown, [f"{w.category.__name__}: {w.message}" for w in shown]
    # statistics (--hypothesis-show-statistics): which key refused the workflow
    event(err.removeprefix("cvflow: error: ").split(": ")[1 if ".yaml: " in err else 0][:40])


def test_the_base_workflow_is_valid(existing, capsys):
    """The property below is about corruptions: the workflow they start from runs."""
    assert existing[0].is_dir()


@settings(max_examples=int(os.environ.get("CVFLOW_MALFORMED_EXAMPLES", "100")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(corruptions=st.lists(corruption, min_size=1, max_size=3),
       damage=st.integers(0, 4).flatmap(lambda i: YAML_DAMAGE if i == 0 else st.none()))
@example(corruptions=[("set", ("learners",), 0)], damage=None)   # found by CI: was exit 1
def test_malformed_workflows_exit_2_and_touch_no_store(existing, tmp_path_factory, capsys,
                                                      corruptions, damage):
    store, digest = existing
    config = corrupt(BASE, corruptions)
    if damage is None and config == BASE:
        return                                    # every corruption was skipped
    work = tmp_path_factory.mktemp(f"bad-{uuid.uuid4().hex[:8]}")
    wf = work / "wf.yaml"
    wf.write_text(_text(config, damage))
    for op, kind, content in corruptions:
        if op == "file":
            (work / f"d.{kind}").write_bytes(content)
    files = sorted(p.name for p in work.iterdir())
    _refused(capsys, ["validate", str(wf)])
    _refused(capsys, ["run", str(wf), "--store", str(work / "new.zarr")])
    assert sorted(p.name for p in work.iterdir()) == files           # no store, no lock
    _refused(capsys, ["run", str(wf), "--store", str(store)])
    assert tree_digest(store) == digest and not Path(f"{store}.lock").exists()


FIXED = [   # a few corruptions through the real program, each in a fresh interpreter
    [("set", ("design", "repeats"), 10**12)],
    [("set", ("learners", 0, "grid", "alpha"), {"linspace": [0, 1, math.nan]}),
     ("add", ("execution",), "zzspeed")],
    [("set", ("estimators", 1), {"corrected_t": {"compare": ["ridge(alpha=7.5)"]}})],
]


@pytest.mark.parametrize("corruptions", FIXED, ids=["repeats", "nan-count", "compare"])
def test_malformed_workflows_in_fresh_processes(existing, tmp_path, corruptions):
    store, digest = existing
    wf = tmp_path / "wf.yaml"
    wf.write_text(_text(corrupt(BASE, corruptions), None))
    for argv in (["validate", wf], ["run", wf, "--store", tmp_path / "new.zarr"],
                 ["run", wf, "--store", store]):
        proc = subprocess.run([sys.executable, "-m", "cvflow", *map(str, argv)],
                              capture_output=True, text=True, timeout=240)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(f"cvflow: error: {wf}: ") and proc.stderr.count("\n") == 1
        assert proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wf.yaml"]
    assert tree_digest(store) == digest

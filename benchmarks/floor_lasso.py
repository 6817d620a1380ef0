"""The floor of the lasso study: the cube cvflow computes, by numpy, scikit-learn and zarr alone.

For each training set — all of D (the full fit), then D minus each fold — centre X and y on its
rows, form the Gram matrix and X'y, run ``sklearn.linear_model.enet_path`` (``l1_ratio=1``,
the alphas strongest first with warm starts, coordinate descent on the Gram matrix, as
``LassoCV`` runs it) and predict every sample for every alpha. The cube
``pred[alpha, split, sample]`` (split 0 the full fit, split 1 + j the fit without fold j) is
written to a Zarr array (one chunk per training set, zarr's default codecs), read back, and the
K-fold and bias-corrected K-fold estimates (DESIGN 6.1, 6.2, squared loss) are computed with
numpy: the least work that gives what cvflow's lasso study gives, on as many threads as cvflow
has workers (two; one BLAS thread each, as ``common.py`` pins it).

As a whole process (imports included), as ``bench_floor.py`` times it::

    python benchmarks/floor_lasso.py DATA.npz FOLDS.npy ALPHAS.npy STORE.zarr

(``DATA.npz`` holds ``X`` and ``y``; ``FOLDS.npy`` the fold label of each sample; prints the
alpha each estimate selects).
"""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import zarr
from sklearn.linear_model import enet_path


def path_predictions(X: np.ndarray, y: np.ndarray, train: np.ndarray,
                     alphas: np.ndarray) -> np.ndarray:
    """Lasso predictions of every row of ``X`` for every alpha (given strongest first), fitted
    on the rows ``train`` with an intercept; shape (alphas, n)."""
    Xt, yt = X[train], y[train]
    x_mean, y_mean = Xt.mean(axis=0), yt.mean()
    Xc = np.asfortranarray(Xt - x_mean)
    yc = yt - y_mean
    gram, xy = Xc.T @ Xc, Xc.T @ yc
    # check_input=False: the arrays are float64 and laid out as enet_path wants; with the
    # default it re-validates the Gram matrix before every alpha (LassoCV pays that).
    _, coefs, _ = enet_path(Xc, yc, l1_ratio=1.0, alphas=alphas, precompute=gram, Xy=xy,
                            check_input=False)
    return ((X - x_mean) @ coefs).T + y_mean


def cube(X: np.ndarray, y: np.ndarray, fold: np.ndarray, alphas: np.ndarray, *,
         workers: int = 2) -> np.ndarray:
    """``pred[alpha, split, sample]``: split 0 trains on every sample, split 1 + j on all but
    fold j; the training sets on ``workers`` threads (BLAS and enet_path's coordinate descent
    release the GIL), as many as cvflow's workers."""
    folds = np.unique(fold)
    trains = [np.ones(len(y), bool)] + [fold != j for j in folds]
    with ThreadPoolExecutor(workers) as pool:
        paths = list(pool.map(lambda train: path_predictions(X, y, train, alphas), trains))
    return np.stack(paths, axis=1)


def write_and_read(pred: np.ndarray, store: str) -> np.ndarray:
    """Write the cube to a new Zarr array at ``store`` (a chunk per training set), read it back."""
    array = zarr.create_array(store=store, shape=pred.shape, chunks=(pred.shape[0], 1, pred.shape[2]),
                              dtype="float64")
    array[...] = pred
    return zarr.open_array(store, mode="r")[...]


def estimates(pred: np.ndarray, y: np.ndarray, fold: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(K-fold, bias-corrected K-fold) per alpha, squared loss (DESIGN 6.1, 6.2).

    ``kfold = sum_j p_j mean_{i in N_j} l_i(fold j)``, the mean over samples of each one's
    out-of-fold loss; ``corrected = kfold + mean_i l_i(full) - sum_j p_j mean_i l_i(fold j)``.
    """
    folds, index = np.unique(fold, return_inverse=True)
    loss = (pred - y) ** 2                                   # (alphas, 1 + K, n)
    n = len(y)
    kfold = loss[:, 1 + index, np.arange(n)].mean(axis=1)
    p = np.bincount(index, minlength=len(folds)) / n
    corrected = kfold + loss[:, 0].mean(axis=1) - loss[:, 1:].mean(axis=2) @ p
    return kfold, corrected


def study(X, y, fold, alphas, store: str) -> tuple[np.ndarray, np.ndarray]:
    """The whole floor: fit every path, write the cube, read it back, both estimates."""
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    alphas = np.asarray(alphas, dtype=np.float64)
    order = np.argsort(-alphas, kind="stable")           # enet_path warm-starts downwards
    pred = np.empty((len(alphas), len(np.unique(fold)) + 1, len(y)))
    pred[order] = cube(X, y, fold, alphas[order])
    return estimates(write_and_read(pred, store), y, fold)


def main(argv: list[str]) -> None:
    data, folds, alphas, store = argv
    with np.load(data) as npz:
        X, y = npz["X"], npz["y"]
    alphas = np.load(alphas)
    kfold, corrected = study(X, y, np.load(folds), alphas, store)
    print(f"K-fold selects alpha {alphas[np.argmin(kfold)]:.6g} ({kfold.min():.6g}); "
          f"corrected K-fold selects alpha {alphas[np.argmin(corrected)]:.6g} "
          f"({corrected.min():.6g})")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Kernel SVMs that standardise their features inside ``fit`` (for workflows' dotted paths).

A workflow names a learner by one dotted class path plus parameters, so a scikit-learn
``Pipeline`` cannot be written there. Kernels such as the sigmoid ``tanh(gamma <x, x'>)`` are
meaningless on raw features of very different scales (on Concrete the kernel saturates and
every C gives the constant predictor), so these subclasses fit a ``StandardScaler`` on the
training rows of each fit and apply it before the kernel. The scaler is learnt on the
training set only, so cross-validation never sees statistics of the held-out samples.

They keep the parent's ``__init__`` signature, so ``get_params``/``clone`` work unchanged.
"""
from __future__ import annotations

from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC, SVR


class ScaledSVR(SVR):
    """:class:`sklearn.svm.SVR` on standardised features (scaler fitted in :meth:`fit`)."""

    def fit(self, X, y, sample_weight=None):
        self.scaler_ = StandardScaler().fit(X)
        return super().fit(self.scaler_.transform(X), y, sample_weight=sample_weight)

    def predict(self, X):
        return super().predict(self.scaler_.transform(X))


class ScaledSVC(SVC):
    """:class:`sklearn.svm.SVC` on standardised features (binary: predict uses decision > 0)."""

    def fit(self, X, y, sample_weight=None):
        self.scaler_ = StandardScaler().fit(X)
        return super().fit(self.scaler_.transform(X), y, sample_weight=sample_weight)

    def decision_function(self, X):
        return super().decision_function(self.scaler_.transform(X))

    def predict(self, X):
        return super().predict(self.scaler_.transform(X))

    def predict_proba(self, X):
        return super().predict_proba(self.scaler_.transform(X))

"""Param.build reads each estimator class's constructor signature once (objects.init_signature):
what it builds must equal what scikit-learn's own constructor and set_params give, whatever the
class (a class redefined under the same name, an unhashable class, one taking **kwargs)."""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import Ridge
from sklearn.tree import DecisionTreeRegressor

from cvflow.objects import init_signature
from cvflow.workflow.params import Param, init_names


def _param(cls, **hyper) -> Param:
    return Param("m", f"{cls.__module__}.{cls.__qualname__}", hyper=hyper)


def test_build_equals_the_constructor_for_scikit_learn_classes():
    for cls, hyper in ((DecisionTreeRegressor, {"max_depth": 3, "min_samples_leaf": 2}),
                       (Ridge, {"alpha": 0.5})):
        for _ in range(3):                       # the second and third from the cached signature
            built = _param(cls, **hyper).build()
            assert type(built) is cls
            assert built.get_params() == cls(**hyper).get_params()


def _class(arg: str):
    namespace: dict = {}
    exec(f"class Local:\n    def __init__(self, {arg}=1):\n        self.{arg} = {arg}\n", namespace)
    return namespace["Local"]


def test_a_class_redefined_under_its_name_gets_its_own_signature():
    first, second = _class("alpha"), _class("beta")
    assert first.__qualname__ == second.__qualname__
    assert init_names(first) == {"alpha"} and init_names(second) == {"beta"}
    assert init_signature(second) == __import__("inspect").signature(second.__init__)


class _Unhashable(type):
    __hash__ = None          # type: ignore[assignment]


class Odd(BaseEstimator, RegressorMixin, metaclass=_Unhashable):
    def __init__(self, scale=1.0):
        self.scale = scale

    def fit(self, X, y):
        self.mean_ = float(np.mean(y)) * self.scale
        return self

    def predict(self, X):
        return np.full(len(X), self.mean_)


class Loose(BaseEstimator):
    def __init__(self, **kwargs):
        self.kwargs = kwargs


def test_unhashable_and_kwargs_classes_are_read_every_time():
    try:
        hash(Odd)
    except TypeError:
        pass
    else:                                      # pragma: no cover - the metaclass makes it so
        raise AssertionError("Odd should be unhashable")
    for _ in range(2):
        assert init_names(Odd) == {"scale"}
        assert list(init_signature(Odd).parameters) == ["self", "scale"]
    assert init_names(Loose) is None         # **kwargs: every key without "__" goes to it

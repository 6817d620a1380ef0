"""The Python face of a workflow: ``cvflow.Study`` over scikit-learn objects and arrays.

A Study is a workflow written with Python objects; :meth:`Study.config` turns it into the
same plain-data workflow a YAML file holds (:mod:`cvflow.objects` spells the estimators),
so both faces go through :func:`cvflow.workflow.spec.parse_workflow`, :func:`cvflow.execution.run.run` and
one store format::

    study = cvflow.Study(
        {"svr": (make_pipeline(StandardScaler(), SVR()), {"svr__C": np.logspace(-1, 2, 20)}),
         "tree": (DecisionTreeRegressor(random_state=0), {"max_depth": range(1, 9)})},
        cv=KFold(5, shuffle=True, random_state=0),
        estimators=["kfold", "corrected_kfold"], loss="squared")
    result = study.run(X, y, store="study.zarr")
    result.selected["kfold"]          # {"index": 7, "learner": "svr", "params": {...}}
    model = result.refit("kfold")     # fitted on all the analysis samples
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from dataclasses import replace

import numpy as np

from .workflow.data import (decode_frame, encode_frame, from_arrays, one_value_a_row,
                            one_value_rows, save_npz)
from .objects import CLASS, build, describe, describe_splitter, is_estimator, unbuildable
from .errors import InputError, RunInterrupted
from .execution import interrupts
from .estimators.losses import declared_task
from .workflow.learners import grid_values
from .workflow.scorer_specs import build_scorer, describe_scorer
from .workflow.spec import Workflow, parse_workflow
from .trust import Trust, how, listed, param_code, untrusted, workflow_code
from .report.study_cube import StudyCube
from .estimators.labels import param_label
from .fitting.learners import fit_model
from .fitting.trial import check_learners
from .workflow.params import Param

WHERE = Path("Study")


class Study:
    """A cross-validation study of scikit-learn estimators (docs/guide/python.md).

    Parameters
    ----------
    learners : estimator, or dict name -> estimator or (estimator, grid)
        scikit-learn estimators (Pipelines, ColumnTransformers, TransformedTargetRegressors
        included), unfitted. A grid is a dict or a list of dicts as ``ParameterGrid`` reads
        them (nested names like ``ridge__alpha``; values may be estimators).
    param_grid : dict or list of dicts, optional
        The grid of a single ``learners`` estimator.
    cv : int, scikit-learn splitter or design mapping, default 5
        An int is ``design: {folds: cv}`` of a workflow file (shuffled with seed 0; stratified
        for classification). A partition splitter (KFold, StratifiedKFold, GroupKFold,
        StratifiedGroupKFold, RepeatedKFold, RepeatedStratifiedKFold, ...) gives the folds
        it draws; a shuffling one needs an integer ``random_state``.
    estimators : list, default ["kfold"]
        Estimator names or ``{name: {options}}``, as in a workflow file.
    loss : str, optional
        The default loss (squared for regression, zero_one for classification).
    task : "regression" or "classification", optional
        Default: from the loss, else classification when ``y`` has two labels that are not
        numbers or ``type_of_target(y)`` is binary, else regression.
    fit_seed : int, optional
        Give every unset ``random_state`` a seed derived from this one and the (param,
        training set) of each fit, so reruns are bit-identical (``execution.fit_seed``).
    output : str, optional
        Stored prediction of every learner (predict, decision_function, predict_proba).
        Default: predict for regression; for classification predict_proba with the
        log loss, else decision_function where the learner has one.
    fit_timeout : float, optional
        Seconds a fit may take (``execution.fit_timeout``); a fit past it is stopped (on worker
        processes) and recorded failed ("timed out after N s").
    name : str, default "study"
    execution : dict, optional
        The workflow's ``execution`` section (fits_per_task, path_aware, dtype, ...).
    racing : dict or bool, optional
        Fit in stages and stop fitting the params a sequential test has beaten, e.g.
        ``{"alpha": 0.05}`` (the workflow's ``racing`` key, see :mod:`cvflow.execution.race_runner`);
        ``False`` on a raced store fits what racing skipped.
    learner_options : dict name -> dict, optional
        Per-learner workflow keys beside class, params and grid, spelled as a workflow file
        spells them: ``preprocess`` (transformers fitted on each training set before the
        learner, e.g. ``["sklearn.preprocessing.StandardScaler"]``) and ``output`` (this
        learner's stored prediction, over ``output``). :meth:`from_store` fills it from the
        store's workflow, so the rebuilt study fits the same models as the run did.
    scorers : dict name -> scorer, optional
        Scores that need the fitted model, computed where each fit runs and stored per
        (param, split) beside the predictions (``score``, ``score_time``; docs/guide/cube.md):
        scikit-learn scoring names (``"f1"``, any ``sklearn.metrics.get_scorer`` name), scorer
        objects (``make_scorer(f1_score)``) and callables ``(estimator, X, y) -> float`` (a
        lambda, a function of ``__main__``: they travel to the workers by value). Each fit is
        scored on the analysis samples its split does not train on (NaN for the full fit).
        The store records each scorer's description; one that no name imports (a lambda)
        makes a study that cannot be rebuilt from its store. A callable returning a dict of
        scores stores one score per key (learned on the trial fit before the run).
    train_scores : bool, default False
        The scorers also score each fit on its training rows (``train_score``).
    """
    # DESIGN CHOICE: the learner keys of a workflow file that have no spelling in an estimator
    # object; kept as plain data so a Study round-trips every key cvflow.workflow.learners.LEARNER_KEYS allows
    LEARNER_OPTIONS = ("preprocess", "output")

    def __init__(self, learners, *, param_grid=None, cv=5, estimators=("kfold",), loss=None,
                 task=None, fit_seed=None, output=None, name="study", execution=None,
                 fit_timeout=None, racing=None, learner_options=None, scorers=None,
                 train_scores=False):
        self.learners_arg = learners
        self.param_grid = param_grid
        self.cv = cv
        self.estimators = estimators
        self.loss = loss
        self.task = task
        self.fit_seed = fit_seed
        self.output = output
        self.name = name
        self.execution = execution
        self.fit_timeout = fit_timeout
        self.racing = racing
        self.learner_options = learner_options
        self.scorers = scorers
        self.train_scores = train_scores

    # -- the learners as (estimator, grid) ----------------------------------------------------

    @property
    def learners(self) -> dict[str, tuple[Any, Any]]:
        """Each learner's name -> (estimator, grid)."""
        raw = self.learners_arg
        if is_estimator(raw):
            return {type(raw).__name__: (raw, self.param_grid or {})}
        if self.param_grid is not None:
            raise InputError("Study: param_grid goes with a single estimator; give a dict "
                             "name -> (estimator, grid) for several")
        if not isinstance(raw, dict) or not raw:
            raise InputError("Study: learners: give an estimator or a dict name -> estimator "
                             "or (estimator, grid)")
        out = {}
        for name, value in raw.items():
            est, grid = value if isinstance(value, tuple) and len(value) == 2 else (value, {})
            if not is_estimator(est):
                raise InputError(f"Study: learners[{name!r}]: {est!r} is not a scikit-learn "
                                 "estimator object")
            out[str(name)] = (est, grid)
        return out

    # -- the workflow --------------------------------------------------------------------------

    def config(self, task: str) -> dict:
        """The plain-data workflow (what :meth:`to_yaml` writes), data aside."""
        return self._config(task)[0]

    def _config(self, task: str) -> tuple[dict, dict]:
        """(the plain-data workflow, learner name -> (estimator, grids of objects)).

        DESIGN CHOICE: the study fits its own objects (``Param.source``), as GridSearchCV
        does; the workflow describes them (:func:`cvflow.objects.describe` with ``keep``), so
        an object no name imports (a ``__main__`` class, a lambda, an array) is fitted like
        any other and recorded as far as it can be; :meth:`from_store` and :meth:`to_yaml`
        refuse such a study (:func:`cvflow.objects.unbuildable`), reports read it.
        """
        learners, objects = [], {}
        options = self._learner_options()
        for name, (est, grid) in self.learners.items():
            where = f"learners[{name!r}]"
            desc = describe(est, where, keep=True)
            if not unbuildable(desc) and describe(build(desc), where) != desc:
                raise InputError(f"Study: {where}: {type(est).__name__} does not "
                                 "rebuild from its get_params (state kept outside its params); "
                                 "cvflow stores learners as their params")
            grids = _grid_lists(grid, f"{where}.grid")
            described = []
            for i, g in enumerate(grids):
                at = f"{where}.grid" + (f"[{i}]" if isinstance(grid, list) else "")
                described.append({key: [describe(v, f"{at}.{key}[{j}]", keep=True)
                                        for j, v in enumerate(values)]
                                  for key, values in g.items()})
            entry = {"name": name, "class": desc.pop(CLASS), "params": desc,
                     "grid": described if isinstance(grid, list) else described[0]}
            objects[name] = (est, grids)
            # the loss decides an output left unset, as in a workflow file (infer_output)
            if self.output and task == "classification":
                entry["output"] = self.output
            entry.update(options.get(name, {}))
            learners.append(entry)
        config = {"name": self.name, "data": {"source": "arrays"}, "task": task,
                  "learners": learners, "design": self._design(),
                  "estimators": [e if isinstance(e, str) else dict(e) for e in self.estimators]}
        if self.loss is not None:
            config["loss"] = self.loss
        execution = dict(self.execution or {})
        if self.fit_seed is not None:
            execution["fit_seed"] = self.fit_seed
        if self.fit_timeout is not None:
            execution["fit_timeout"] = self.fit_timeout
        if execution:
            config["execution"] = execution
        if self.racing is not None:
            config["racing"] = self.racing
        scorers = self._scorers()
        if scorers:
            config["scorers"] = {name: describe_scorer(obj, f"Study: scorers[{name!r}]")
                                 for name, obj in scorers.items()}
        if self.train_scores:
            config["train_scores"] = self.train_scores
        return config, objects

    def _scorers(self) -> dict:
        """``scorers`` checked: a mapping name -> scorer."""
        raw = self.scorers or {}
        if not isinstance(raw, dict):
            raise InputError("Study: scorers: give a dict name -> scorer, e.g. "
                             "{'f1': 'f1', 'mine': make_scorer(my_metric)}")
        return {str(name): obj for name, obj in raw.items()}

    def _learner_options(self) -> dict[str, dict]:
        """``learner_options`` checked: known learner names, known keys (values: parse_workflow)."""
        raw = self.learner_options or {}
        if not isinstance(raw, dict):
            raise InputError("Study: learner_options: give a dict learner name -> {key: value}")
        names = set(self.learners)
        out = {}
        for name, options in raw.items():
            if name not in names:
                raise InputError(f"Study: learner_options[{name!r}]: no learner of that name; "
                                 f"the learners are {sorted(names)}")
            if not isinstance(options, dict):
                raise InputError(f"Study: learner_options[{name!r}]: give a dict, e.g. "
                                 "{'preprocess': ['sklearn.preprocessing.StandardScaler']}")
            unknown = sorted(set(options) - set(self.LEARNER_OPTIONS))
            if unknown:
                raise InputError(f"Study: learner_options[{name!r}]: unknown key(s) {unknown}; "
                                 f"use {', '.join(self.LEARNER_OPTIONS)}")
            out[str(name)] = {k: v for k, v in options.items() if v is not None}
        return out

    def _design(self) -> dict:
        cv = self.cv
        if isinstance(cv, dict):
            return dict(cv)
        if isinstance(cv, (int, np.integer)) and not isinstance(cv, bool):
            return {"folds": int(cv)}
        return {"splitter": describe_splitter(cv)}

    def _task(self, y) -> str:
        if self.task is not None:
            return self.task
        # the loss's own declaration (cvflow.estimators.losses.declare); a custom loss
        # declares no task and leaves it to the target, as no loss does
        declared = declared_task(self.loss) if self.loss is not None else None
        if declared is not None:
            return declared
        if y is None:
            return "regression"          # no target: the learners' predict is stored as it is
        y = np.asarray(y)
        if y.dtype.kind in "OUSTb":
            return "classification"
        from sklearn.utils.multiclass import type_of_target

        return "classification" if type_of_target(y) == "binary" else "regression"

    def workflow(self, X, y, groups=None, *, sample_weight=None, fit_params=None,
                 fit_hooks=None) -> Workflow:
        """The validated workflow of this study on these data (InputError on bad input).

        ``fit_params``: other parameters of every learner's ``fit`` (``GridSearchCV``'s
        ``fit(**params)``), a sample-aligned one taken by each fit's training rows; they reach
        the fits only (not stored: a store resumed with other ones is not told apart).
        ``fit_hooks``: one per param in grid order, each entered around that param's fits
        (``Param.fit_hook``: ``SearchCV``'s scikit-learn callbacks); in memory only."""
        task = self._task(y)
        config, objects = self._config(task)
        wf = parse_workflow(config, WHERE, objects=objects)
        if fit_params:
            wf.params = [replace(p, fit_params=dict(fit_params)) for p in wf.params]
        if fit_hooks is not None:
            if len(fit_hooks) != len(wf.params):
                raise ValueError(f"Study: {len(fit_hooks)} fit_hooks for {len(wf.params)} params")
            wf.params = [replace(p, fit_hook=hook) for p, hook in zip(wf.params, fit_hooks)]
        # several targets a sample: only a study scored at fit time (no loss reads the cube)
        wf.data = from_arrays(X, y, task, groups=groups, sample_weight=sample_weight,
                              where=str(WHERE), several_targets=self.loss is None
                              and bool(self.scorers))
        # the scorer objects themselves run (by value on the workers), not their spelling
        wf.scorer_objects = {n: s for n, s in self._scorers().items() if not isinstance(s, str)}
        return wf

    def validate(self, X, y, groups=None, *, sample_weight=None) -> str:
        """Check the study on these data without a store: learners, grids, estimator options,
        splitter, and one trial fit per learner (see :mod:`cvflow.fitting.trial`). Returns a summary
        line; raises :class:`~cvflow.errors.InputError`."""
        wf = self.workflow(X, y, groups, sample_weight=sample_weight)
        built = wf.build()
        check_learners(wf, built.data, str(wf.path))
        return (f"valid; {len(built.params)} params x {built.design.n_splits} splits = "
                f"{len(built.params) * built.design.n_splits} fits")

    def run(self, X, y=None, groups=None, *, sample_weight=None, store=None, cluster=None,
            workers=None, overwrite=False, client=None, progress=None,
            fit_params=None, fit_hooks=None):
        """Fit every (param, split) not yet in ``store`` and return the results over it.

        Goes through :func:`cvflow.execution.run.run` exactly as ``cvflow run`` does (the same
        validation first, the same resume and extension rules). Without ``store`` the cube is
        kept in memory (``result.save(path)`` writes it as a store; a raced study writes
        ``<name>.zarr``, which racing reads); ``cluster``, ``workers``, ``client`` and ``progress`` as there: by
        default the execution choice, a progress bar (notebook-aware with tqdm) and a summary
        on stderr; ``progress=False`` runs silently. ``fit_params`` and ``fit_hooks`` as
        :meth:`workflow`'s.

        A suite: ``X`` a dict ``{name: (X, y[, groups])}``, no ``y``: all validated first, each run
        into ``<store>/<name>`` (:mod:`cvflow.execution.suite_run`); returns ``{name: StudyResult}``.
        """
        from .execution.run import interrupted, run

        if isinstance(X, dict) and not hasattr(X, "tocsr"):   # a dict, not a scipy.sparse DOK matrix
            return self._run_suite(X, (y, groups, sample_weight, fit_hooks), store=store,
                                   cluster=cluster, workers=workers, overwrite=overwrite,
                                   client=client, progress=progress, fit_params=fit_params)
        wf = self.workflow(X, y, groups, sample_weight=sample_weight, fit_params=fit_params,
                           fit_hooks=fit_hooks)
        # DESIGN CHOICE: a study that asks for no store keeps its cube in memory (DESIGN.md
        # section 3); racing reads its store between stages, so a raced one still writes one
        in_memory = store is None and not wf.racing
        path = None if in_memory else Path(store if store is not None else f"{self.name}.zarr")
        # Ctrl-C, SIGTERM, SIGHUP until the results are back: RunInterrupted (a KeyboardInterrupt)
        done = None
        try:
            with interrupts.stoppable():
                # the run checks its arguments and paths once, before the store is locked
                done = run(wf, store=path, cluster=cluster, workers=workers, overwrite=overwrite,
                           client=client, progress=progress, in_memory=in_memory)
                # this study is code: the names it holds are trusted in its results, nothing else
                return StudyResult(done.cube if in_memory else path, run=done, loss=wf.loss,
                                   trust_code=list(workflow_code(wf.config)), params=wf.params)
        except RunInterrupted:
            raise
        except KeyboardInterrupt:
            raise interrupted(done and done.store) from None

    def _run_suite(self, datasets: dict, beside: tuple, *, store, fit_params, **options) -> dict:
        """Study.run over ``{name: (X, y[, groups])}``: validated first, then one run each."""
        from .execution.suite_run import run_workflows
        from .store import suite as suite_store
        from .workflow.suite import LABEL       # a suite's, off a SearchCV fit's imports

        if not datasets or any(v is not None for v in beside):
            raise InputError("Study.run: give a dict {name: (X, y[, groups])} and no other data argument")
        workflows, where = {}, {}
        for name, value in datasets.items():
            where[name] = f"Study.run: data set {name!r}"
            try:
                if not isinstance(name, str) or not LABEL.match(name):
                    raise InputError("a data set's name names its cube; use letters, digits, '_', '.', '-'")
                if not isinstance(value, tuple) or len(value) not in (2, 3):
                    raise InputError(f"{type(value).__name__}; give (X, y) or (X, y, groups)")
                workflows[name] = self.workflow(*value, fit_params=fit_params)
            except InputError as exc:
                raise InputError(f"{where[name]}: {exc}") from None
        path = Path(store) if store is not None else Path(f"{self.name}.zarr")
        done = run_workflows(workflows, name=self.name, where=where, store=path, **options)
        return {name: StudyResult(suite_store.member(path, name), run=done[name], loss=wf.loss,
                                  trust_code=list(workflow_code(wf.config)), params=wf.params)
                for name, wf in workflows.items()}

    # -- files ---------------------------------------------------------------------------------

    def to_yaml(self, path, X, y, groups=None, *, sample_weight=None) -> Path:
        """Write a workflow file ``cvflow run`` accepts, with the data beside it.

        The data go to ``<path stem>.npz`` (no pickles) and the file reads them as
        ``data: {source: npz}``; ``cvflow run`` of the file writes the same cube as
        :meth:`run` on these data. Returns the path of the workflow file.
        """
        path = Path(path)
        wf = self.workflow(X, y, groups, sample_weight=sample_weight)
        kept = unbuildable(wf.config["learners"])
        if kept:
            raise InputError(f"Study.to_yaml: {kept[0]} is a Python object that no name imports "
                             "(defined in __main__ or in a function, a lambda, an array), which "
                             "a workflow file cannot hold; define it in a module")
        data_path = path.with_suffix(".npz")
        save_npz(data_path, wf.data)
        config = self.config(wf.task)
        config["data"] = {"source": "npz", "path": data_path.name,
                          **({"groups": "groups"} if wf.data.groups is not None else {})}
        import yaml     # here: a study run from Python reads and writes no YAML (~10 ms)
        path.write_text(yaml.safe_dump(config, sort_keys=False, width=100))
        return path

    @classmethod
    def from_store(cls, path, *, trust_code: Trust = False) -> "Study":
        """The study a store was made by, rebuilt from its JSON description (no pickles).

        Its ``learners`` map each name to (estimator, grid) with estimators whose
        ``get_params(deep=True)`` equals the originals'.

        Rebuilding imports the classes the store names, and running the study imports its
        estimators and loss: a store is data, so only scikit-learn estimator and splitter
        classes and numpy ufuncs are trusted by default (:mod:`cvflow.trust`). Anything else
        is refused with an InputError listing it, before anything is imported, unless
        ``trust_code`` is True or lists its dotted name (``trust_code=["mymod.MyModel"]``);
        :func:`cvflow.trust.untrusted_code` lists it beforehand.
        """
        from .store.cube import open_cube

        config = json.loads(open_cube(path).attrs["workflow"])
        kept = unbuildable(config.get("learners"))
        if kept:
            raise InputError(f"Study.from_store: {path} cannot be rebuilt: its study fitted "
                             f"{kept[0]}, a Python object that no name imports (its store records "
                             "what was fitted; reports read it)")
        refused = untrusted(workflow_code(config), trust_code)
        if refused:
            raise InputError(f"Study.from_store: {path} names code that is not trusted by default "
                             f"({listed(refused)}); a store is data, so it is not imported: "
                             f"{how(refused, cli=False)}")
        return cls.from_config(config)

    @classmethod
    def from_config(cls, config: dict) -> "Study":
        """A Study from a parsed workflow mapping (a workflow file or a store's ``workflow``)."""
        learners, options = {}, {}
        for i, entry in enumerate(config["learners"]):
            path = str(entry["class"] if "class" in entry else entry["estimator"])
            name = str(entry.get("name") or path.rpartition(".")[2])
            est = Param(name, path, dict(entry.get("params") or {})).build()
            grid = entry.get("grid") or {}
            key = f"learners[{i}].grid"
            grids = [{p: [build(v, f"{key}.{p}") for v in grid_values(str(WHERE), f"{key}.{p}", vals)]
                      for p, vals in g.items()} for g in (grid if isinstance(grid, list) else [grid])]
            learners[name] = (est, grids if isinstance(grid, list) else grids[0])
            kept = {k: entry[k] for k in cls.LEARNER_OPTIONS if entry.get(k) is not None}
            if kept:
                options[name] = kept
        design = dict(config.get("design") or {})
        splitter = design.get("splitter")
        cv = build(splitter, "design.splitter") if isinstance(splitter, dict) else design
        estimators = [e if isinstance(e, str) else dict(e) for e in config.get("estimators") or []]
        execution = dict(config.get("execution") or {})
        # a scorer given as an object no name imports cannot be rebuilt: InputError names it
        scorers = {name: spec if isinstance(spec, str) else build_scorer(spec, f"scorers.{name}")
                   for name, spec in (config.get("scorers") or {}).items()}
        # each learner keeps its own output and preprocess (learner_options), as the run had them
        return cls(learners, cv=cv, estimators=estimators or ["kfold"], loss=config.get("loss"),
                   task=config.get("task"), fit_seed=execution.pop("fit_seed", None),
                   fit_timeout=execution.pop("fit_timeout", None),
                   name=config.get("name", "study"), execution=execution or None,
                   racing=config.get("racing"), learner_options=options or None,
                   scorers=scorers or None, train_scores=bool(config.get("train_scores")))

    def __repr__(self) -> str:
        names = ", ".join(f"{n}: {type(e).__name__}" for n, (e, _) in self.learners.items())
        return f"Study({{{names}}}, cv={self.cv!r}, estimators={list(self.estimators)!r})"


def _grid_lists(grid, where: str) -> list[dict[str, list]]:
    """A grid (dict or list of dicts, as ParameterGrid reads them) as a list of dicts of
    value lists, every iterable written out."""
    grids = grid if isinstance(grid, list) else [grid]
    out = []
    for i, g in enumerate(grids):
        at = f"{where}[{i}]" if isinstance(grid, list) else where
        if not isinstance(g, dict):
            raise InputError(f"{at}: give a dict or a list of dicts, as ParameterGrid reads them")
        one = {}
        for key, values in g.items():
            if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
                raise InputError(f"{at}.{key}: give a list of values (ParameterGrid needs a "
                                 f"sequence), got {values!r}")
            one[str(key)] = list(values)
        out.append(one)
    return out


class StudyResult(StudyCube):
    """The results of a study over its opened store.

    Attributes
    ----------
    cube : xarray.Dataset
        The opened store (:func:`cvflow.open`), restricted to the params of its last
        workflow (an extended store keeps others; ``all_params=True`` keeps them here too).
    store : Path or None (a cube kept in memory: ``save(path)``, :mod:`cvflow.report.study_cube`)
    results : dict name -> xarray.Dataset
        Each requested estimator's result (computed on first use).
    selected : dict criterion -> {"index", "learner", "params"}
        The param each selecting estimator chose (its ``selected``), settings as plain data.
    run : cvflow.execution.run.RunResult or None
        What the run that returned this did (fits executed, failed, seconds).

    ``loss`` is the results' loss (default: the store's); ``trust_code`` what code the store
    names may be imported for them and for :meth:`refit` (:mod:`cvflow.trust`; a study's own
    run trusts the names the study holds).
    """

    def __init__(self, store, *, run=None, loss: str | None = None, trust_code: Trust = False,
                 all_params: bool = False, params: list | None = None):
        super().__init__(store, run=run, all_params=all_params)
        self.loss = loss
        self.trust_code = trust_code
        self._results: dict | None = None
        # the run's own params (Study.run), by the stored param_json: refit (and SearchCV's
        # report) fits their objects, which the store only describes (a lambda, a __main__ class)
        self.run_params = {p.to_json(): p for p in params or () if p.source is not None}

    @classmethod
    def from_store(cls, path, *, loss: str | None = None, trust_code: Trust = False,
                   all_params: bool = False) -> "StudyResult":
        """The results of the study in the store at ``path``, reopened (no fit, no code run).

        Parameters
        ----------
        path : str or path
            A store written by ``cvflow run`` or :meth:`Study.run`.
        loss : str, optional
            The loss of :attr:`results` and :attr:`selected` (default: the store's).
        trust_code : bool or list of str, default False
            What code the store names may be imported (:mod:`cvflow.trust`): a store is data,
            so a user estimator, loss or learner class it names is refused unless trusted;
            scikit-learn's classes are trusted by default.
        all_params : bool, default False
            Every param of an extended store, those its last workflow no longer lists
            included (:func:`cvflow.report.workflow_view`); param indices count them then.

        Examples
        --------
        >>> result = cvflow.StudyResult.from_store("study.zarr")        # doctest: +SKIP
        >>> result.selected["kfold"]                                   # doctest: +SKIP
        {'index': 3, 'learner': 'ridge', 'params': {'alpha': 1.0}}
        >>> model = result.refit("kfold", loss="absolute")             # doctest: +SKIP
        """
        return cls(path, loss=loss, trust_code=trust_code, all_params=all_params)

    @property
    def results(self) -> dict:
        if self._results is None:
            from .report.results import compute

            self._results = compute(self.cube, loss=self.loss, trust_code=self.trust_code)
        return self._results

    def __getitem__(self, name: str):
        return self.results[name]

    def param(self, index: int) -> dict:
        """Param ``index`` as {"index", "learner", "params"}: its grid point, i.e. the settings
        that differ from the learner's fixed params (plain data, see :mod:`cvflow.objects`)."""
        # one definition for every face: the estimators' attrs["selected_params"] are the same
        return param_label(self.cube, index)

    @property
    def selected(self) -> dict[str, dict]:
        return self._selected(self.results)

    def _selected(self, results: dict) -> dict[str, dict]:
        out = {}
        for name, result in results.items():
            if "selected" in result and result["selected"].ndim == 0 and int(result["selected"]) >= 0:
                out[name] = self.param(int(result["selected"]))
        return out

    def _user_data(self, X, y) -> tuple[Any, np.ndarray]:
        """The user's (X, y) for :meth:`refit`, checked to be the store's data: encoded as
        :meth:`Study.run` encodes them, they equal the stored ``X`` and ``y``."""
        if X is None or y is None:
            raise InputError("refit: give both X and y (the data the study was run on), or neither")
        n = int(self.cube.sizes["sample"])
        if len(X) != n or len(y) != n:
            raise InputError(f"refit: X has {len(X)} rows and y {len(y)}, but the store holds "
                             f"{n} samples; give the X, y the study was run on")
        stored_X = np.asarray(self.cube["X"].values, dtype=np.float64)
        if hasattr(X, "columns") and hasattr(X, "iloc"):
            encoded, _ = encode_frame(X, "refit: X")
        elif one_value_a_row(X):        # texts: stored as NaN, checked by their number alone
            encoded = one_value_rows(X, "refit: X")[0]
        else:
            encoded = np.asarray(X, dtype=np.float64)
        if encoded.shape != stored_X.shape or not np.array_equal(encoded, stored_X, equal_nan=True):
            raise InputError("refit: X is not the data the store was made from (its values, "
                             "encoded as the study encodes them, differ from the stored X); "
                             "give the X the study was run on, rows in the same order")
        y_arr = np.asarray(y)
        if not np.array_equal(y_arr.astype(str), np.asarray(self.cube["y"].values).astype(str)):
            raise InputError("refit: y is not the target the store was made from; give the y "
                             "the study was run on, rows in the same order")
        return X, y_arr

    def data(self) -> tuple[Any, np.ndarray]:
        """(X, y) as the learners saw them (a DataFrame when the study was given one)."""
        cube = self.cube
        X = np.asarray(cube["X"].values, dtype=np.float64)
        columns = cube.attrs.get("columns")
        X = decode_frame(X, json.loads(columns)) if columns else X
        y = np.asarray(cube["y"].values)
        return X, (y.astype(object) if y.dtype.kind in "OUT" else y)

    def chosen(self, criterion: str | None = None, *, loss: str | None = None) -> dict:
        """The param ``criterion`` chooses ({"index", "learner", "params"}), under ``loss``
        (default: the results' loss). ``criterion`` is an estimator name that selects
        (``kfold``, ``corrected_kfold``, ``stability_nested``, ...), whether the workflow
        asked for it or not (it needs its split roles in the store); default: the first of
        :attr:`selected`."""
        from .report.results import compute, requested_estimators

        if loss is None or loss == self.loss:
            chosen = self.selected
            if criterion is not None and criterion not in chosen:
                chosen = self._selected(compute(self.cube, [criterion], loss=self.loss,
                                                trust_code=self.trust_code))
        else:
            names = [criterion] if criterion else [n for n, _ in requested_estimators(self.cube)]
            chosen = self._selected(compute(self.cube, names, loss=loss,
                                            trust_code=self.trust_code))
        if not chosen:
            what = f"{criterion!r} selects no param" if criterion else \
                "none of the study's estimators selects a param"
            raise InputError(f"refit: {what}; name an estimator that selects, e.g. "
                             "refit('kfold') or refit('corrected_kfold')")
        return chosen[criterion or next(iter(chosen))]

    def refit(self, criterion: str | None = None, *, loss: str | None = None, X=None, y=None):
        """The param chosen by ``criterion`` fitted on every analysis sample, as the store's
        full-split fit was: its predictions equal the cube's ``pred`` of that param on the
        full split.

        Parameters
        ----------
        criterion : str, optional
            An estimator that selects (see :meth:`chosen`); default: the first of
            :attr:`selected`.
        loss : str, optional
            Choose under this loss instead of the results' (the store's default): e.g. refit
            the param K-fold chooses under the absolute loss of a study run with the squared.
        X, y : array-like or DataFrame, optional
            The data the study was run on, as given to :meth:`Study.run` (the same rows in the
            same order). Default: the store's own copy, rebuilt as the learners saw it. Give
            them when the store's copy is not what the learner can fit (features stored as
            category codes where the learner's Pipeline encodes the original strings); they
            are checked to encode to the store's data, else InputError.

        Returns
        -------
        The fitted scikit-learn estimator.
        """
        h = self.chosen(criterion, loss=loss)["index"]
        text = str(self.cube["param_json"].values[h])
        setting = json.loads(text)
        kept = self.run_params.get(text)
        if kept is None and unbuildable(setting):
            raise InputError(f"refit: param {h} of {self.where} fitted {unbuildable(setting)[0]}, "
                             "a Python object that no name imports; the store records it but "
                             "cannot rebuild it (refit it from your own objects)")
        refused = [] if kept is not None else untrusted(param_code(setting), self.trust_code)
        if refused:
            raise InputError(f"refit: param {h} of {self.where} names code that is not trusted "
                             f"({listed(refused)}); a store is data, so it is not imported: "
                             f"{how(refused, cli=False)}")
        workflow = json.loads(self.cube.attrs["workflow"])
        preprocess = tuple((s["estimator"], json.dumps(s["params"], sort_keys=True))
                           for s in setting.get("preprocess", []))
        param = kept or Param(setting["learner"], setting["estimator"], setting["params"], {},
                              setting["output"], preprocess,
                              (workflow.get("execution") or {}).get("fit_seed"))
        X, y = self.data() if X is None and y is None else self._user_data(X, y)
        weight = self.cube["sample_weight"].values if "sample_weight" in self.cube else None
        return fit_model(param, X, y, ~np.asarray(self.cube["is_test"].values, dtype=bool),
                         weight)

    def __repr__(self) -> str:
        from .report.results import text

        return f"cvflow study {self.where}\n" + text(self.cube, self.results)

    def _repr_html_(self) -> str:
        from markupsafe import Markup

        from .report.results import status_from_cube

        # every value escaped (markupsafe templates, as cvflow.report.page.div explains)
        info = status_from_cube(self.cube)
        row = Markup("<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>")
        rows = Markup("").join(row.format(c, s["index"], s["learner"], json.dumps(s["params"]))
                               for c, s in self.selected.items())
        parts = [Markup("<h4>cvflow study <code>{}</code></h4>").format(self.where),
                 Markup("<p>{} of {} fits done, {} failed; task {}, loss {}</p>").format(
                     info["done"], info["total"], info["failed"], self.cube.attrs.get("task"),
                     self.cube.attrs.get("loss"))]
        if rows:
            parts.append(Markup("<table><tr><th>criterion</th><th>param</th><th>learner</th>"
                                "<th>settings</th></tr>{}</table>").format(rows))
        for name, result in self.results.items():
            # xarray's own HTML view escapes what it shows
            parts.append(Markup("<details><summary>{}</summary>{}</details>").format(
                name, Markup(result._repr_html_())))
        return str(Markup("\n").join(parts))

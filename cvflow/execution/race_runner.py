"""Racing: fit a study in stages and stop fitting the params a sequential rule has beaten.

A raced study (workflow key ``racing: {alpha: 0.05}``) is fitted stage by stage: by default
each fold of the first repeat is a stage, then each further repeat, and the splits no fold
role needs (the full fit, nested pairs, subsets) come last. After every stage but the last
(a *look*), each surviving param is compared with the current leader (the survivor of lowest
mean out-of-fold loss so far) on the paired out-of-fold losses seen so far; a param whose
loss is significantly larger is dropped, and its later blocks are never submitted.

The rule (:func:`look`) is a one-sided test of the mean out-of-fold loss difference per unit
(sample or group), Bonferroni-corrected over every ordered pair of the ``k`` params that
started the race and over its tests: a param is dropped at a look when its p-value against
the leader is at most ``alpha * share / (k * (k - 1))`` (:meth:`Race.cut`). The test is a
finite-sample betting test for a bounded loss, whose looks in the first repeat are one
anytime-valid test (``share`` 0.8 for each of them, the later looks sharing 0.2:
:func:`sequence_looks`), for a classification loss without a range the same betting test on
each unit's range over the labels together with the t-test (both must reject), and a
skewness-corrected t-test for an unbounded one, every look a test (``share`` 1 / looks)
(:mod:`cvflow.execution.racing_rule`, docs/guide/racing.md). The store keeps the race
(:meth:`Race.to_json`): per dropped param the stage, the leader, the test's p-value, and the
mean difference, its standard error and z for reading.

This module holds the look (:func:`look`, with :func:`paired_z`) and the client's
bookkeeping of a race (:class:`Race`); the engine (:mod:`cvflow.execution.run`) runs the stages.
"""
from __future__ import annotations

import json
import logging
import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..errors import RacingWarning
from ..store.attributes import RACING_ATTR
from ..workflow.racing_options import MIN_UNITS
from .racing_rule import (TEST_BOUNDED, TEST_LABELS, TEST_UNBOUNDED, betting_p, label_range_p,
                          label_ranges, skew_corrected_p, unit_means)
from ..store import integrity
from ..store.location import resolve
from ..store.writes import write_attrs
from ..store.cube import block_slices, open_cube
from ..estimators.cube_losses import cube_classes, label_losses, pointwise, pointwise_loss

log = logging.getLogger(__name__)

CORRECTION = "Bonferroni over k(k-1) ordered pairs x looks"
CORRECTION_BOUNDED = ("Bonferroni over k(k-1) ordered pairs; the first repeat's looks one "
                      "anytime-valid test ({share:g} of alpha), the later looks the rest")
CORRECTION_LABELS = (CORRECTION_BOUNDED + " (the betting test); the t-test at every look at "
                     "alpha / (looks x k(k-1))")


# --- stages ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Stage:
    """One stage: the (repeat, fold) roles it completes and the split indices it fits."""

    folds: tuple[tuple[int, int], ...]
    splits: tuple[int, ...]


def plan_stages(design, how: str = "auto") -> list[Stage]:
    """The stages of a raced design, in order: fold stages, then the rest (if any).

    ``how``: ``folds`` (every fold of every repeat a stage), ``repeats`` (every repeat a stage)
    or ``auto`` (each fold of the first repeat, then each further repeat). A split playing
    several roles belongs to the first stage needing it.
    """
    table = np.asarray(design.fold_split)
    n_repeats, n_folds = table.shape if table.ndim == 2 else (0, 0)
    if how == "repeats":
        groups = [[(r, j) for j in range(n_folds)] for r in range(n_repeats)]
    elif how == "folds":
        groups = [[(r, j)] for r in range(n_repeats) for j in range(n_folds)]
    else:
        groups = ([[(0, j)] for j in range(n_folds)]
                  + [[(r, j) for j in range(n_folds)] for r in range(1, n_repeats)])
    seen: set[int] = set()
    stages = []
    for roles in groups:
        roles = [(r, j) for r, j in roles if table[r, j] >= 0]
        splits = [int(table[r, j]) for r, j in roles if int(table[r, j]) not in seen]
        seen.update(splits)
        if roles:
            stages.append(Stage(tuple(roles), tuple(dict.fromkeys(splits))))
    rest = tuple(s for s in range(design.n_splits) if s not in seen)
    if rest:
        stages.append(Stage((), rest))
    return stages


# --- the rule ----------------------------------------------------------------------------------

def threshold(alpha: float, k: int, looks: int) -> float:
    """The p-value at or below which a param is dropped at one look (of ``looks`` tests)."""
    return alpha / (max(looks, 1) * max(k * (k - 1), 1))


def sequence_looks(stages: list[Stage]) -> int:
    """The leading looks whose stages complete folds of the first repeat only.

    Each such stage brings units not seen before (a repeat's folds partition the samples, and
    a grouped design deals its groups whole), so the betting test's wealth over these looks is
    one nonnegative supermartingale (:func:`cvflow.execution.racing_rule.betting_wealth`) and
    Ville's inequality bounds its maximum: the looks are **one** test. A later stage revises
    the means of units already seen, which that sequence does not cover.
    """
    looks = max(len(stages) - 1, 0)
    n = 0
    while n < looks and stages[n].folds and all(r == 0 for r, _ in stages[n].folds):
        n += 1
    return n


# DESIGN CHOICE: a weighted Bonferroni split (Rosenthal & Rubin 1983; any weights fixed before
# the data and summing to 1 keep the union bound): the first repeat's looks, one anytime-valid
# test, get 0.8 of alpha, the later repeats' looks the rest in equal shares. Racing saves its fits
# in the first repeat (a drop at repeat r's look saves the later repeats' fits only); with 3
# repeats an equal split over the 3 tests saved 43% of the fits on the clear-best zero_one grid
# of benchmarks/racing_validity.py (300 data sets), 0.8 saved 46% (2,000 data sets; a 7-way
# split over the looks: 41%).
SEQUENCE_SHARE = 0.8


def bounded_share(looks: int, sequence: int) -> float:
    """The share of alpha one look of a bounded race gets per ordered pair's test: the first
    repeat's ``sequence`` looks share :data:`SEQUENCE_SHARE` as **one** test (each may spend it
    all: Ville's inequality), every later look an equal part of the rest; without later looks,
    the sequence gets all of it (without a sequence, 1 / looks as for an unbounded loss)."""
    later = looks - sequence
    if sequence < 1:
        return 1.0 / max(looks, 1)
    if later == 0:
        return 1.0
    return SEQUENCE_SHARE  # the later looks' share: (1 - SEQUENCE_SHARE) / later (Race.cut)


def paired_z(diff: np.ndarray, units: np.ndarray | None = None) -> tuple[float, float, int]:
    """Mean, standard error and unit count of paired loss differences seen so far.

    Parameters
    ----------
    diff : array (repeat, sample)
        ℓ_i(h) − ℓ_i(g) of the out-of-fold fits seen in each repeat; NaN where not seen.
    units : array (sample,) of int, optional
        The independent unit of each sample (its group in a grouped design); None: the samples.

    Returns
    -------
    mean, se, n_units
        ``mean`` pools every seen (repeat, sample); ``se`` is its conservative standard error
        (see the DESIGN CHOICE below); ``n_units`` the fewest units seen in a repeat.
    """
    seen = np.isfinite(diff)
    total = int(seen.sum())
    if total == 0:
        return float("nan"), float("nan"), 0
    mean = float(diff[seen].sum() / total)
    # DESIGN CHOICE: within one repeat, the K-fold mean of paired out-of-fold losses is
    # asymptotically normal around its target with variance Var(d)/n (Bayle, Bayle, Janson &
    # Mackey 2020, "Cross-validation confidence intervals for test error", Thm. 1 and 3, under
    # loss stability): the fold models' correlation does not enter the first-order variance,
    # so a repeat's standard error is the per-sample one (cluster-robust over groups when the
    # samples come in groups). Repeats reuse the same samples and are strongly correlated:
    # their pooled mean Σ_r w_r·mean_r gets the bound sd ≤ Σ_r w_r·sd_r (Minkowski), which
    # needs no model of that correlation (it is the perfectly correlated case).
    se = 0.0
    fewest = None
    for r in range(diff.shape[0]):
        row = seen[r]
        n_r = int(row.sum())
        if n_r == 0:
            continue
        d = diff[r, row]
        centred = d - d.mean()
        if units is None:
            sums = centred
        else:
            _, inverse = np.unique(units[row], return_inverse=True)
            sums = np.bincount(inverse, weights=centred)
        m = len(sums)
        fewest = m if fewest is None else min(fewest, m)
        var_r = float(np.sum(sums ** 2)) * m / max(m - 1, 1) / n_r ** 2
        se += (n_r / total) * math.sqrt(var_r)
    return mean, se, int(fewest or 0)


def look(losses: np.ndarray, alive: np.ndarray, *, alpha: float, k: int, looks: int,
         units: np.ndarray | None = None, min_units: int = MIN_UNITS,
         bounds: tuple[float, float] | None = None, cut: float | None = None,
         by_label: np.ndarray | None = None, cut_t: float | None = None) -> list[dict]:
    """One look of the race: the survivors beaten by the leader.

    Parameters
    ----------
    losses : array (param, repeat, sample)
        Out-of-fold losses seen so far (NaN where not seen or failed).
    alive : array (param,) of bool
        The params still in the race.
    alpha, k, looks
        The race's promise, the params that started it and its number of looks
        (:func:`threshold`).
    units, min_units
        See :func:`paired_z`; no param is dropped on fewer than ``min_units`` units.
    bounds : (low, high), optional
        The range of the loss: the finite-sample betting test
        (:func:`cvflow.execution.racing_rule.betting_p`) on the units' differences, which lie
        in [low - high, high - low]; None, or a loss seen outside it: the skewness-corrected
        t-test (:func:`cvflow.execution.racing_rule.skew_corrected_p`), asymptotic.
    cut : float, optional
        The p-value at or below which a param is dropped; None: ``threshold(alpha, k, looks)``
        (:meth:`Race.cut` gives a bounded race's, whose first repeat's looks are one test).
    by_label : array (param, repeat, sample, label), optional
        A classification loss without ``bounds``: the loss each seen fit would have had at each
        label. A param is then dropped when both the betting test on the units' ranges over the
        labels (:func:`cvflow.execution.racing_rule.label_range_p`, at ``cut``) and the
        skewness-corrected t-test (at ``cut_t``, default ``threshold(alpha, k, looks)``) reject.

    Returns
    -------
    list of dict
        One per param dropped: ``param``, ``leader``, ``mean_difference``, ``se``, ``z``,
        ``p_value`` (of the rule's test), ``p_adjusted``, ``units``, ``bounded`` (which test).
    """
    alive = np.asarray(alive, bool)
    seen = np.isfinite(losses)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(seen.any(axis=(1, 2)),
                         np.nansum(losses, axis=(1, 2)) / seen.sum(axis=(1, 2)), np.nan)
    candidates = np.flatnonzero(alive & np.isfinite(means))
    if len(candidates) < 2:
        return []
    leader = int(candidates[np.argmin(means[candidates])])     # ties: the first in grid order
    if cut is None:
        cut = threshold(alpha, k, looks)
    bounded = bounds is not None and within(losses[candidates], bounds)
    labelled = by_label is not None and not bounded
    if cut_t is None:
        cut_t = threshold(alpha, k, looks)
    dropped = []
    for h in candidates:
        if h == leader:
            continue
        diff = losses[h] - losses[leader]
        mean, se, n_units = paired_z(diff, units)
        x = unit_means(diff, units)
        extra = {}
        if bounded:
            assert bounds is not None
            p = betting_p(x, width=bounds[1] - bounds[0])
            beaten = p <= cut
        elif labelled:
            assert by_label is not None
            p = label_range_p(x, *label_ranges(by_label[h] - by_label[leader], units))
            p_t = skew_corrected_p(x, guard=False)
            beaten = p <= cut and np.isfinite(p_t) and p_t <= cut_t
            extra = {"p_t": p_t}
        else:
            p = skew_corrected_p(x)
            beaten = np.isfinite(p) and p <= cut
        if n_units >= min_units and beaten:
            adjusted = p * alpha / cut
            if labelled:
                adjusted = max(adjusted, extra["p_t"] * alpha / cut_t)
            dropped.append({"param": int(h), "leader": leader, "mean_difference": mean,
                            "se": se, "z": mean / se if se > 0 else float("inf"),
                            "p_value": p, "p_adjusted": min(1.0, adjusted),
                            "units": n_units, "bounded": bool(bounded), **extra})
    return dropped


def within(losses: np.ndarray, bounds: tuple[float, float]) -> bool:
    """Whether every seen loss lies in ``bounds`` (the betting test's premise)."""
    seen = losses[np.isfinite(losses)]
    return bool(((seen >= bounds[0]) & (seen <= bounds[1])).all())


# --- the race of a run -------------------------------------------------------------------------

def label(setting: dict) -> str:
    """A param as text, ``learner(key=value, ...)``, from its setting (``Param.to_json``);
    the text report's format (:func:`cvflow.estimators.labels.param_text`)."""
    hyper = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in setting["params"].items())
    return f"{setting['learner']}({hyper})"


def labels(params) -> list[str]:
    """:func:`label` of each :class:`cvflow.workflow.params.Param` (the record's ``label`` and
    ``leader_label``)."""
    return [label(json.loads(p.to_json())) for p in params]



@dataclass
class Race:
    """The client's record of a race: its options, stages, who was dropped when.

    Written to the store's attribute ``racing`` (JSON) after every look (:meth:`to_json`).
    """

    options: dict
    stages: list[Stage]
    n_params: int
    dropped: dict[int, dict] = field(default_factory=dict)
    looked: int = -1                 # the last stage whose look is recorded
    # each param as text (:func:`label`): the record names the dropped and their leaders, so a
    # report of a later, extended or re-listed store still says who was dropped
    labels: list[str] | None = None
    # the loss's range (racing.loss_range, or the loss's declaration): the finite-sample test;
    # None: the asymptotic one (:mod:`cvflow.execution.racing_rule`)
    bounds: tuple[float, float] | None = None
    # the look at which the first repeat's sequence ended early: a unit seen before came back
    # (a group split over folds); None: it did not (:meth:`share`)
    broken: int | None = None
    seen_units: np.ndarray | None = None
    # a classification loss without a range: the betting test on each unit's range over the
    # labels, with the t-test (:func:`look`'s ``by_label``)
    labelled: bool = False
    # the look at which a loss was first seen outside ``bounds``: from it on the t-test, the
    # looks left sharing the alpha not yet spent (:meth:`share`)
    left_range: int | None = None

    @property
    def test(self) -> str:
        """The rule's test, as the record and the reports name it."""
        if self.labelled:
            return TEST_LABELS
        if self.bounds is None:
            return TEST_UNBOUNDED
        return TEST_BOUNDED.format(lo=self.bounds[0], hi=self.bounds[1])

    @property
    def looks(self) -> int:
        return max(len(self.stages) - 1, 0)

    @property
    def betting(self) -> bool:
        """Whether the race started with a betting test (a range, or the labels' ranges)."""
        return self.bounds is not None or self.labelled or self.left_range is not None

    def sequence(self) -> int:
        """The looks that form the first repeat's one anytime-valid test (0: none)."""
        if not self.betting:
            return 0
        sequence = sequence_looks(self.stages)
        return self.broken if self.broken is not None and self.broken < sequence else sequence

    def planned_share(self, s: int) -> float:
        """:meth:`share` had the losses stayed in their range."""
        if not self.betting:
            return 1.0 / max(self.looks, 1)
        sequence = sequence_looks(self.stages)
        first = bounded_share(self.looks, sequence)
        if self.broken is not None and self.broken < sequence and s >= self.broken:
            # the design, not the losses, ended the sequence: the looks left share the rest
            return (1.0 - first) / (self.looks - self.broken)
        if sequence < 1 or s < sequence:
            return first
        return (1.0 - first) / (self.looks - sequence)

    def spent(self, s: int) -> float:
        """The share of alpha the looks before look ``s`` spent (the sequence's looks once)."""
        sequence = self.sequence()
        return sum(self.planned_share(j) for j in range(s) if j == 0 or j >= sequence)

    def share(self, s: int) -> float:
        """The share of alpha the look after stage ``s`` spends (before the split over the
        k(k-1) ordered pairs): 1 / looks for an unbounded loss; for a bounded one, the first
        repeat's looks are one anytime-valid test (:func:`sequence_looks`, :func:`bounded_share`).
        From a look at which a loss left its range on, the t-test's looks share what the
        earlier looks left unspent (the sequence counted whole), so the race spends at most
        alpha in all."""
        if self.left_range is None or s < self.left_range:
            return self.planned_share(s)
        return max(1.0 - self.spent(self.left_range), 0.0) / (self.looks - self.left_range)

    def check_sequence(self, s: int, losses: np.ndarray, units: np.ndarray | None) -> None:
        """End the first repeat's sequence at look ``s`` if its stage revised a unit seen at an
        earlier look (the wealth would no longer be a supermartingale over the looks)."""
        if self.broken is not None or s >= sequence_looks(self.stages):
            return
        seen = np.isfinite(losses).any(axis=0)                 # (repeat, sample)
        labels = np.arange(seen.shape[1]) if units is None else np.asarray(units)
        _, inverse = np.unique(labels, return_inverse=True)
        count = np.bincount(np.broadcast_to(inverse, seen.shape)[seen],
                            minlength=inverse.max(initial=-1) + 1)
        before = self.seen_units
        if before is not None and np.any((before > 0) & (count != before)):
            self.broken = s
        self.seen_units = count

    def cut(self, s: int) -> float:
        """The p-value at or below which a param is dropped at the look after stage ``s``."""
        return threshold(self.options["alpha"] * self.share(s), self.n_params, 1)

    def cut_t(self, s: int) -> float:
        """The t-test's threshold at that look, alongside the labels' betting test."""
        return threshold(self.options["alpha"], self.n_params, self.looks)

    @property
    def alive(self) -> np.ndarray:
        out = np.ones(self.n_params, bool)
        out[list(self.dropped)] = False
        return out

    @classmethod
    def start(cls, options: dict, design, n_params: int, stored: dict | None = None,
              labels: list[str] | None = None) -> Race:
        """A new race, or the one ``stored`` in the store continued (same stages)."""
        stages = plan_stages(design, options["stages"])
        race = cls(options=options, stages=stages, n_params=n_params, labels=labels)
        if stored:
            race.dropped = {int(d["param"]): d for d in stored.get("dropped", [])
                            if int(d["param"]) < n_params}
            race.looked = int(stored.get("looked", -1))
        return race

    def cells(self, s: int) -> np.ndarray:
        """(param, split) bool: the fits stage ``s`` asks for (survivors x its splits)."""
        n_splits = 1 + max((max(st.splits) for st in self.stages if st.splits), default=-1)
        out = np.zeros((self.n_params, n_splits), bool)
        out[np.ix_(self.alive, list(self.stages[s].splits))] = True
        return out

    def look(self, s: int, losses: np.ndarray, units: np.ndarray | None,
             by_label: np.ndarray | None = None) -> list[dict]:
        """The look after stage ``s`` on ``losses`` (param, repeat, sample); records drops.
        ``by_label`` (param, repeat, sample, label): a labelled race's losses at every label."""
        if self.bounds is not None and not within(losses[self.alive], self.bounds):
            low, high = self.bounds
            self.left_range = s
            self.bounds = None
            warnings.warn(f"racing: a loss outside the range {low:g} to {high:g} given for the "
                          "race; from this look on it uses the asymptotic test, its looks "
                          f"sharing the {1 - self.spent(s):.2g} of alpha the earlier looks left",
                          RacingWarning, stacklevel=2)
        self.check_sequence(s, losses, units)
        new = look(losses, self.alive, alpha=self.options["alpha"], k=self.n_params,
                   looks=self.looks, units=units, min_units=self.options["min_units"],
                   bounds=self.bounds, cut=self.cut(s),
                   by_label=by_label if self.labelled else None, cut_t=self.cut_t(s))
        for d in new:
            d["stage"] = s
            if self.labels is not None:
                d["label"] = self.labels[d["param"]]
                d["leader_label"] = self.labels[d["leader"]]
            self.dropped[d["param"]] = d
        self.looked = max(self.looked, s)
        return new

    def to_json(self) -> str:
        return json.dumps({
            "alpha": self.options["alpha"], "stages": self.options["stages"],
            "min_units": self.options["min_units"], "test": self.test,
            "correction": (CORRECTION if not self.betting
                           else (CORRECTION_LABELS if self.labelled else CORRECTION_BOUNDED)
                           .format(share=self.share(0))),
            "params": self.n_params, "looks": self.looks,
            "sequence_looks": self.sequence(),
            "left_range": self.left_range,
            "threshold": self.cut(0),
            "thresholds": [self.cut(s) for s in range(self.looks)],
            "stage_splits": [list(st.splits) for st in self.stages],
            "stage_folds": [[list(f) for f in st.folds] for st in self.stages],
            "looked": self.looked,
            "dropped": sorted(self.dropped.values(), key=lambda d: (d["stage"], d["param"]))},
            default=float)


# DESIGN CHOICE: a classification race keeps every seen fit's loss at every label (param x repeat
# x sample x class floats); beyond this many (400 MB) it falls back to the t-test and says so
LABELLED_MOST = 50_000_000


class StageReader:
    """The out-of-fold losses of a race's stages, read from the store as they land.

    DESIGN CHOICE: the cube is opened once per race (its role tables, ``y``, the loss's
    declaration) and each look reads only the region of ``pred`` its stage wrote, straight
    from the zarr array (:func:`cvflow.store.integrity.read`, so a damaged chunk is named): opening
    the cube at every look cost ~30 ms of the ~80 ms a look took on a millisecond-fit grid
    (benchmarks/bench_racing.py, docs/guide/racing.md). The stage's fits are read back rather
    than sent back by the tasks: a task returns a small record, never per-sample arrays.
    """

    def __init__(self, path: str, race: Race, loss: str):

        self.cube = open_cube(path)
        self.location = resolve(path)
        self.pred = integrity.open_array(self.location, "pred")
        self.race, self.loss = race, loss
        self.table = self.cube["fold_split"].values
        self.fold = self.cube["fold"].values
        self.losses = np.full((race.n_params,) + self.fold.shape, np.nan)
        self.by_label: np.ndarray | None = None

    def labels(self) -> int:
        """The number of classes of a classification cube (0 for regression)."""
        return len(cube_classes(self.cube) or ())

    def bounds(self) -> tuple[float, float] | None:
        """The loss's range for the race: ``racing.loss_range`` if given, else the loss's
        declaration (``zero_one``, ``brier``), else None (unbounded)."""
        given = self.race.options.get("loss_range")
        if given is not None:
            return (float(given[0]), float(given[1]))
        return pointwise(self.cube, self.loss, "racing").bounds

    def add(self, s: int) -> np.ndarray:
        """The losses (param, repeat, sample) seen so far with stage ``s``'s added."""
        alive = np.flatnonzero(self.race.alive)
        folds = self.race.stages[s].folds
        if not folds or not len(alive):
            return self.losses
        splits = sorted({int(self.table[r, j]) for r, j in folds})
        # one rectangular read (rows alive[0]..alive[-1], the stage's splits' span), then
        # the survivors and the stage's splits picked in memory
        region = (slice(int(alive[0]), int(alive[-1]) + 1), slice(splits[0], splits[-1] + 1))
        values = np.asarray(integrity.read(self.location, "pred", region, array=self.pred))
        values = values[np.ix_(alive - alive[0], np.asarray(splits) - splits[0])]
        pred = self.cube["pred"].isel(param=alive, split=splits).copy(data=values)
        lost = np.asarray(pointwise_loss(self.cube, self.loss, pred, what="racing").values)
        at = {sp: i for i, sp in enumerate(splits)}
        for r, j in folds:
            members = np.flatnonzero(self.fold[r] == j)
            self.losses[np.ix_(alive, np.array([r]), members)] = \
                lost[:, at[int(self.table[r, j])], members][:, None, :]
        if self.race.labelled:
            every = label_losses(self.cube, self.loss, pred, what="racing")
            if self.by_label is None:
                self.by_label = np.full(self.losses.shape + every.shape[-1:], np.nan)
            for r, j in folds:
                members = np.flatnonzero(self.fold[r] == j)
                self.by_label[np.ix_(alive, np.array([r]), members)] = \
                    every[:, at[int(self.table[r, j])], members][:, None, :]
        return self.losses


# --- the stages of a run (called by cvflow.execution.run around its one loop) -------------------------

def stage_blocks(race: Race, s: int, done: np.ndarray, chunks: tuple[int, int]
                 ) -> list[tuple[slice, slice, np.ndarray | None]]:
    """The blocks of stage ``s`` not yet ``done``: (params, splits, cells to fit or None: all)."""

    want = race.cells(s)[:, :done.shape[1]] & ~done
    out = []
    for ps, ss in block_slices(done.shape[0], done.shape[1], chunks):
        cells = want[ps, ss]
        if cells.any():
            out.append((ps, ss, None if cells.all() else cells))
    return out


def mark_done(done: np.ndarray, blocks) -> None:
    """Mark the cells of fitted ``blocks`` (params, splits, cells or None) in ``done``."""
    for ps, ss, cells in blocks:
        done[ps, ss] = True if cells is None else done[ps, ss] | cells


def run_stages(race: Race, *, path: str, done: np.ndarray, chunks: tuple[int, int],
               fit, flush, loss: str, units: np.ndarray | None, looked=None) -> None:
    """Fit the race stage by stage: ``fit(blocks)`` runs one stage's blocks to the end (the
    engine's loop), ``flush()`` writes their status; after each stage but the last, the look
    (:meth:`Race.look`) drops the beaten params, the race is written to the store and
    ``looked(race)`` is called (the engine's progress: the dropped params' fits leave the
    count of fits to do).

    ``done`` (param, split) is updated in place. A race continued on a store replays every
    look on the stored fits (the same data give the same drops) and fits what is missing.
    """
    reader = None
    for s in range(len(race.stages)):
        blocks = stage_blocks(race, s, done, chunks)
        if blocks:
            fit(blocks)
            flush()
            mark_done(done, blocks)
        if s == len(race.stages) - 1:
            break
        if reader is None:
            reader = StageReader(path, race, loss)
            race.bounds = reader.bounds()
            classes = reader.labels()
            race.labelled = (race.bounds is None and classes > 1
                             and reader.losses.size * classes <= LABELLED_MOST)
            if race.bounds is None and not race.labelled and classes > 1:
                warnings.warn(f"racing on {loss}: {classes} classes x {reader.losses.size} "
                              "losses are too many to keep at every label, so the race uses "
                              "the asymptotic t-test; give racing.loss_range: [low, high] for a "
                              "finite-sample guarantee", RacingWarning, stacklevel=2)
            elif race.bounds is None and not race.labelled:
                warnings.warn(f"racing on {loss}: an unbounded loss, so the chance of dropping "
                              "the best param is at most alpha only asymptotically (a "
                              "skewness-corrected t-test); give racing.loss_range: [low, high] "
                              "if the losses are known to lie in a range, for a finite-sample "
                              "guarantee", RacingWarning, stacklevel=2)
        new = race.look(s, reader.add(s), units, reader.by_label)
        # DESIGN CHOICE: the record is written when it changes what a reader learns (the
        # first look: the study is raced; a look that drops params; the last look), not at
        # every look: each write rewrites the consolidated metadata (~15 ms)
        if new or s in (0, len(race.stages) - 2):
            write_attrs(path, {RACING_ATTR: race.to_json()})
        if looked is not None and new:
            looked(race)
        if new:
            log.info("racing: stage %d dropped %d params (%d left)", s, len(new),
                     int(race.alive.sum()))



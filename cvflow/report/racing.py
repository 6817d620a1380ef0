"""A raced store's race, as data and text: who was dropped when, by which test, and what is left.

Read from the store's ``racing`` attribute (written by :mod:`cvflow.execution.race_runner`, read by
:func:`cvflow.store.attributes.race_record`); used by ``cvflow report`` / ``status``, the HTML report
and the run's closing summary.
"""
from __future__ import annotations

import math

import numpy as np

from ..store.attributes import saved_fits, unfilled
from ..store.attributes import race_record as record  # the name the docs gave before issue 39

def state_text(dropped: int, params, lacking: int, saved: int) -> str:
    """What racing means for the store now, in one phrase (status and report).

    DESIGN CHOICE: the race is history kept in the store (who was dropped, when, by which
    test); what it leaves missing is the store's present. Once a run without racing has fitted
    the skipped fits, the dropped params have every result, and saying "dropped" alone read as
    if they still lacked them (tests/test_racing_report.py::test_status_after_filling_says_so).
    """
    if not dropped:
        return f"no param dropped of {params}"
    if not saved:
        return (f"{dropped} of {params} params were dropped, and their skipped fits have been "
                "fitted since (a run without racing): every param has its results")
    return (f"{dropped} of {params} params dropped; {lacking} of them still lack {saved} fits "
            "racing skipped (their results are NaN; `cvflow run` with racing: false fits them)")


def _finite(value) -> float | None:
    """A JSON-ready number: None for NaN and infinity (z is infinite when every paired
    difference was equal; strict JSON has no Infinity)."""
    value = float(value)
    return value if math.isfinite(value) else None


def where(folds) -> str:
    """A stage's (repeat, fold) roles as text: ``r0f1, r0f2``; the last stage: ``the rest``."""
    return ", ".join(f"r{r}f{j}" for r, j in folds) or "the rest"


def summary(cube) -> dict | None:
    """The race of a raced cube as plain data (``cvflow report --json``'s ``racing`` entry, the
    text and HTML reports); None for a study not raced.

    Returns
    -------
    dict or None
        ``alpha``, ``test``, ``correction``, ``threshold`` (the p-value at or below which a
        param was dropped at the first look), ``thresholds`` (that p-value at each look: with a
        bounded loss the first repeat's looks share most of alpha, the later ones the rest),
        ``params`` (that started the race), ``looks``,
        ``stages`` (each its ``stage``, (repeat, fold) ``folds`` and ``splits``),
        ``saved_fits`` (not run and still not done), ``unfilled`` (dropped params still lacking
        a fit: 0 once a run without racing filled them), ``survivors``, and ``dropped``: one
        row per dropped param,
        in the order they were dropped: ``param`` (its index in the store), ``label``,
        ``stage``, ``threshold`` (that look's), ``folds`` (that stage's (repeat, fold) roles as
        text, ``r0f1``), ``leader`` (the
        label of the param it lost to) and ``leader_param``, ``mean_difference`` (its mean
        out-of-fold loss minus the leader's), ``se``, ``z``, ``p_value``, ``p_adjusted``,
        ``units`` (samples, or groups, seen). Non-finite numbers are None.
    """
    from ..estimators.labels import param_label, param_text

    race = record(cube)
    if not race:
        return None
    done = np.asarray(cube["done"].values)
    n_store = int(cube.sizes["param"])

    def name(d: dict, key: str, index: str) -> str:
        h = int(d[index])
        return d.get(key) or (param_text(param_label(cube, h)) if h < n_store else f"param {h}")

    stages = [{"stage": s, "folds": [list(f) for f in folds], "splits": list(splits)}
              for s, (splits, folds) in enumerate(zip(race["stage_splits"],
                                                      race["stage_folds"]))]
    # a store raced before the per-look record: every look dropped at the first look's p
    thresholds = [float(t) for t in race.get("thresholds") or [race["threshold"]] * race["looks"]]
    rows = [{"param": int(d["param"]), "label": name(d, "label", "param"),
             "stage": int(d["stage"]), "threshold": thresholds[int(d["stage"])],
             "folds": where(stages[int(d["stage"])]["folds"]),
             "leader": name(d, "leader_label", "leader"), "leader_param": int(d["leader"]),
             "mean_difference": _finite(d["mean_difference"]), "se": _finite(d["se"]),
             "z": _finite(d["z"]), "p_value": _finite(d["p_value"]),
             "p_adjusted": _finite(d["p_adjusted"]), "units": int(d["units"])}
            for d in race["dropped"]]
    return {"alpha": race["alpha"], "test": race["test"], "correction": race["correction"],
            "threshold": race["threshold"], "thresholds": thresholds,
            "params": race["params"], "looks": race["looks"],
            "stages": stages, "saved_fits": saved_fits(race, done),
            "unfilled": unfilled(race, done),
            "survivors": int(race["params"]) - len(rows), "dropped": rows}


def text(cube) -> list[str]:
    """The race of a raced cube as text lines (the report's ``racing`` section); [] if none."""
    race = summary(cube)
    if not race:
        return []
    state = state_text(len(race["dropped"]), race["params"], race["unfilled"], race["saved_fits"])
    lines = [f"racing: {state} (alpha {race['alpha']}: {race['test']}, "
             f"{race['correction']}; drop at {cuts_text(race['thresholds'])})"]
    for d in race["dropped"]:
        z = "inf" if d["z"] is None else f"{d['z']:.2f}"
        lines.append(f"  stage {d['stage']} ({d['folds']}): {d['label']} beaten by "
                     f"{d['leader']}: loss +{d['mean_difference']:.4g} "
                     f"(z {z}, p {d['p_value']:.2g} <= {d['threshold']:.3g})")
    return lines


def cuts_text(thresholds: list[float], at_most: str = "<=") -> str:
    """The looks' drop thresholds in words: one p-value, or each run of equal ones by look
    (``p <= 0.008 at looks 1-4, 0.0005 at looks 5-9``; ``at_most``: the sign written)."""
    if not thresholds:
        return "no look"
    runs: list[list] = []
    for look, cut in enumerate(thresholds, start=1):
        if runs and runs[-1][2] == cut:
            runs[-1][1] = look
        else:
            runs.append([look, look, cut])
    if len(runs) == 1:
        return f"p {at_most} {runs[0][2]:.3g}"
    return f"p {at_most} " + ", ".join(f"{cut:.3g} at look{'s' if a != b else ''} "
                               f"{a if a == b else f'{a}-{b}'}" for a, b, cut in runs)

"""The compat suite: scikit-learn's GridSearchCV tests run against cvflow.SearchCV (issue 31),
its RandomizedSearchCV tests against cvflow.RandomizedSearchCV (issue 41).

* test_sklearn_search.py: the tests with GridSearchCV = cvflow.SearchCV (shim.py);
  test_sklearn_search_baseline.py: the same tests with scikit-learn's GridSearchCV.
  test_sklearn_random_search.py and test_sklearn_random_search_baseline.py: the same pair for
  RandomizedSearchCV.
* Cases parametrized with another search class (RandomizedSearchCV, Halving*; GridSearchCV in
  the random pair) are deselected.
* known_failures.txt: the tests cvflow fails, each with its reason (xfail, strict=False).
* At the end of a run that ran both modules of a pair: "GridSearchCV passes N; SearchCV passes
  M of them", the listed tests that now pass (to remove from the list) and the stale entries.
"""
from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent
KNOWN = HERE / "known_failures.txt"
MODULES = {"test_sklearn_search.py": "searchcv", "test_sklearn_search_baseline.py": "gridsearchcv",
           "test_sklearn_random_search.py": "random_searchcv",
           "test_sklearn_random_search_baseline.py": "randomizedsearchcv"}
#: scikit-learn's search -> (cvflow's mode, the baseline mode), with cvflow's name
PAIRS = {"GridSearchCV": ("searchcv", "gridsearchcv", "SearchCV"),
         "RandomizedSearchCV": ("random_searchcv", "randomizedsearchcv", "cvflow.RandomizedSearchCV")}
#: a known_failures.txt prefix -> the modes its line is for (no prefix: searchcv)
PREFIXES = {"gridsearchcv:": ("searchcv", "gridsearchcv"), "random:": ("random_searchcv",),
            "randomizedsearchcv:": ("random_searchcv", "randomizedsearchcv")}
GOAL = 0.9


def read_known(path: Path = KNOWN) -> dict[str, dict[str, str]]:
    """{mode: {test id: reason}}: plain lines are SearchCV's, ``gridsearchcv:`` lines both runs',
    ``random:`` lines cvflow.RandomizedSearchCV's, ``randomizedsearchcv:`` both random runs'."""
    known: dict[str, dict[str, str]] = {mode: {} for mode in MODULES.values()}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        test, sep, reason = line.partition("|")
        if not sep or not reason.strip():
            raise pytest.UsageError(f"{path}:{number}: give '<test id> | <reason>'; got {raw!r}")
        test = test.strip()
        modes: tuple[str, ...] = ("searchcv",)
        for prefix, prefixed in PREFIXES.items():
            if test.startswith(prefix):
                test, modes = test[len(prefix):].strip(), prefixed
        for mode in modes:
            known[mode][test] = reason.strip()
    return known


def _mode(item) -> str | None:
    if Path(str(item.path)).parent != HERE:
        return None
    return MODULES.get(Path(str(item.path)).name)


def _entry(item, entries: dict[str, str]) -> str | None:
    """The known_failures entry of ``item``: its exact id, else its function's name."""
    for key in (item.name, item.originalname):
        if key in entries:
            return key
    return None


class _State:
    """This session's compat results: {(mode, test name): outcome} and the list entries used."""
    outcomes: dict[tuple[str, str], str] = {}
    used: set[tuple[str, str]] = set()


def pytest_configure(config):
    # test_search.py marks some tests thread_unsafe (pytest-run-parallel's marker); with
    # --strict-markers an unregistered marker is an error
    config.addinivalue_line("markers", "thread_unsafe: scikit-learn's (pytest-run-parallel)")
    _State.outcomes, _State.used = {}, set()


def pytest_collection_modifyitems(config, items):
    from generate import other_search

    known = read_known()
    keep, drop = [], []
    for item in items:
        mode = _mode(item)
        if mode is None:
            keep.append(item)
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        if any(other_search(v, mode) for v in params.values()):
            drop.append(item)
            continue
        keep.append(item)
        entry = _entry(item, known[mode])
        if entry is not None:
            _State.used.add((mode, entry))
            item.add_marker(pytest.mark.xfail(reason=known[mode][entry], strict=False))
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_runtest_logreport(report):
    path = Path(report.fspath)
    mode = MODULES.get(path.name) if path.parent.name == HERE.name else None
    if mode is None:
        return
    name = report.nodeid.split("::", 1)[1]
    if report.when != "call" and report.passed:
        return
    xfail = hasattr(report, "wasxfail")
    if report.passed:
        outcome = "xpassed" if xfail else "passed"
    elif report.skipped:
        outcome = "xfailed" if xfail else "skipped"
    else:
        outcome = "failed" if report.when == "call" else "error"
    if _State.outcomes.get((mode, name)) in (None, "passed", "xpassed"):
        _State.outcomes[(mode, name)] = outcome        # a teardown error after a pass counts


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _State.outcomes:
        return
    known = read_known()
    for search, (ours_mode, base_mode, who) in PAIRS.items():
        _summary(terminalreporter, search, ours_mode, base_mode, who, known)


def _summary(tr, search: str, ours_mode: str, base_mode: str, who: str,
             known: dict[str, dict[str, str]]) -> None:
    """The share of ``search``'s tests cvflow passes, the listed tests passing now and the stale
    entries of one pair of modules (nothing when neither of them ran)."""
    outcomes = {(m, n): o for (m, n), o in _State.outcomes.items() if m in (ours_mode, base_mode)}
    if not outcomes:
        return
    names = {n for (_, n) in outcomes}
    base = {n for n in names if outcomes.get((base_mode, n)) in ("passed", "xpassed")}
    ours = {n for n in names if outcomes.get((ours_mode, n)) in ("passed", "xpassed")}
    tr.section(f"cvflow compat: scikit-learn's {search} tests")
    both = {m for (m, _) in outcomes} == {ours_mode, base_mode}
    if both:
        share = len(base & ours) / len(base) if base else 0.0
        tr.write_line(f"{search} passes {len(base)} of {len(names)} tests here; {who} passes "
                      f"{len(base & ours)} of them ({share:.0%}; goal {GOAL:.0%})")
    else:
        mode, = {m for (m, _) in outcomes}
        tr.write_line(f"{who if mode == ours_mode else search} passes "
                      f"{len(ours if mode == ours_mode else base)} of {len(names)} tests (run both "
                      f"modules of the pair for {who}'s share of the tests {search} passes)")
    xpassed = sorted(n for (m, n), o in outcomes.items() if m == ours_mode and o == "xpassed")
    if xpassed:
        tr.write_line(f"listed in known_failures.txt but passing now ({len(xpassed)}; remove "
                      "them): " + ", ".join(xpassed))
    stale = sorted(t for t in known[ours_mode] if (ours_mode, t) not in _State.used)
    if stale and both:
        tr.write_line(f"known_failures.txt entries matching no collected test ({len(stale)}): "
                      + ", ".join(stale))

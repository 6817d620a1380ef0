"""The ``cvflow`` command: run | status | report | verify | validate.

The CLI parses arguments and calls library functions. Exit codes: 0 success, 2 bad input
(one line, no traceback), 1 a failure at run time.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import shlex
import sys
import warnings

from .errors import InputError, RunInterrupted
from .terminal import visible
from .execution.progress import Progress, summary_lines
from .store.location import exists, is_url, resolve


def cmd_validate(args) -> int:
    from .execution.preflight import check_cluster
    from .fitting.trial import check_learners
    from .workflow import suite

    loaded = suite.load(args.workflow)
    if isinstance(loaded, suite.Suite):
        built = suite.build_all(loaded)
        for i, (label, wf) in enumerate(loaded.workflows.items()):
            check_learners(wf, built[label].data, f"{args.workflow}: data[{i}] ({label})")
        fits = sum(len(b.params) * b.design.n_splits for b in built.values())
        print(visible(f"{args.workflow}: valid suite of {len(built)} data sets "
                      f"({', '.join(built)}); {fits} fits"))
        return 0
    wf = loaded
    if wf.execution.get("cluster") is not None:
        check_cluster(wf)         # the profile the workflow names (reads Dask's config)
    study = wf.build()
    check_learners(wf, study.data, str(wf.path))
    n_fits = len(study.params) * study.design.n_splits
    print(visible(f"{args.workflow}: valid; {len(study.params)} params x "
                  f"{study.design.n_splits} splits = {n_fits} fits; estimators: "
                  f"{', '.join(n for n, _ in wf.estimators)}"))
    for message in wf.design_warnings(study):
        print(visible(f"cvflow: warning: {args.workflow}: {message}"), file=sys.stderr)
    return 0


def _quiet_distributed() -> None:
    """Dask's own INFO logging would drown the progress bar and the report; distributed reads
    this setting when it is first imported (lazily, when a cluster starts), so it is set before
    that. Only `run` and `report --cluster` may start one: the other commands do not import
    Dask's config for it."""
    import dask.config

    if "DASK_LOGGING__DISTRIBUTED" not in os.environ:
        dask.config.set({"logging.distributed": "error"})


def cmd_run(args) -> int:
    _quiet_distributed()
    from .execution import run as engine
    from .report import results as report
    from .store.cube import open_cube
    from .trust import workflow_code

    from .workflow import suite

    wf = suite.load(args.workflow)
    if isinstance(wf, suite.Suite):
        return _run_suite(wf, args)
    # every argument and path is checked by the run before the store is locked, created or
    # grown (cvflow.execution.preflight.check_run, once)
    result = engine.run(wf, store=args.store, cluster=args.cluster, workers=args.workers,
                        overwrite=args.overwrite, dashboard_port=args.dashboard_port,
                        progress=Progress(summary=False), tls=args.tls or None,
                        cluster_options=args.cluster_option)
    print("\n".join(summary_lines(result)))
    cube = open_cube(result.store, trusted=True)      # this run wrote it (DESIGN.md section 3)
    info = report.status_from_cube(cube)
    if info["failed"] == info["total"]:
        print(visible(f"cvflow: error: every fit failed: {next(iter(info['failures']))}"),
              file=sys.stderr)
        return 1
    # DESIGN CHOICE: cvflow's own estimators read neither the fits' messages nor their
    # seconds: the report's cube leaves them out once the status is read (0.22 GiB at 10^7
    # fits, `error` a string per fit); a user estimator of the workflow gets the whole cube
    from .estimators.registry import REGISTRY

    if all(name in REGISTRY for name, _ in wf.estimators):
        cube = cube.drop_vars(["error", "fit_seconds"])
    # the workflow file is code: what it names is trusted, with its loss; anything else the
    # store names (user estimators of an earlier workflow, another author's) is data
    print(report.text(cube, report.compute(cube, loss=wf.loss,
                                           trust_code=list(workflow_code(wf.config))),
                      status=info))
    return 0


def cmd_status(args) -> int:
    from .report import results as report
    from .store.group import is_store, not_a_store

    from .store import suite as suite_store

    if not exists(resolve(args.store)):
        raise InputError(f"store: {args.store} does not exist")
    if suite_store.datasets(args.store) is not None:    # a suite: each data set's, the total
        from .report import suite_status

        suite = suite_status.status(args.store)
        # --json: data set -> its cube's status with its state (null: not started yet)
        print(json.dumps(suite["datasets"]) if args.json else suite_status.format_status(suite))
        return 1 if any(i and i.get("damaged") for i in suite["datasets"].values()) else 0
    if not is_store(args.store):
        raise not_a_store(args.store)
    info = report.status(args.store)
    print(json.dumps(info) if args.json else report.format_status(info))
    return 1 if info.get("damaged") else 0


def cmd_verify(args) -> int:
    from .store.damage import verify
    from .store import suite as suite_store

    members = suite_store.datasets(args.store)
    if members is not None:          # a suite: each data set's cube verified
        checked = {label: verify(suite_store.member(args.store, label)) for label in members}
        print(json.dumps({label: f.to_json() for label, f in checked.items()}) if args.json
              else "\n".join(f"== {visible(label)} ==\n{f.text()}" for label, f in checked.items()))
        return 0 if all(f.ok for f in checked.values()) else 1
    found = verify(args.store)
    print(json.dumps(found.to_json()) if args.json else found.text())
    return 0 if found.ok else 1


def _parse_lambdas(text: str | None):
    if text is None:
        return None
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"--lambdas: {text!r} is not a comma-separated list of numbers") from None


def _estimator_names(text: str) -> list[str]:
    """``--estimators kfold,corrected_kfold``: the names, each known (InputError otherwise)."""
    from .estimators import lookup

    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise InputError(f"--estimators: {text!r}; give comma-separated estimator names, "
                         "e.g. --estimators kfold,corrected_kfold")
    for name in names:
        lookup(name, where="--estimators")
    return list(dict.fromkeys(names))


def _split_params(text: str) -> list[str]:
    """``--compare`` items split on commas outside parentheses: "lasso(C=1, l1=0.5),1"."""
    items, depth, current = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += ch
    items.append(current.strip())
    return [i for i in items if i]


def _parse_set(items: list[str] | None) -> dict[str, dict]:
    """``--set ESTIMATOR.OPTION=VALUE`` (repeatable) -> {estimator: {option: value}}; the value
    is read as YAML (``0.05``, ``[0, 1, 10]``, ``"ridge(alpha=1)"``). A dotted estimator path
    splits at its last dot."""
    import yaml

    out: dict[str, dict] = {}
    for item in items or []:
        key, eq, value = item.partition("=")
        name, dot, option = key.strip().rpartition(".")
        if not eq or not dot or not name or not option:
            raise InputError(f"--set: {item!r} is not ESTIMATOR.OPTION=VALUE, "
                             "e.g. stability_nested.lambdas=[0,1,10]")
        try:
            out.setdefault(name, {})[option] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise InputError(f"--set: {item!r}: the value does not parse as YAML") from None
    return out


def _run_suite(suite, args) -> int:
    """``cvflow run`` of a suite: each data set's run, then the suite's report."""
    from .execution.suite_run import run_suite
    from .report import suite as suite_report
    from .trust import workflow_code

    results = run_suite(suite, store=args.store, cluster=args.cluster, workers=args.workers,
                        overwrite=args.overwrite, dashboard_port=args.dashboard_port,
                        progress=Progress(summary=False), tls=args.tls or None,
                        cluster_options=args.cluster_option)
    for label, result in results.items():
        print(visible(f"== {label} =="))
        print("\n".join(summary_lines(result)))
    failed = [label for label, r in results.items() if r.fits_executed and r.failed == r.fits_executed]
    if failed:
        print(visible(f"cvflow: error: every fit failed on {', '.join(failed)} (cvflow report "
                      f"{next(iter(results.values())).store.rsplit('/', 1)[0]}/{failed[0]} lists why)"),
              file=sys.stderr)
        return 1
    store = next(iter(results.values())).store.rsplit("/", 1)[0]
    code = [c for wf in suite.workflows.values() for c in workflow_code(wf.config)]
    print(visible(suite_report.text(suite_report.compute(store, trust_code=code)), multiline=True))
    return 0


def _report_suite(args) -> int:
    """``cvflow report`` of a suite's store: the comparison first, then each data set."""
    from .report import suite as suite_report

    losses = args.loss or [None]
    if args.html and len(losses) > 1:
        raise InputError(f"--html: the page draws one loss, got {len(losses)} (--loss "
                         f"{' --loss '.join(losses)}); give one --loss with --html")
    estimators = _estimator_names(args.estimators) if args.estimators is not None else None
    overrides = _overrides(args, set(estimators) if estimators else None)
    results = {loss: suite_report.compute(args.store, loss=loss, estimate=args.suite_estimate,
                                          estimators=estimators, overrides=overrides,
                                          trust_code=args.trust, all_params=args.all_params)
               for loss in losses}
    if len(losses) > 1:            # one suite report per loss, as a cube's report with --loss twice
        if args.json:
            print(json.dumps({loss: suite_report.to_json(r) for loss, r in results.items()}))
        else:
            print("\n\n".join(visible(f"== loss {loss} ==\n{suite_report.text(r)}", multiline=True)
                              for loss, r in results.items()))
        return 0
    result = results[losses[0]]
    if args.html:
        written = suite_report.write_html(result, args.html)
    if args.json:
        print(json.dumps(suite_report.to_json(result)))
    elif args.html:
        print(visible(f"{args.store}: HTML report written to {written}"))
    else:
        print(visible(suite_report.text(result), multiline=True))
    return 0


def cmd_report(args) -> int:
    if args.cluster is None:
        return _report(args)
    _quiet_distributed()
    from .execution.profiles import decide
    from .execution.schedulers import connect, first_worker, glibc_malloc

    # the route is checked before the store is opened (a bad --cluster: one line, exit 2); the
    # reducers compute on the workers of the client connect makes current
    # (cvflow.estimators.memory.active_client), once one is connected (within a deadline)
    # DESIGN CHOICE: the dashboard of a cluster started for one report is on a free port
    # (--dashboard-port to name one): the local profile's 8787 is often held by a running study
    port = 0 if args.dashboard_port is None else args.dashboard_port
    route = decide(args.cluster, workers=args.workers, options=args.cluster_option,
                   dashboard_port=port)
    # its workers keep glibc's malloc thresholds (schedulers.glibc_malloc: ~2x faster tasks)
    with glibc_malloc(), connect(route, store=args.store) as client:
        first_worker(client)
        return _report(args)


def _overrides(args, requested: set[str] | None) -> dict:
    """The estimators' option overrides of ``cvflow report``: ``--set``, then the shorthands
    ``--lambdas`` and ``--compare`` for the estimators they concern among ``requested`` (None:
    all of them; an override of an estimator a cube does not compute is not used)."""
    overrides = _parse_set(args.set)
    shorthands = {}
    lambdas = _parse_lambdas(args.lambdas)
    if lambdas is not None:
        shorthands.update({n: {"lambdas": lambdas} for n in ("stability", "stability_nested")})
    if args.compare:
        # the same pair for both subset-design tests; a/b from the workflow give way to it
        pair = {"compare": _split_params(args.compare), "a": None, "b": None}
        shorthands.update({n: dict(pair) for n in ("ustat", "nadeau_bengio")})
    for name, options in shorthands.items():
        if requested is None or name in requested:
            overrides[name] = {**options, **overrides.get(name, {})}
    return overrides


def _write_json(value) -> None:
    """``print(json.dumps(value))``, its arrays written a slab at a time (a 10^6-fit cube's
    per-fold scores are 23 MB of text: not held whole, nor as a million Python floats)."""
    from .report import json_stream

    json_stream.write(value, sys.stdout)
    sys.stdout.write("\n")


def _decode_threads(store: str) -> None:
    """zarr's decoding pool as big as the report's threads (Dask's, one a core), unless zarr's
    ``threading.max_workers`` is set (``ZARR_THREADING__MAX_WORKERS``): else asyncio's default
    pool (cores + 4 threads) decodes the pass's shards, each thread with its own malloc arena.
    And a store on a local file system is read one object at a time by each read (zarr's
    ``async.concurrency`` 1, unless set: ``ZARR_ASYNC__CONCURRENCY``), as the floor reads it.

    DESIGN CHOICE: measured on the 10^6-fit cube (2 cores, load ~7): peak RSS 0.26 GB instead of
    0.31 GB and ~10% less CPU for the same wall; one thread (the floor's) 0.24 GB but decodes
    on one core. Set before the store is opened: zarr sizes its pool on its first read.
    One object at a time: a read of the pass's block (250 params x 3 shards of the 10^6-fit
    cube, 7.6 MB) held 27 MB of zarr's buffers with its 3 objects decoded at once, 15 MB one
    at a time, for the same CPU; the report's Dask threads still read in parallel. An object
    store keeps zarr's concurrency (its latency is hidden by reading several objects at once).
    """
    import dask
    import zarr

    if zarr.config.get("threading.max_workers", None) is None:
        threads = int(dask.config.get("num_workers", None) or os.cpu_count() or 1)
        zarr.config.set({"threading.max_workers": threads})
    if not is_url(str(store)) and "ZARR_ASYNC__CONCURRENCY" not in os.environ:
        zarr.config.set({"async.concurrency": 1})


# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8


def _report_malloc() -> None:
    """glibc's malloc for the report program (no-op elsewhere): one arena for all its threads,
    blocks under 32 MiB from that arena, and its free top kept up to 64 MiB.

    DESIGN CHOICE: the report's threads (Dask's, zarr's decoding pool and event loop) each
    took an arena of their own, and each arena keeps the MB-sized blocks freed in it (a
    block decoded in one thread is freed in another's): the pairs 10^6-fit cube's seed report
    peaked at 0.29 GB RSS with them, 0.24 GB with one arena (Python's small objects do not use
    malloc's arenas). One arena alone gave its free top back at every block and faulted it in
    again (the plain 10^6-fit cube's seed three: 0.4-0.5 M page faults, 1.2-1.4 s of system
    CPU); with the thresholds fixed, 41 k faults and 0.4 s, peak +3 MB (2 runs each, load
    ~3). Set before the threads start (glibc fixes the arenas' limit when a thread first
    asks for one). Distributed's nannies' MALLOC_TRIM_THRESHOLD_=65536 is the opposite
    setting (every MB-sized block a fresh mmap: schedulers.glibc_malloc).
    """
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):        # not glibc: its own allocator, left alone
        return
    mallopt(M_ARENA_MAX, 1)
    mallopt(M_MMAP_THRESHOLD, 32 * 2**20)
    mallopt(M_TRIM_THRESHOLD, 64 * 2**20)


def _report(args) -> int:
    if not args.program:
        return _report_body(args)
    _report_malloc()
    # DESIGN CHOICE: the program's report (not main() in-process: its caller's heap is its own)
    # collects no garbage while it imports its modules (xarray, pandas, dask.array: ~0.5 M
    # objects), then freezes them out of the collector's passes: each full collection during
    # the pass (a Python thread holding the GIL) and the JSON's 10^6 numbers scanned all of
    # them again. Measured on the 10^6-fit cube: 4 full collections, 0.3-0.7 s of GIL-held
    # time (load 15-18), as much as the whole JSON; docs/benchmarks.md (issue 40).
    gc.disable()
    try:
        _report_dask_array()
        return _report_body(args)
    finally:
        gc.enable()


# the optional scipy modules dask.array imports at its own import (its fft wrappers of
# scipy.fftpack, scipy.sparse matrices as chunk types), none of which a report's cube uses
DASK_ARRAY_OPTIONAL = ("scipy.fftpack", "scipy.sparse")


def _report_dask_array() -> None:
    """The report program's ``import dask.array`` (xarray imports it to open the cube) without
    its optional scipy modules: dask.array takes each as absent (its ``ImportError`` branch),
    and they import as usual afterwards for whoever asks.

    DESIGN CHOICE: the report's cube is chunked numpy; scipy.fftpack (with scipy.fft and
    scipy.special) and scipy.sparse (with numpy.f2py and numpy.testing) cost the report
    0.18 s of CPU at start-up, before the pass (load ~17; 0.40 -> 0.22 s for dask.array),
    and nothing after it: its losses import scipy.special only for the Poisson deviance. Only
    in the program (a process of its own), not main() in-process: a caller's dask.array keeps
    its sparse chunk types."""
    if "dask.array" in sys.modules or any(name in sys.modules for name in DASK_ARRAY_OPTIONAL):
        return
    sys.modules.update(dict.fromkeys(DASK_ARRAY_OPTIONAL))     # None: "not importable"
    try:
        import dask.array  # noqa: F401
    except ImportError:
        pass                                 # the report says what is missing, as without this
    finally:
        for name in DASK_ARRAY_OPTIONAL:
            del sys.modules[name]


def _settled(args) -> None:
    """The modules the report imports are imported: in the program, freeze them (and the
    opened cube) out of the garbage collector's passes, and collect again (see _report)."""
    if args.program:
        gc.freeze()
        gc.enable()


def _report_body(args) -> int:
    from .report import results as report
    from .store.cube import open_cube
    from .store import suite as suite_store

    _decode_threads(args.store)

    if args.html:
        from .execution.preflight import check_output_file

        check_output_file(args.html, "--html")
    if suite_store.datasets(args.store) is not None:
        _settled(args)
        return _report_suite(args)
    losses = args.loss or [None]
    if args.html and len(losses) > 1:
        raise InputError(f"--html: the page draws one loss, got {len(losses)} (--loss "
                         f"{' --loss '.join(losses)}); give one --loss with --html")
    cube = report.workflow_view(open_cube(args.store), all_params=args.all_params)
    _settled(args)
    estimators = _estimator_names(args.estimators) if args.estimators is not None else None
    requested = set(estimators) if estimators else \
        {name for name, _ in report.requested_estimators(cube)}
    overrides = _overrides(args, requested)
    if len(losses) > 1:
        several = report.compute_losses(cube, losses, estimators, overrides=overrides,
                                        trust_code=args.trust)
        if args.json:
            _write_json({label: report.to_json(r, cube, arrays=True)
                         for label, r in several.items()})
        else:
            print("\n\n".join(f"== loss {visible(label)} ==\n{report.text(cube, r)}"
                              for label, r in several.items()))
        return 0
    results = report.compute(cube, estimators, loss=losses[0], overrides=overrides,
                             trust_code=args.trust)
    if args.html:
        from .report.html import write_html

        written = write_html(cube, results, args.html)
    if args.json:
        _write_json(report.to_json(results, cube, arrays=True))
    elif args.html:
        # the page holds the report: one line says where (the text report is the command without --html)
        print(visible(f"{args.store}: HTML report written to {written}"))
    else:
        print(report.text(cube, results))
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's one-line errors (exit 2), its subcommands alike; options are
    spelled out (no abbreviations: `--ov` was taken as `--overwrite` and refitted a store)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"cvflow: error: {self.prog.removeprefix('cvflow ')}: {message} "
                     f"(see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="cvflow", description="Cross-validation studies on Dask.")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run a workflow (fits only what is not done)")
    r.add_argument("workflow")
    r.add_argument("--store", help="Zarr store: a path or a URL such as s3://bucket/study.zarr "
                   "(default: <workflow name>.zarr)")
    r.add_argument("--cluster", help="auto | threads | local | slurm | FILE.yaml | tcp://ADDR "
                        "(default: auto: worker processes (local) for learners' own fit code; Dask's "
                        "scheduler in this process (threads) for a short study of cvflow's path kernels)")
    r.add_argument("--workers", type=int, help="number of local workers")
    r.add_argument("--dashboard-port", type=int, help="dashboard port (default 8787; 0 = any)")
    r.add_argument("--tls", action="store_true",
                   help="Dask TLS with temporary certificates (default: the profile's tls)")
    r.add_argument("--cluster-option", action="append", metavar="KEY=VALUE",
                   help="override a cluster profile key, e.g. jobqueue.queue=short or "
                        "adaptive.maximum=8 (repeatable; also CVFLOW_CLUSTER__KEY=VALUE)")
    r.add_argument("--overwrite", action="store_true",
                   help="replace a store made by another workflow")
    r.set_defaults(func=cmd_run)

    s = sub.add_parser("status", help="fits done / total / failed of a store")
    s.add_argument("store")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_status)

    rep = sub.add_parser("report", help="estimates from a store, without refitting")
    rep.add_argument("store")
    rep.add_argument("--loss", action="append",
                     help="loss or metric to apply (default: the workflow's), e.g. "
                     "log_loss, pinball:0.9, roc_auc or mymodule.myloss; repeat it for several "
                     "(--loss zero_one --loss roc_auc): a report per loss, the JSON keyed by loss. "
                     "An estimator that does not take a metric says why in one line")
    rep.add_argument("--all-params", action="store_true",
                     help="report every param of an extended store, those the workflow no "
                          "longer lists included (default: the workflow's params only)")
    rep.add_argument("--estimators", metavar="NAME,NAME",
                     help="the estimators to report, comma-separated (default: the workflow's), "
                          "e.g. kfold,corrected_kfold; a name the workflow set options for keeps them")
    rep.add_argument("--trust", action="store_true",
                     help="import the code the store names (user estimators, a user loss); "
                          "without it a store is data and they are skipped")
    rep.add_argument("--json", action="store_true",
                     help="one JSON object, a key per estimator (and 'racing' for a raced study)")
    rep.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
    rep.add_argument("--suite-estimate", default="auto",
                     choices=("auto", "nested_cv", "kfold", "corrected_kfold"),
                     help="a suite's store: each learner's number per data set (auto: nested_cv "
                          "when the store has its splits, else the K-fold-selected K-fold estimate)")
    rep.add_argument("--set", action="append", metavar="ESTIMATOR.OPTION=VALUE",
                     help="override an estimator's option, the value read as YAML, e.g. "
                          "stability_nested.lambdas=[0,1,10] or bates_ncv.alpha=0.05 (repeatable)")
    rep.add_argument("--lambdas", help="comma-separated λ grid for stability and stability_nested "
                     "(shorthand for --set stability_nested.lambdas=[...])")
    rep.add_argument("--compare", help="the params ustat / nadeau_bengio compare, comma-separated "
                     "(indices or learner(key=value)); one param gives its error alone")
    rep.add_argument("--cluster", help="reduce on a Dask cluster's workers, each reading its own "
                     "chunks of the store: local | slurm | FILE.yaml | tcp://ADDR (as cvflow run; "
                     "auto is local here; default: in this process)")
    rep.add_argument("--workers", type=int, help="number of local workers (or SLURM jobs)")
    rep.add_argument("--dashboard-port", type=int,
                     help="the --cluster's dashboard port (default: any free one)")
    rep.add_argument("--cluster-option", action="append", metavar="KEY=VALUE",
                     help="override a cluster profile key, as cvflow run's (repeatable)")
    rep.set_defaults(func=cmd_report)

    ver = sub.add_parser("verify", help="read every chunk of a store; list what is damaged "
                         "(exit 1 if anything is)")
    ver.add_argument("store")
    ver.add_argument("--json", action="store_true")
    ver.set_defaults(func=cmd_verify)

    v = sub.add_parser("validate", help="check a workflow without fitting")
    v.add_argument("workflow")
    v.set_defaults(func=cmd_validate)
    return p


class _VisibleFormatter(logging.Formatter):
    """Log records for a terminal: a store's strings in a message cannot control it."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record), multiline=True)     # a traceback keeps its lines


def main(argv: list[str] | None = None, *, program: bool = False) -> int:
    # DESIGN CHOICE: every line the CLI writes that may quote a store (errors, warnings, log
    # records, the texts of report, status, verify and run) is shown by cvflow.terminal.visible:
    # a store is data, and its strings must not control the reader's terminal (docs/guide/trust.md).
    # JSON output needs nothing: json.dumps escapes every control character.
    handler = logging.StreamHandler()
    handler.setFormatter(_VisibleFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    # cvflow's deprecations (e.g. a learner's `estimator:` key) reach the user as one line
    for noisy in ("distributed", "bokeh", "tornado"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    args = build_parser().parse_args(argv)
    args.program = program          # cvflow's own process (console), not a caller's
    # warnings as one line while the command runs; the caller's settings come back after it
    # (main() is also called in-process, e.g. from a notebook or a test)
    formatwarning = warnings.formatwarning
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("default", category=DeprecationWarning, module=r"cvflow\.")
            warnings.formatwarning = lambda message, category, *_, **__: \
                f"cvflow: {category.__name__}: {visible(message)}\n"
            return args.func(args)
    except BrokenPipeError:              # `cvflow report ... | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except InputError as exc:
        print(f"cvflow: error: {visible(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        _interrupted(exc, sys.argv[1:] if argv is None else argv)
        return 130
    except Exception as exc:  # noqa: BLE001 - run-time failures: one line, exit 1
        logging.getLogger(__name__).debug("run-time failure", exc_info=True)
        print(f"cvflow: error: {type(exc).__name__}: {visible(exc)}", file=sys.stderr)
        return 1
    finally:
        warnings.formatwarning = formatwarning


def _interrupted(exc: KeyboardInterrupt, argv: list[str]) -> None:
    """Ctrl-C, SIGTERM or SIGHUP stopped the command: the worker processes closed now (not at
    exit, where distributed's callbacks can no longer run), then one line: what was kept and
    the command that resumes."""
    from .execution import interrupts, schedulers

    with interrupts.deferred():         # a second Ctrl-C does not cut the close short
        schedulers.close_warm()
    again = f"cvflow {shlex.join(argv)}"
    line = (f"cvflow: interrupted: {exc.what_was_kept()}; resume with: {again}"
            if isinstance(exc, RunInterrupted) else f"cvflow: interrupted; run it again: {again}")
    with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
        print(visible(line), file=sys.stderr, flush=True)


def console() -> None:
    """The ``cvflow`` program (the console script and ``python -m cvflow``): :func:`main`, then
    the process ends with its exit code."""
    code = main(program=True)
    # DESIGN CHOICE: the interpreter's teardown would run the garbage collector over everything
    # the command imported (scikit-learn, xarray, dask: ~200 000 objects), again and again while
    # it clears the modules: 0.3-1 s of a `cvflow run` here. Frozen objects are left out of those
    # passes; atexit handlers and finalisers run as before, and the outputs are written already.
    # Only here: main() called in-process (a notebook, a test) must not freeze its caller's heap.
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    console()

"""Connecting to a Dask cluster: the embedded LocalCluster, SLURM, a profile file, or an address.

Every route is a Dask scheduler. By default (``cluster=None`` or ``"auto"``) a run chooses
where to fit (:func:`choose`): Dask's scheduler in this process with thread workers (profile
``threads``) when only cvflow's own path kernels fit and processes would not pay, else a
``LocalCluster`` of worker processes started by distributed's nannies (profile ``local``), where
a fit that kills its process or outlives ``execution.fit_timeout`` costs only itself.

A *profile* (:mod:`cvflow.execution.profiles`) says which cluster to start and how::

    with connect("slurm", options=["jobqueue.queue=short", "adaptive.maximum=8"]) as client:
        print(client.dashboard_link)
"""
from __future__ import annotations

import atexit
import contextlib
import copy
import json
import logging
import os
import sys
import threading
import time
import types
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping, Sequence

from ..errors import InputError
from .. import config
from . import interrupts, lost_workers, processes
from .worker_session import spawning_loop
from .dask_logs import quiet_dask
from .jobqueue import import_jobqueue, slurm_kwargs
from .lost_workers import replace_lost_workers
from .profiles import (AUTO, REMOVED, THREADS, Route, decide, load_profile, cluster_name,
                       store_warning)
from .threaded import ThreadedClient

if TYPE_CHECKING:
    import distributed

log = logging.getLogger(__name__)


# --- connecting ---------------------------------------------------------------------------------

def _security(tls: bool):
    if not tls:
        return None
    from distributed.security import Security

    # DESIGN CHOICE: temporary self-signed certificates live in memory for the scheduler and the
    # client; dask-jobqueue writes the worker copies to `shared_temp_directory` for the jobs and
    # deletes them when the cluster closes.
    try:
        return Security.temporary()
    except ImportError:
        raise InputError("TLS (the cluster profile's tls: true, or --tls) needs the cryptography "
                         "package: pip install cryptography") from None


def choose(cluster: str | os.PathLike | None, *, seconds: float, workers: int | None = None,
           dashboard: bool = False, in_process_safe: bool = False, fit_timeout=None,
           gil_share: float = 1.0) -> tuple[str, str]:
    """Where a run fits: ``(profile, reason)``; only ``None`` / ``"auto"`` is a choice.

    DESIGN CHOICE: a default must never make an everyday study slower than the GridSearchCV it
    replaces (docs/guide/execution.md), and GridSearchCV(n_jobs=None) fits in the caller's process.
    So ``auto`` stays in this process (``threads``: Dask's scheduler with thread workers,
    nothing to start) unless worker processes save more than they cost: ``seconds`` (the timed
    estimate of the study's fits on one thread, of which ``gil_share`` hold the GIL) times
    ``1 - 1/workers``, against config ``cvflow.cluster.auto.process_start_seconds`` when no
    process cluster runs yet, or ``warm_seconds`` when this session's warm one
    (:func:`warm_client`) is up. Crash isolation is there for whoever asks: ``fit_timeout``
    always picks processes (a fit in a thread cannot be stopped), and ``--cluster local``
    forces them; on ``threads`` a learner's fit that ends its process ends this one, as under
    GridSearchCV. ``in_process_safe`` (only cvflow's path kernels fit) only words the reason.
    Anything the user named (``local``, ``threads``, ``slurm``, a file, an address) is used as given.

    >>> choose("auto", seconds=0.01, workers=2, in_process_safe=True)[0]
    'threads'
    >>> choose("auto", seconds=0.01, workers=2)[0]
    'threads'
    >>> choose("auto", seconds=600.0, workers=2)[0]
    'local'
    >>> choose("auto", seconds=0.01, workers=2, fit_timeout=5)[0]
    'local'
    """
    name = cluster_name(cluster)
    if name != AUTO:
        name = REMOVED.get(name, name)
        return name, f"{name} (as asked)"
    warm = warm_alive()
    start = _start_seconds(warm)
    n = _local_workers(workers)
    saved = seconds * gil_share * (1 - 1 / n)
    fit = f"~{seconds:.2g} s of fitting" + ("" if gil_share >= 1 else
                                            f", {gil_share:.0%} of it holding the GIL")
    kept = "kept warm for this session" if warm else "started now, kept warm for this session"
    if fit_timeout:
        return "local", (f"local: {n} worker processes, {kept} ({fit}; execution.fit_timeout "
                         "needs processes: a fit in a thread cannot be stopped)")
    if n > 1 and saved > start:
        return "local", (f"local: {n} worker processes, {kept} ({fit}; processes save up to "
                         f"{saved:.2g} s, more than their {start:.2g} s "
                         f"{'reuse' if warm else 'start'}; a fit that crashes its process costs "
                         "only itself; --cluster threads to stay in this process)")
    code = "cvflow's own path kernels" if in_process_safe else "the learners' own fit"
    return "threads", (f"threads: Dask's scheduler in this process ({fit} in {code}; worker "
                       f"processes would save at most {saved:.2g} s, less than their {start:.2g} s "
                       f"{'reuse' if warm else 'start'}; --cluster local isolates each fit in "
                       "worker processes)")


def processes_pay_above(*, workers: int | None = None, gil_share: float = 1.0) -> float:
    """The seconds of fitting (on one thread) above which ``auto`` picks worker processes
    (:func:`choose`, without a ``fit_timeout``); ``inf`` when they never pay (one worker, no
    fit holding the GIL)."""
    n = _local_workers(workers)
    gain = gil_share * (1 - 1 / n)
    return _start_seconds(warm_alive()) / gain if gain > 0 else float("inf")


def _start_seconds(warm: bool) -> float:
    return float(config.get("cvflow.cluster.auto.warm_seconds" if warm
                            else "cvflow.cluster.auto.process_start_seconds")) * _busy()


def _local_workers(workers: int | None) -> int:
    return workers or load_profile("local").get("workers") or os.cpu_count() or 1


def _busy() -> float:
    """How much slower than on an idle machine a process starts now: the load average over
    the CPU count, at least 1 (1 where the platform has no load average)."""
    # DESIGN CHOICE: process_start_seconds was measured on idle cores, while `seconds` is timed
    # now: at load 6 on 2 cores both the fits and a process start take ~3x longer (measured:
    # LocalCluster start 2 s idle, 6-9 s at load 6-8), so the start is scaled as the fits were.
    try:
        return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    except (AttributeError, OSError):
        return 1.0


@contextlib.contextmanager
def clean_main() -> Iterator[None]:
    """While it is open, ``__main__`` is an empty module, so process workers started (or
    restarted) meanwhile do not re-run the caller's script."""
    # DESIGN CHOICE: multiprocessing's spawn, distributed's start method, re-runs the caller's
    # __main__ in every new worker process: a script without an `if __name__ == "__main__":`
    # guard would start a cluster inside each worker ("Nanny failed to start"), and `python -`
    # fails on the file "<stdin>". Workers never need the script: task bodies are module-level
    # cvflow functions, and distributed ships objects defined in __main__ by value
    # (cloudpickle). So for the lifetime of cvflow's process cluster, __main__ is swapped for
    # an empty module and restored afterwards. fork would avoid the re-run but is unsafe with
    # the client's threads; forkserver re-runs __main__ as spawn does.
    # the runs of a suite open it in threads of their own, and close it in any order: the
    # first swaps, the last restores
    with _MAIN_LOCK:
        if not _MAIN["open"]:
            _MAIN["saved"] = sys.modules.get("__main__")
            sys.modules["__main__"] = types.ModuleType("__main__")
        _MAIN["open"] += 1
    try:
        yield
    finally:
        with _MAIN_LOCK:
            _MAIN["open"] -= 1
            if not _MAIN["open"] and _MAIN["saved"] is not None:
                sys.modules["__main__"] = _MAIN["saved"]


_MAIN_LOCK = threading.Lock()
_MAIN: dict = {"open": 0, "saved": None}


def _threads(prof: dict):
    from distributed import LocalCluster

    quiet_dask()
    host = prof.get("host") or "127.0.0.1"
    port = prof.get("dashboard_port")
    # DESIGN CHOICE: a real scheduler in this process (threads, no worker processes), started in
    # ~50 ms: the engine submits the same tasks and writes the same store as on process workers,
    # and a dashboard is served when a port is asked for. Scheduler, worker and client talk
    # in memory (inproc://), so `tls` has nothing to protect and is ignored.
    # The scheduler's HTTP server (health, metrics) listens anyway: on loopback, any free port.
    return LocalCluster(
        n_workers=1, threads_per_worker=int(prof.get("workers") or os.cpu_count() or 1),
        processes=False, dashboard_address=f"{host}:{0 if port is None else port}",
        scheduler_kwargs={"dashboard": port is not None}, silence_logs=logging.CRITICAL,
    )


def serves_dashboard(cluster: str | os.PathLike | None, dashboard_port: int | None = None,
                     options=None) -> bool:
    """Whether connecting to ``cluster`` gives a dashboard (a port given or in its profile);
    a run reads its decided route's (:attr:`cvflow.execution.profiles.Route.dashboard`)."""
    return decide(cluster, dashboard_port=dashboard_port, options=options).dashboard


def quiet_port(seconds: float) -> int | None:
    """The dashboard port of a study ``auto`` sends to ``local`` or ``threads`` when the run
    names none: no dashboard for a short study (its web server and plotting library cost more
    than such a study takes), a free loopback port (0) for one long enough to watch (config
    ``cvflow.cluster.auto.dashboard_after_seconds`` of estimated fitting); see
    :meth:`cvflow.execution.profiles.Route.pick`."""
    return 0 if seconds >= float(config.get("cvflow.cluster.auto.dashboard_after_seconds")) \
        else None


# DESIGN CHOICE: the worker processes of a cluster started to reduce a cube (cvflow report
# --cluster) keep glibc's own malloc thresholds. distributed's nannies set
# MALLOC_TRIM_THRESHOLD_=65536 (config distributed.nanny.pre-spawn-environ), and setting it
# also fixes glibc's mmap threshold at 128 KiB: each MB-sized temporary of the one pass is then a
# fresh mmap, its page faults and a munmap. The same pass over the 10^6-fit cube took 16-17 s in
# such a worker against 10-11 s in one without it (one worker, load 6-9), and 20-26 s against
# 10-13 s in a plain process given that variable (issue 40). A run's fitting workers keep
# distributed's setting (their memory is given back to the machine as the fits go).
UNTRIMMED = "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"


def glibc_malloc():
    """While open, the nannies started spawn their workers without MALLOC_TRIM_THRESHOLD_
    (a variable of the caller's own environment still reaches them)."""
    import dask.config

    return dask.config.set({UNTRIMMED: None})


def _local(prof: dict):
    from distributed import LocalCluster

    quiet_dask()
    security = _security(bool(prof.get("tls")))
    host = prof.get("host") or "127.0.0.1"
    port = prof.get("dashboard_port")
    n = prof.get("workers") or os.cpu_count() or 1
    return LocalCluster(
        loop=spawning_loop(),     # its workers start with the terminal's signals blocked
        n_workers=n, threads_per_worker=int(prof.get("threads_per_worker") or 1), processes=True,
        host=host, dashboard_address=None if port is None else f"{host}:{port}",
        # no dashboard: the scheduler's HTTP server (health, metrics) still starts, on 8787
        # unless told; a free port, so that two runs never contend for it
        scheduler_kwargs=None if port is not None else {"dashboard_address": f"{host}:0"},
        memory_limit=prof.get("memory_limit", "auto"),
        security=security, protocol="tls://" if security else None,
        silence_logs=logging.CRITICAL, **_own_session_preload(),
    )


WORKER_SESSION = "cvflow.execution.worker_session"


def _own_session_preload() -> dict:
    """The nannies' ``preload`` and ``preload_argv``: the config's, then
    :mod:`cvflow.execution.worker_session` (each worker process in a session of its own, out of
    reach of the terminal's Ctrl-C and SIGHUP). Given to every nanny, those a scale-up starts
    later too."""
    import dask.config

    preload = dask.config.get("distributed.worker.preload") or []
    preload = [preload] if isinstance(preload, str) else list(preload)
    argv = dask.config.get("distributed.worker.preload-argv") or []
    if argv and isinstance(argv[0], str):      # one argv for every preload
        argv = [list(argv)] * len(preload)
    argv = [list(a) for a in argv] or [[] for _ in preload]
    return {"preload": [*preload, WORKER_SESSION], "preload_argv": [*argv, []]}


# --- the session's warm process cluster ------------------------------------------------------

# DESIGN CHOICE: worker processes cost seconds to start and stop (a TLS LocalCluster of 2
# workers: ~2 s to start, ~2.4 s to close on 2 loaded cores; measured in notes/route-design.md),
# more than most studies' fits; loky's reusable executor, which GridSearchCV(n_jobs=2) uses,
# pays that once per session. So the local cluster a run starts (`keep`, :func:`connect`) is
# kept for the rest of this Python session and reused by every later run asking the same
# profile in the same environment (workers inherit it when they start: credentials, endpoints):
# one per process, checked before each reuse (its workers connected within
# WARM_CHECK_SECONDS, lost ones replaced within WARM_REVIVE_SECONDS, else started anew), and
# closed when the interpreter exits (atexit) or by close_warm(). A run asking another local
# profile gets a cluster of its own, closed after it, as before.
WARM_CHECK_SECONDS = 10.0
WARM_REVIVE_SECONDS = 60.0
WARM_CLOSE_SECONDS = 10.0
_WARM: dict | None = None   # {"key", "cluster", "client", "token", "environment"}
_WARM_LOCK = threading.Lock()
_AT_EXIT = False


def _warm_key(prof: dict) -> str:
    """What makes two local profiles one cluster: all but its name and dashboard port."""
    return json.dumps({k: v for k, v in prof.items() if k not in ("name", "dashboard_port")},
                      sort_keys=True, default=repr)


# pytest sets the first for every test; distributed's nannies set the second (the cluster's
# token, cvflow.execution.processes) before each spawn: nothing a worker does depends on them
_VOLATILE_ENVIRONMENT = ("PYTEST_CURRENT_TEST", processes.ENV)


def _environment() -> dict[str, str]:
    """The environment worker processes started now would inherit (credentials, endpoints,
    threading limits): workers kept from an earlier run that saw another are not reused."""
    return {k: v for k, v in os.environ.items() if k not in _VOLATILE_ENVIRONMENT}


def warm_alive() -> bool:
    """Whether this session's warm process cluster (:func:`warm_client`) is up."""
    w = _WARM
    if w is None:
        return False
    from distributed.core import Status

    return w["client"].status == "running" and w["cluster"].status == Status.running


def _healthy(w: dict) -> bool:
    """Whether the warm cluster answers with all its workers (lost ones replaced first)."""
    if not warm_alive():
        return False
    n = len(w["cluster"].worker_spec)
    try:
        w["client"].wait_for_workers(n, timeout=WARM_CHECK_SECONDS)
        return True
    except Exception:  # noqa: BLE001 - a timeout, or a scheduler that is gone
        pass
    try:
        if replace_lost_workers(w["client"]):
            w["client"].wait_for_workers(n, timeout=WARM_REVIVE_SECONDS)
            return True
    except Exception as exc:  # noqa: BLE001
        log.debug("reviving the warm cluster's workers: %s", exc)
    return False


def close_warm() -> None:
    """Close this session's warm process cluster, if any (each step within its deadline)."""
    global _WARM
    w, _WARM = _WARM, None
    if w is None:
        return
    for closing in (w["client"].close, w["cluster"].close):
        try:
            closing(timeout=WARM_CLOSE_SECONDS)
        except Exception as exc:  # noqa: BLE001 - at exit, or a cluster already gone
            log.debug("closing the warm cluster: %s", exc)
    processes.end(w["token"])


def warm_client(prof: dict):
    """The client of this session's warm local cluster for ``prof`` (a resolved ``local``
    profile), started now if none runs or the one running does not answer; None when a
    cluster of another local profile is warm (the caller then starts one of its own)."""
    global _WARM, _AT_EXIT
    from distributed import Client

    with _WARM_LOCK:
        key = _warm_key(prof)
        w = _WARM
        if w is not None and w["key"] != key:
            return None
        if w is not None and w["environment"] != _environment():
            log.info("the environment changed since the worker processes were started; "
                     "starting new ones")
            close_warm()
            w = None
        if w is not None and not _healthy(w):
            log.warning("the worker processes kept from an earlier run do not answer; "
                        "starting new ones")
            close_warm()
            w = None
        if w is None:
            # kept: it serves a dashboard (a free loopback port unless the profile names one);
            # a run links to it only when asked or long enough to watch (quiet_port)
            port = prof.get("dashboard_port")
            with clean_main(), processes.tagged() as token:
                started, client = _started(
                    _local, {**prof, "dashboard_port": 0 if port is None else port},
                    lambda cluster: Client(cluster, set_as_default=False))
            _WARM = w = {"key": key, "cluster": started, "client": client, "token": token,
                         "environment": _environment()}
            if not _AT_EXIT:
                atexit.register(close_warm)
                _AT_EXIT = True
        return w["client"]


def first_worker(client, seconds: float | None = None) -> None:
    """Return when ``client``'s cluster has a worker connected (at once on the threads route,
    whose tasks run in this process); RuntimeError after ``seconds`` (config
    ``cvflow.execution.no-worker-seconds``) without one: a SLURM queue that never starts the
    jobs, a scheduler whose workers are gone."""
    if not hasattr(client, "wait_for_workers"):
        return
    if seconds is None:
        seconds = float(config.get("cvflow.execution.no-worker-seconds"))
    try:
        client.wait_for_workers(1, timeout=seconds)
    except TimeoutError:
        raise RuntimeError(f"cluster {client.scheduler.address}: no worker connected within "
                           f"{seconds:g} s (config cvflow.execution.no-worker-seconds)") from None


def _started(factory, prof: dict, connect):
    """``(cluster, client)``: ``factory(prof)`` and ``connect(cluster)``, never cut in the
    middle by Ctrl-C, SIGTERM or SIGHUP (a cluster cut while it starts can no longer be
    closed: its workers were left behind); one that came meanwhile closes both, then is raised."""
    # DESIGN CHOICE: the dashboard's gate (http.cookies, ~1.5 ms) is imported where a Dask
    # scheduler starts: a study on the threads route serves no dashboard (issue 41)
    from . import dashboard_gate

    with interrupts.held() as noted:
        t0 = time.monotonic()
        cluster = factory(prof)
        lost_workers.started(cluster, time.monotonic() - t0)
        try:
            dashboard_gate.guard(cluster)        # its pages for the owner only
            client = connect(cluster)
        except BaseException:
            cluster.close(timeout=WARM_CLOSE_SECONDS)
            raise
    if noted:
        with interrupts.deferred():
            for closing in (client.close, cluster.close):
                with contextlib.suppress(Exception):
                    closing(timeout=WARM_CLOSE_SECONDS)
        raise KeyboardInterrupt(noted[0])
    return cluster, client


def _leave_running_fits(cluster) -> None:
    """Close the in-process workers of ``cluster`` without waiting for the fits they run."""
    # DESIGN CHOICE: distributed's worker waits up to 30 s for its running tasks when it closes
    # (Worker.close, executor_wait): after a StallError or a Ctrl-C on the in-process route,
    # `cvflow run` printed its line 30 s late (a fit that never returns). The fit's thread is
    # a daemon, as on the threads route without a dashboard (cvflow.execution.threaded): it
    # ends with the process; its writes are fenced by the store's lock.
    for worker in list(cluster.workers.values()):
        with contextlib.suppress(Exception):
            cluster.sync(worker.close, executor_wait=False, timeout=WARM_CLOSE_SECONDS)


def _slurm(prof: dict):
    try:
        SLURMCluster = import_jobqueue()
    except ImportError:
        raise InputError("--cluster slurm needs dask-jobqueue: pip install 'cvflow[slurm]'") from None
    kwargs = slurm_kwargs(prof)
    for key in ("log_directory", "shared_temp_directory"):
        if kwargs.get(key):
            Path(kwargs[key]).mkdir(parents=True, exist_ok=True, mode=0o700)
    security = _security(bool(prof.get("tls")))
    try:
        cluster = SLURMCluster(**kwargs, security=security, silence_logs=logging.CRITICAL)
    except TypeError as err:
        raise InputError(f"{prof.get('name')}: jobqueue: {err}") from None
    adaptive = prof.get("adaptive")
    if adaptive:
        cluster.adapt(minimum_jobs=adaptive.get("minimum", 0), maximum_jobs=adaptive.get("maximum", 1))
    else:
        cluster.scale(jobs=prof.get("workers") or 1)
    return cluster


# --- a suite's clusters: each started once ---------------------------------------------------

# DESIGN CHOICE: a suite runs each data set as the run it is (cvflow.execution.suite_run), and
# every run connects; while a suite runs (`shared`), the first run asking a route starts its
# cluster and every later run asking the same route (same profile, same address) gets the
# same client: a SLURM cluster, a scheduler address or an in-process scheduler with a dashboard
# is started (and its jobs queued) once for the suite, not once a data set (the warm local
# cluster already is: warm_client). Closed when the suite ends, as each run's own would have been.
# The suite's data sets run in threads of their own, overlapping (a data set's tail with the
# next one's start): the warm local cluster is shared too, so what a run enters around it
# (Dask's config, clean_main) is entered once, by the first run, and left when the suite ends.
_SHARED: dict | None = None       # {"stack": ExitStack, "clients": {route key: client}, "lock"}


@contextlib.contextmanager
def shared() -> Iterator[None]:
    """While open (in this thread), :func:`connect` starts each route's cluster once and yields
    its client to every run asking that route again; they close when it closes."""
    global _SHARED
    if _SHARED is not None:                     # a suite inside a suite: the outer one shares
        yield
        return
    stack = contextlib.ExitStack()
    _SHARED = {"stack": stack, "clients": {}, "lock": threading.Lock()}
    try:
        yield
    except BaseException:
        # a run stopped (a Ctrl-C, an error): its clusters close within their deadlines, as
        # each run's own does, and a second Ctrl-C does not cut that short
        _SHARED = None
        with interrupts.deferred():
            stack.close()
        raise
    _SHARED = None
    stack.close()


def _route_key(route: Route) -> str:
    return json.dumps({"name": route.name, "profile": route.profile}, sort_keys=True, default=repr)


def _running(client) -> bool:
    """Whether a shared client still answers (a ThreadedClient has no status: always)."""
    return getattr(client, "status", "running") == "running"


@contextlib.contextmanager
def connect(cluster: str | os.PathLike | Route | None = None, *, workers: int | None = None,
            dashboard_port: int | None = None, tls: bool | None = None,
            options: Sequence[str] | Mapping | None = None,
            store: str | os.PathLike | None = None,
            keep: bool = False) -> Iterator[distributed.Client | ThreadedClient]:
    """Yield a ``distributed.Client`` (on the threads route without a dashboard, a
    :class:`~cvflow.execution.threaded.ThreadedClient` making the same calls); closes (and
    cancels the jobs of) what it started on exit, except the session's warm local cluster
    (``keep``). While a suite runs (:func:`shared`), a route's cluster is started once: a run
    asking a route an earlier run of the suite started gets its client.

    Parameters
    ----------
    cluster
        ``None`` (config ``cvflow.cluster.default``; ``"auto"`` connects to ``"local"`` here,
        a run decides between it and ``"threads"`` with :func:`choose`), a profile name
        (``"local"``, ``"threads"``, ``"slurm"``), a profile YAML file, or a scheduler address
        (``tcp://host:port``, ``tls://...``) to connect to a running scheduler; or a run's
        decided :class:`~cvflow.execution.profiles.Route` (its profile as it is: ``workers``,
        ``dashboard_port``, ``tls`` and ``options`` are ignored then).
    workers
        Number of workers (local) or SLURM jobs (slurm; turns adaptive scaling off).
    dashboard_port
        Dashboard port; 0 picks a free one. The URL is ``client.dashboard_link``.
    tls
        Dask TLS with temporary certificates between scheduler, workers and client.
    options
        Profile overrides, ``["jobqueue.queue=gpu", "adaptive.maximum=8"]`` or a dict.
    store
        The store path, only to warn when a SLURM run's store looks node-local.
    keep
        A local cluster is this session's warm one (:func:`warm_client`): started if need be,
        reused by later runs, closed at exit.

    The local profile binds the scheduler, workers and dashboard to 127.0.0.1 with process
    workers of one thread each, started without re-running the caller's ``__main__``
    (:func:`clean_main`); the threads profile runs a scheduler in this process.
    """
    route = cluster if isinstance(cluster, Route) else decide(
        cluster, workers=workers, dashboard_port=dashboard_port, tls=tls, options=options)
    share = _SHARED
    if share is None:
        with _connect(route, store=store, keep=keep) as client:
            yield client
        return
    key = _route_key(route)
    with share["lock"]:                   # the suite's runs connect from threads of their own
        client = share["clients"].get(key)
        if client is None or not _running(client):
            client = share["stack"].enter_context(_connect(route, store=store, keep=keep))
            share["clients"][key] = client
        else:
            log.info("cluster %s: the suite's, started for an earlier data set", route.name)
    yield client


@contextlib.contextmanager
def _connect(cluster: Route, *, store: str | os.PathLike | None = None,
             keep: bool = False) -> Iterator[distributed.Client | ThreadedClient]:
    """:func:`connect` of a decided ``cluster`` route (see its parameters)."""
    from .sizing import one_blas_thread

    route = cluster           # decided by the caller (a run's preflight, or connect)
    if route.address:
        from distributed import Client

        # TLS to a running scheduler uses the certificates of the Dask config
        # (distributed.comm.tls); temporary ones could not match the scheduler's.
        # closed, not left as a context manager (Client.__exit__ resets a context variable
        # set in the thread that entered it: a suite's run thread, closed by the suite's)
        client = Client(route.name)
        try:
            yield client
        finally:
            client.close()
        return
    prof = copy.deepcopy(route.profile)
    warning = store_warning(store, prof["kind"])
    if warning:
        log.warning(warning)
    kind = prof["kind"]
    if route.in_process and prof.get("dashboard_port") is None:
        # DESIGN CHOICE: without a dashboard, the threads route needs no distributed scheduler:
        # Dask's threaded scheduler runs the same tasks (cvflow.execution.threaded), and a short
        # study pays neither distributed's import and start (~0.3 s) nor its close
        with one_blas_thread(), ThreadedClient(int(prof.get("workers") or os.cpu_count()
                                                   or 1)) as threaded:
            log.info("cluster %s (Dask's threaded scheduler, %d threads)", prof["name"],
                     threaded.workers)
            yield threaded
        return
    # DESIGN CHOICE: dask imported here, where a distributed cluster is used: the threads route
    # above imports no dask (it imports jinja2, ~50-100 ms: issue 41 item 2)
    import dask.config
    from distributed import Client

    from . import dashboard_gate

    with contextlib.ExitStack() as stack:
        # DESIGN CHOICE: a task whose worker died is retried once on another worker, then the
        # loop splits its block into single fits (cvflow.execution.loop): a fit that kills its process
        # costs two worker restarts, not Dask's default four. Read when the scheduler starts.
        # A worker holds only the task it runs (worker-saturation 1): a worker that dies (a fit
        # that ends its process, a time limit) takes no queued innocent task down with it.
        stack.enter_context(dask.config.set({
            "distributed.scheduler.allowed-failures":
                config.get("cvflow.execution.allowed-failures"),
            "distributed.scheduler.worker-saturation": 1.0}))
        if kind == "local":
            # also while a warm cluster runs the study: a worker its nanny restarts is spawned
            stack.enter_context(clean_main())
            kept = warm_client(prof) if keep else None
            if kept is not None:
                stack.enter_context(dask.config.set(
                    dashboard_gate.linked((_WARM or {}).get("cluster"))))
                log.info("cluster %s (%s, kept for this session): dashboard %s", prof["name"],
                         kind, kept.dashboard_link or None)
                # what learners' fits leave running in its workers ends with the run
                with processes.ended_after_run((_WARM or {}).get("token")):
                    yield kept
                return
            # what learners' fits leave running in the workers ends when the cluster closes
            stack.enter_context(processes.ended_at_close())
        elif route.in_process:
            stack.enter_context(one_blas_thread())
            # an in-process scheduler's address names no host: link to where the dashboard listens
            stack.enter_context(dask.config.set({"distributed.dashboard.link":
                                                 f"http://{prof.get('host') or '127.0.0.1'}:{{port}}/status"}))
        started, client = _started({"local": _local, THREADS: _threads, "slurm": _slurm}[kind],
                                   prof, Client)
        stack.enter_context(started)
        stack.enter_context(dask.config.set(dashboard_gate.linked(started)))
        if route.in_process:        # after the client closes, before the cluster does
            stack.callback(_leave_running_fits, started)
        stack.callback(client.close)   # not Client.__exit__: see the address route above
        log.info("cluster %s (%s): dashboard %s", prof["name"], kind,
                 client.dashboard_link or None)
        yield client

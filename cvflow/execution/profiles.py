"""Cluster profiles: which Dask cluster to start and how, read from the packaged defaults, a
profile file, the environment and options.

A *profile* is a small mapping (see ``cvflow/config.yaml`` for the packaged defaults, and
``cluster/local.yaml``, ``cluster/slurm.yaml`` for the same profiles as editable files).
Precedence, lowest first: the packaged profile of the same ``kind`` (through ``dask.config``,
key ``cvflow.cluster.profiles``), the profile file, ``CVFLOW_CLUSTER__KEY__SUBKEY=value``
environment variables, ``options`` (``key.subkey=value`` strings, values parsed as YAML), and
finally the explicit ``workers``, ``dashboard_port`` and ``tls`` arguments. Starting the
cluster a profile names is :mod:`cvflow.execution.schedulers`'.

A run decides its cluster once (:func:`decide`, called by the run's preflight,
:func:`cvflow.execution.preflight.check_run`): the profile loaded and validated with every
override merged, carried down as a :class:`Route` to the scheduler's choice and the connection,
which read it instead of loading the profile again.
"""
from __future__ import annotations

import copy
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence


from .. import config
from ..errors import InputError

log = logging.getLogger(__name__)

ENV_PREFIX = "CVFLOW_CLUSTER__"
THREADS = "threads"      # the kind whose fits run in this process (Route.in_process)
KINDS = ("local", "slurm", THREADS)
AUTO = "auto"
# `forked` (worker processes forked from the client) could hang: a fork copies the locks other
# threads hold (zarr's event-loop lock, session 6); it is read as `local` with a warning
REMOVED = {"forked": "local"}
KEYS = {
    THREADS: {"kind", "workers", "host", "dashboard_port", "tls"},
    "local": {"kind", "workers", "threads_per_worker", "memory_limit", "host", "dashboard_port",
              "tls"},
    "slurm": {"kind", "workers", "adaptive", "host", "interface", "dashboard_port", "tls",
              "lifetime", "lifetime_stagger", "jobqueue"},
}
ADDRESS = re.compile(r"^(tcp|tls|ucx|inproc)://")
# what follows the scheme: HOST:PORT (an IPv6 host in brackets); inproc:// takes any name
HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):\d{1,5}/?$")
SHARED_WARNING_PREFIXES = ("/tmp", "/var/tmp", "/dev/shm", "/run")


# --- profiles -----------------------------------------------------------------------------------

def _merge(base: dict, top: Mapping) -> dict:
    """Deep merge ``top`` into a copy of ``base`` (mappings merged, anything else replaced)."""
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _nest(path: Sequence[str], value) -> dict:
    out: dict = value
    for key in reversed(path):
        out = {key: out}
    return out


def parse_options(options: Sequence[str] | Mapping | None, *, where: str = "--cluster-option") -> dict:
    """``["jobqueue.queue=gpu", "adaptive=null"]`` -> nested dict; values are parsed as YAML."""
    if not options:
        return {}
    if isinstance(options, Mapping):
        return dict(options)
    import yaml     # here: the profiles a run reads without options need no YAML (~10 ms)

    out: dict = {}
    for item in options:
        key, sep, text = str(item).partition("=")
        if not sep or not key.strip():
            raise InputError(f"{where}: {item!r} is not KEY=VALUE (e.g. jobqueue.queue=debug)")
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError as err:
            raise InputError(f"{where}: {item!r}: value is not valid YAML ({err})") from None
        out = _merge(out, _nest(key.strip().replace("-", "_").split("."), value))
    return out


def env_options(env: Mapping[str, str] | None = None) -> dict:
    """Overrides from ``CVFLOW_CLUSTER__A__B=value`` variables (keys lower-cased, YAML values)."""
    env = os.environ if env is None else env
    items = [f"{k[len(ENV_PREFIX):].lower().replace('__', '.')}={v}"
             for k, v in sorted(env.items()) if k.startswith(ENV_PREFIX) and len(k) > len(ENV_PREFIX)]
    return parse_options(items, where="environment CVFLOW_CLUSTER__*")


def _packaged(name: str) -> dict | None:
    profiles = config.get("cvflow.cluster.profiles") or {}
    found = profiles.get(name)
    return copy.deepcopy(dict(found)) if isinstance(found, Mapping) else None


def cluster_name(cluster: str | os.PathLike | None) -> str:
    """The cluster's name: ``cluster`` itself, or the configured default when None."""
    if cluster is None:
        cluster = config.get("cvflow.cluster.default")
    return os.fspath(cluster)


def _named(name: str, env: Mapping[str, str] | None) -> tuple[str, dict, str]:
    """(the profile's name, the profile it names with the environment's overrides, how its
    messages name it)."""
    if name == AUTO:
        name = "local"   # without a study to time, auto is the process cluster
    if name in REMOVED:
        log.warning("--cluster %s was removed (forking a process that runs threads can hang); "
                    "using %s", name, REMOVED[name])
        name = REMOVED[name]
    where = "--cluster"
    packaged = _packaged(name)
    if packaged is not None:
        prof = packaged
    elif name.endswith((".yaml", ".yml")) or os.path.sep in name or os.path.exists(name):
        where = name
        import yaml

        try:
            loaded = yaml.safe_load(Path(name).read_text())
        except FileNotFoundError:
            raise InputError(f"--cluster: profile file {name} does not exist") from None
        except (OSError, yaml.YAMLError) as err:
            raise InputError(f"{name}: cannot read the cluster profile ({err})") from None
        if not isinstance(loaded, Mapping):
            raise InputError(f"{name}: a cluster profile must be a mapping with a 'kind' key")
        kind = loaded.get("kind")
        if kind not in KINDS:
            raise InputError(f"{name}: kind: {kind!r} is not one of {', '.join(KINDS)}")
        prof = _merge(_packaged(kind) or {"kind": kind}, loaded)
    else:
        known = sorted((config.get("cvflow.cluster.profiles") or {}))
        raise InputError(f"--cluster: {name!r} is not auto, a profile ({', '.join(known)}), "
                         "a profile file (.yaml) or a scheduler address tcp://HOST:PORT")
    prof = _merge(prof, env_options(env))
    return name, prof, where


def load_profile(cluster: str | os.PathLike | None = None, *,
                 options: Sequence[str] | Mapping | None = None,
                 env: Mapping[str, str] | None = None, explicit: Mapping | None = None,
                 named_by: str | None = None) -> dict:
    """Resolve ``cluster`` (None, a profile name, a YAML file) into a complete profile dict.

    The result has a ``name`` key (the profile name or file) besides the profile keys.
    ``explicit`` (``workers``, ``dashboard_port``, ``tls`` given as arguments) is merged last,
    over the profile validated with its ``options``, and the result validated again; an
    explicit number of SLURM jobs turns adaptive scaling off. ``named_by`` (``wf.yaml:
    execution.cluster``): where ``cluster`` was named, when not by ``--cluster``; the profile
    it names is checked first and its errors say so.

    Raises
    ------
    cvflow.errors.InputError
        Unknown profile, unreadable file, unknown key, or an invalid value.
    """
    name = cluster_name(cluster)
    if named_by is None:
        name, prof, where = _named(name, env)
    else:
        try:          # the profile as named, checked first: its messages name where it was named
            name, prof, where = _named(name, env)
            _check(prof, where)
        except InputError as exc:
            raise InputError(f"{named_by}: {str(exc).removeprefix('--cluster: ')}") from None
    prof = _merge(prof, parse_options(options))
    _check(prof, where)
    if explicit:
        prof = _merge(prof, explicit)
        _check(prof, where)
        if explicit.get("workers") is not None and prof["kind"] == "slurm":
            prof["adaptive"] = None  # an explicit number of jobs turns adaptive scaling off
    prof["name"] = name
    return prof


@dataclass(frozen=True, repr=False, eq=False)
class Route:
    """Where a run's fits go, decided once per run (:func:`decide`) and passed down.

    ``name`` is the cluster as asked, resolved (``auto``, a profile name or file, a scheduler
    address); ``profile`` its profile loaded and validated with every override merged (None
    for an address; under ``auto`` the process cluster's, ``local``, until :meth:`pick`);
    ``options`` and ``explicit`` what was merged over it (the profile options, then the
    explicit arguments: workers, dashboard_port, tls).
    """

    name: str
    profile: dict | None
    options: dict = field(default_factory=dict)
    explicit: dict = field(default_factory=dict)

    @property
    def auto(self) -> bool:
        """The run chooses between this process and worker processes (schedulers.choose)."""
        return self.name == AUTO

    @property
    def address(self) -> bool:
        """A running scheduler, connected to as it is."""
        return self.profile is None

    @property
    def kind(self) -> str | None:
        return None if self.profile is None else self.profile["kind"]

    @property
    def in_process(self) -> bool:
        """The fits run in this process's threads (a ``threads`` profile, named or a file)."""
        return self.kind == THREADS

    @property
    def dashboard(self) -> bool:
        """Connecting gives a dashboard: an address, or a port in the profile."""
        return self.profile is None or self.profile.get("dashboard_port") is not None

    def pick(self, name: str, *, dashboard_port: int | None = None) -> "Route":
        """``auto``'s choice ``name`` (``local`` or ``threads``) as the run's route, served on
        ``dashboard_port`` unless the run was given one (``--dashboard-port``, an option). The
        process cluster's profile is the one loaded already; another is loaded now, once."""
        options = {"dashboard_port": dashboard_port, **self.options}
        if self.profile is not None and name == self.profile["name"]:
            # a port of None or 0 is valid in every profile: nothing more to check
            profile = {**self.profile, "dashboard_port": self.explicit.get(
                "dashboard_port", options["dashboard_port"])}
        else:
            profile = load_profile(name, options=options, explicit=self.explicit)
        return Route(name, profile, options, self.explicit)


def decide(cluster: str | os.PathLike | None = None, *, workers: int | None = None,
           dashboard_port: int | None = None, tls: bool | None = None,
           options: Sequence[str] | Mapping | None = None, named_by: str | None = None) -> Route:
    """The run's :class:`Route`: ``cluster`` resolved and its profile loaded and validated once,
    with ``options`` then the explicit ``workers``, ``dashboard_port`` and ``tls`` merged over
    it, as the run connects (an explicit number of SLURM jobs turns adaptive scaling off);
    ``named_by`` as :func:`load_profile`'s.

    Raises
    ------
    cvflow.errors.InputError
        As :func:`load_profile`.
    """
    name = cluster_name(cluster)
    scheme = ADDRESS.match(name)
    if scheme:
        if scheme.group(1) != "inproc" and not HOST_PORT.match(name[scheme.end():]):
            raise InputError(f"--cluster: {name!r} is not a scheduler address; give "
                             f"{scheme.group(1)}://HOST:PORT, e.g. {scheme.group(1)}://10.0.0.5:8786")
        return Route(name, None)
    options = parse_options(options)
    explicit = {k: v for k, v in (("workers", workers), ("dashboard_port", dashboard_port),
                                  ("tls", tls)) if v is not None}
    return Route(name, load_profile(name, options=options, explicit=explicit, named_by=named_by),
                 options, explicit)


def _seconds(value, what: str, where: str) -> float:
    # a slurm profile's durations: dask, not imported by the threads route (config._defaults_alone)
    from dask.utils import parse_timedelta

    try:
        return float(parse_timedelta(value, default="s"))
    except (ValueError, KeyError, TypeError):
        raise InputError(f"{where}: {what}: {value!r} is not a duration (e.g. 55m, 3600)") from None


def walltime_seconds(walltime: str) -> float:
    """SLURM walltime (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``) in seconds."""
    text = str(walltime).strip()
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        parts += [0] * (3 - len(parts))
        h, m, s = parts
    else:
        h, m, s = {1: (0, parts[0], 0), 2: (0, *parts), 3: tuple(parts)}[len(parts)]
    return ((int(days or 0) * 24 + h) * 60 + m) * 60 + s


def _check(prof: dict, where: str) -> None:
    kind = prof.get("kind")
    if kind not in KINDS:
        raise InputError(f"{where}: kind: {kind!r} is not one of {', '.join(KINDS)}")
    unknown = sorted(set(prof) - KEYS[kind] - {"name"})
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]!r} in a {kind} profile; "
                         f"known: {', '.join(sorted(KEYS[kind]))}")
    workers = prof.get("workers")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool)
                                or workers < 1):
        raise InputError(f"{where}: workers: {workers!r} must be a positive integer or null")
    port = prof.get("dashboard_port")
    if port is not None and (not isinstance(port, int) or not 0 <= port < 65536):
        raise InputError(f"{where}: dashboard_port: {port!r} must be 0..65535 (0: any free port)")
    if kind == "slurm":
        adaptive = prof.get("adaptive")
        if adaptive is not None:
            if not isinstance(adaptive, Mapping) or set(adaptive) - {"minimum", "maximum"}:
                raise InputError(f"{where}: adaptive: expected {{minimum: N, maximum: M}} or null, "
                                 f"got {adaptive!r}")
            lo, hi = adaptive.get("minimum", 0), adaptive.get("maximum", 1)
            if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi and hi >= 1):
                raise InputError(f"{where}: adaptive: need 0 <= minimum <= maximum, maximum >= 1; "
                                 f"got minimum={lo!r} maximum={hi!r}")
        jq = prof.get("jobqueue") or {}
        if not isinstance(jq, Mapping):
            raise InputError(f"{where}: jobqueue: must be a mapping of SLURMCluster arguments")
        if prof.get("lifetime"):
            life = _seconds(prof["lifetime"], "lifetime", where)
            stagger = _seconds(prof.get("lifetime_stagger") or 0, "lifetime_stagger", where)
            if jq.get("walltime"):
                try:
                    wall = walltime_seconds(jq["walltime"])
                except (ValueError, KeyError):
                    raise InputError(f"{where}: jobqueue.walltime: {jq['walltime']!r} is not a "
                                     "SLURM time (HH:MM:SS or D-HH:MM:SS)") from None
                if life + stagger >= wall:
                    raise InputError(
                        f"{where}: lifetime {prof['lifetime']} + lifetime_stagger "
                        f"{prof.get('lifetime_stagger')} must end before jobqueue.walltime "
                        f"{jq['walltime']} so workers retire before SLURM kills them")


def store_warning(store: str | os.PathLike | None, kind: str) -> str | None:
    """A warning when a SLURM run's store may not be visible to the compute nodes, else None."""
    if store is None or kind != "slurm":
        return None
    text = os.fspath(store)
    if "://" in text:
        return None
    if not os.path.isabs(text):
        return (f"store {text} is a relative path; SLURM workers resolve it from the submission "
                f"directory, which must be on a file system every node sees ({os.path.abspath(text)})")
    real = os.path.realpath(text)
    top = next((p for p in SHARED_WARNING_PREFIXES if real == p or real.startswith(p + "/")), None)
    if top:
        return (f"store {text} is under {top}, usually local to each node; SLURM workers write "
                "the store directly, so put it on "
                "a shared file system (home, project or scratch)")
    return None

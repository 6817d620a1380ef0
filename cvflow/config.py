"""cvflow's configuration: every ``cvflow.*`` default beside its schema, loaded once into ``dask.config``.

The defaults ship as YAML (``cvflow/config.yaml``) and are merged under Dask's own
(``dask.config.update_defaults``), so a user overrides them like any Dask setting:
``~/.config/dask/*.yaml``, ``DASK_CVFLOW__LOCK__STALE_AFTER=60`` variables, or
``dask.config.set({"cvflow.limits.fits": 2 * 10**7})``. Every module reads them through
:func:`get`, which loads the defaults on first use (importing this module is enough; nothing
else needs to be imported for its side effect) and checks the value's type against
:data:`SCHEMA`, so a mistyped override is one clear line instead of a ``TypeError`` deep in
a run. See docs/developer/architecture.md.
"""
from __future__ import annotations

from numbers import Real
from pathlib import Path
from typing import Any

from .errors import InputError

VERSION = "0.1.0"     # cvflow.__version__; stores record it (cvflow_version)
DEFAULTS = Path(__file__).with_name("config.yaml")

# DESIGN CHOICE: the schema names the type of every leaf a module reads with `get`, beside the
# YAML that gives its default (dask keeps `dask-schema.yaml` beside `dask.yaml` the same way);
# the default lives only in config.yaml (tests/test_config.py). A null is always accepted
# (the reading module treats it as unset); `object` leaves are checked where they are read.
SCHEMA: dict[str, tuple] = {
    "cvflow.lock.heartbeat": (Real,),
    "cvflow.lock.stale-after": (Real,),
    "cvflow.execution.stall-seconds": (Real,),
    "cvflow.execution.no-worker-seconds": (Real,),
    "cvflow.execution.allowed-failures": (int,),
    "cvflow.execution.live-page": (str,),
    "cvflow.execution.dask-logs": (str,),
    "cvflow.storage-options": (dict,),
    "cvflow.cluster.default": (str,),
    "cvflow.cluster.auto.process_start_seconds": (Real,),
    "cvflow.cluster.auto.warm_seconds": (Real,),
    "cvflow.cluster.auto.probe_seconds": (Real,),
    "cvflow.cluster.auto.dashboard_after_seconds": (Real,),
    "cvflow.cluster.profiles": (dict,),
    "cvflow.limits.params": (object,),          # checked by workflow.limits, with its message
    "cvflow.limits.fits": (object,),
    "cvflow.limits.splits": (object,),
    "cvflow.limits.design-values": (object,),
    "cvflow.limits.yaml-alias-nodes": (object,),
    "cvflow.limits.synthetic-values": (object,),
    "cvflow.reduce.in-memory-bytes": (Real,),
    "cvflow.reduce.stall-seconds": (Real,),
    "cvflow.reduce.no-worker-seconds": (Real,),
}

# the numbers a setting accepts, (above, at least): a lock, a deadline or a count out of range
# is one line naming the setting (issue 44), not a ValueError deep in a run
RANGES: dict[str, tuple[float | None, float | None]] = {
    "cvflow.lock.heartbeat": (0, None),
    "cvflow.lock.stale-after": (0, None),
    "cvflow.execution.stall-seconds": (0, None),
    "cvflow.execution.no-worker-seconds": (0, None),
    "cvflow.execution.allowed-failures": (None, 0),
    "cvflow.reduce.in-memory-bytes": (None, 0),
    "cvflow.cluster.auto.process_start_seconds": (None, 0),
    "cvflow.cluster.auto.warm_seconds": (None, 0),
    "cvflow.cluster.auto.probe_seconds": (None, 0),
    "cvflow.cluster.auto.dashboard_after_seconds": (None, 0),
    "cvflow.reduce.stall-seconds": (0, None),
    "cvflow.reduce.no-worker-seconds": (0, None),
}
# what a type is called in a refusal
_KINDS = {Real: "number", int: "whole number", str: "string", dict: "mapping"}

_MISSING = object()
_loaded: dict | None = None          # the packaged defaults, once merged


def load() -> None:
    """Merge the packaged defaults into ``dask.config`` (once; later calls do nothing)."""
    # DESIGN CHOICE: loaded on first use, not at import: importing dask.config costs ~150 ms
    # (230 modules), which `cvflow status` and `cvflow --help` do not pay (tests/test_startup.py).
    global _loaded
    if _loaded is None:
        import dask.config
        import yaml

        _loaded = yaml.safe_load(DEFAULTS.read_text())
        dask.config.update_defaults(_loaded)


def get(key: str, default: Any = _MISSING) -> Any:
    """The value of ``key`` (``"cvflow.lock.heartbeat"``) from ``dask.config``.

    Raises
    ------
    InputError
        When the value set by the user is not of the type :data:`SCHEMA` declares.
    """
    import dask.config

    load()
    try:
        value = dask.config.get(key) if default is _MISSING else dask.config.get(key, default=default)
    except KeyError:
        # a `dask.config.set` of a cvflow key entered before the defaults were merged removes,
        # when it exits, the keys it found missing: the defaults are merged again (under what
        # is set now) and the key read again
        dask.config.update(dask.config.config, _loaded or {}, priority="old")
        value = dask.config.get(key)
    types = SCHEMA.get(key)
    # a YAML `true` is no number here, although Python's bool is an int
    numeric = types is not None and any(t in (Real, int) for t in types)
    if types is not None and value is not None and value is not default and (
            not isinstance(value, types) or (numeric and isinstance(value, bool))):
        names = " or ".join(_KINDS.get(t, t.__name__) for t in types)
        raise InputError(f"config {setting(key)}: {value!r} ({type(value).__name__}); "
                         f"give a {names}")
    above, least = RANGES.get(key, (None, None))
    if isinstance(value, Real) and not isinstance(value, bool) and (
            (above is not None and not value > above) or (least is not None and value < least)):
        allowed = f"more than {above}" if above is not None else f"at least {least}"
        raise InputError(f"config {setting(key)}: {value!r}; give a number {allowed}")
    return value


def check_lock_times(heartbeat: float, stale_after: float) -> None:
    """InputError when a lock would count as abandoned before its next heartbeat."""
    if stale_after <= heartbeat:
        raise InputError(f"config {setting('cvflow.lock.stale-after')}: {stale_after:g} s; "
                         "give more seconds than cvflow.lock.heartbeat "
                         f"({heartbeat:g} s; the defaults: 120 and 10)")


def check_all() -> None:
    """Every setting of :data:`SCHEMA` read once, and the lock's two times together: a wrong
    type or a number out of :data:`RANGES` is one line naming the setting before a run
    creates, grows or locks anything, whether or not its route reads that setting."""
    for key in SCHEMA:
        get(key)
    heartbeat, stale_after = get("cvflow.lock.heartbeat"), get("cvflow.lock.stale-after")
    if heartbeat is not None and stale_after is not None:
        check_lock_times(float(heartbeat), float(stale_after))


def setting(key: str) -> str:
    """How a user sets ``key``: its name and its environment variable."""
    variable = "DASK_" + key.upper().replace(".", "__").replace("-", "_")
    return f"{key} ({variable})"

"""Size limits of user input, checked from sizes before anything is allocated.

A workflow can ask for more than a machine holds in a few characters: three grid axes of
1000 values (10^9 params), one ``logspace`` of 10^9 values, 10^9 repeats of K-fold, a YAML
alias bomb. Each is refused here with one line that gives the size, the limit and how to
raise it, before numpy or the YAML constructor allocates anything:

- ``cvflow.limits.params`` (default 10^6): params of a workflow, counted as the product of
  the axis lengths of each grid (a generator's count is read before it runs);
- ``cvflow.limits.fits`` (default 10^7): params x splits (the splits the estimators ask
  for, counted from the design before its training sets are built);
- ``cvflow.limits.splits`` (default 10^6): the training sets of a design (the splits the
  estimators ask for, counted before any is built: building one costs ~50 us of Python, so
  10^6 take about a minute);
- ``cvflow.limits.design-values`` (default 10^9, ~1 GB): the values a design holds, its
  training-set masks and fold labels, (splits + repeats) x samples, counted once the data's
  size is known, before the fold labels are drawn;
- ``cvflow.limits.yaml-alias-nodes`` (default 10^5): nodes that YAML aliases add to a
  workflow file (the expanded document minus the written one);
- ``cvflow.limits.synthetic-values`` (default 10^8, 800 MB): values a synthetic data
  generator draws (``data.params``: n x p, and p x p for a covariance).

The limits are Dask config (``cvflow/config.yaml``): raise one for a run with
``DASK_CVFLOW__LIMITS__FITS=20000000 cvflow run ...`` or, in Python,
``dask.config.set({"cvflow.limits.fits": 20_000_000})``.
"""
from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .. import config

# DESIGN CHOICE (defaults, in cluster.yaml): 10^6 params is 1000x the largest grid of the
# paper reproductions and what the 10^6-fit benchmark uses (1000 alphas); 10^7 fits is 10x the
# largest study measured here (README "Scale"), past which the client's in-memory status
# (README: "past ~10^7 fits this is what to change next") is the bottleneck.
_ENV = {"params": "PARAMS", "fits": "FITS", "splits": "SPLITS", "design-values": "DESIGN_VALUES",
        "yaml-alias-nodes": "YAML_ALIAS_NODES", "synthetic-values": "SYNTHETIC_VALUES"}


# DESIGN CHOICE: no limit is below these counts, so a workflow under them is checked without
# reading the config: `cvflow validate` imports no Dask (tests/test_startup.py; `import
# dask.config` costs ~150 ms, 230 modules). A limit configured lower counts as its floor; the
# limits guard a machine against absurd sizes, they are not quotas.
FLOORS = {"params": 10_000, "fits": 100_000, "splits": 100_000, "design-values": 10_000_000,
          "yaml-alias-nodes": 10_000, "synthetic-values": 1_000_000}


def limit(name: str) -> int:
    """The limit ``cvflow.limits.<name>`` (the config's value, at least :data:`FLOORS`)."""


    value = config.get(f"cvflow.limits.{name}")
    if isinstance(value, str):
        try:
            value = int(float(value))
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise InputError(f"config cvflow.limits.{name}: {value!r}; give a whole number")
    return max(int(value), FLOORS[name])


def how_to_raise(name: str, needed: int) -> str:
    """The hint every refusal ends with: the setting and the number that would pass."""
    return (f"raise it with DASK_CVFLOW__LIMITS__{_ENV[name]}={needed} or "
            f"dask.config.set({{'cvflow.limits.{name}': {needed}}})")


def check(name: str, count: int | float, message: str) -> None:
    """InputError ``"{message}, over the limit of M (cvflow.limits.<name>); raise it with
    ..."`` when ``count`` exceeds the limit ``name``; ``message`` names the file, the key and
    the count (e.g. ``"wf.yaml: learners[0].grid: 10^9 params"``)."""
    if count <= FLOORS[name]:
        return
    cap = limit(name)
    if count > cap:
        needed = int(count) if math.isfinite(count) and count < 1e18 else None
        raise InputError(f"{message}, over the limit of {cap:,} (cvflow.limits.{name}); "
                         + (how_to_raise(name, needed) if needed is not None
                            else "no machine holds that many"))


def count_text(count: int | float) -> str:
    """``1,000,000`` (or ``1e+30`` when too large to read digit by digit)."""
    return f"{count:,}" if isinstance(count, int) and count < 10**15 else f"{float(count):.3g}"


# --- YAML -----------------------------------------------------------------------------------


if TYPE_CHECKING:
    import yaml


def _expanded(node: yaml.Node, memo: dict[int, int], active: set[int]) -> int:
    """Nodes of ``node`` with every alias expanded (memoised: an anchored node is counted
    once per use without being walked again). A node inside itself (``&a [*a]``) raises."""
    key = id(node)
    if key in memo:
        return memo[key]
    if key in active:
        raise InputError("a YAML alias refers to a node that contains it (a recursive "
                         "anchor); write the value out")
    active.add(key)
    kind = type(node).__name__
    if kind == "SequenceNode":
        size = 1 + sum(_expanded(child, memo, active) for child in node.value)
    elif kind == "MappingNode":
        size = 1 + sum(_expanded(k, memo, active) + _expanded(v, memo, active)
                       for k, v in node.value)
    else:
        size = 1
    active.discard(key)
    memo[key] = size
    return size


@functools.cache
def _bounded_loader() -> type:
    """PyYAML's safe loader that measures the composed document before constructing it (made
    on first use: a study given as Python objects never imports yaml, ~10 ms)."""
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        where = "YAML"

        def get_single_node(self) -> yaml.Node | None:
            node = super().get_single_node()
            if node is not None:
                memo: dict[int, int] = {}
                try:
                    expanded = _expanded(node, memo, set())
                except InputError as exc:
                    raise InputError(f"{self.where}: {exc}") from None
                written = len(memo)          # distinct nodes: what the text itself holds
                check("yaml-alias-nodes", expanded - written,
                      f"{self.where}: YAML aliases expand the file by "
                      f"{count_text(expanded - written)} nodes")
            return node

    return BoundedLoader


def load_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load(text)`` with aliases bounded (:data:`cvflow.limits.yaml-alias-nodes`).

    DESIGN CHOICE: aliases are allowed, measured, not forbidden: an anchor shared by several
    learners' grids is a fair use, and a "billion laughs" is harmless until something walks
    the shared nodes (the workflow stored as JSON, a grid expanded). The composed node graph
    is measured before any Python object is built: the expanded size is a product of the
    aliases' sizes, computed in time linear in the written document. Raises InputError
    (starting with ``where``, the file) or ``yaml.YAMLError``.
    """
    loader = _bounded_loader()(text)
    loader.where = where
    try:
        return loader.get_single_data()
    except RecursionError:
        raise InputError(f"{where}: YAML nested too deeply to read; flatten it") from None
    finally:
        loader.dispose()

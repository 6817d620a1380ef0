"""cvflow.config: one place for every default (config.yaml) and the type of every key (SCHEMA)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import dask.config
import pytest
import yaml

from cvflow import config
from cvflow.errors import InputError

PACKAGE = Path(config.__file__).parent


def _leaves(tree: dict, prefix: str = "") -> set[str]:
    out = set()
    for key, value in tree.items():
        name = f"{prefix}.{key}" if prefix else key
        # a mapping the code reads whole (profiles, auto) is a leaf of the schema
        out |= _leaves(value, name) if isinstance(value, dict) and name not in config.SCHEMA else {name}
    return out


def _keys_read() -> set[str]:
    """Every literal key the package reads with config.get (read from its source)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "get" and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "config" and node.args):
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and str(arg.value).startswith("cvflow."):
                    found.add(arg.value)
                elif isinstance(arg, ast.JoinedStr):       # f"cvflow.limits.{name}"
                    head = arg.values[0]
                    if isinstance(head, ast.Constant) and str(head.value).startswith("cvflow."):
                        found.add(head.value + "*")
    return found


def test_every_key_read_has_a_schema_entry_and_a_packaged_default():
    defaults = _leaves(yaml.safe_load((PACKAGE / "config.yaml").read_text()))
    assert set(config.SCHEMA) == defaults
    for key in _keys_read():
        if key.endswith("*"):
            assert any(k.startswith(key[:-1]) for k in config.SCHEMA), key
        else:
            assert key in config.SCHEMA, key


def test_a_wrongly_typed_override_is_one_clear_line():
    config.load()        # defaults merged before dask.config.set records what it restores
    with dask.config.set({"cvflow.lock.heartbeat": "ten"}):
        said = "config cvflow.lock.heartbeat (DASK_CVFLOW__LOCK__HEARTBEAT): 'ten' (str); give a number"
        with pytest.raises(InputError, match=re.escape(said)):
            config.get("cvflow.lock.heartbeat")
    assert config.get("cvflow.lock.heartbeat") == 10


def test_a_null_override_is_unset_not_an_error():
    config.load()
    with dask.config.set({"cvflow.storage-options": None}):
        assert config.get("cvflow.storage-options") is None


def test_a_setting_entered_before_the_defaults_leaves_them_in_place():
    """A fresh process: ``dask.config.set`` of one cvflow key entered before cvflow merged its
    defaults removes, on exit, the keys it found missing (Dask's rule); every default must still
    read as config.yaml says afterwards (reference: the packaged file)."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""\
        import dask.config, yaml
        from cvflow import config
        with dask.config.set({"cvflow.reduce.in-memory-bytes": 0}):
            inside = config.get("cvflow.reduce.in-memory-bytes")
        after = {k: config.get(k) for k in ("cvflow.reduce.in-memory-bytes", "cvflow.lock.heartbeat")}
        packaged = yaml.safe_load(config.DEFAULTS.read_text())["cvflow"]
        assert inside == 0, inside
        assert after == {"cvflow.reduce.in-memory-bytes": packaged["reduce"]["in-memory-bytes"],
                         "cvflow.lock.heartbeat": packaged["lock"]["heartbeat"]}, after
        print("ok")
        """)
    out = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]

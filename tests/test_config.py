"""cvflow.config: one place for every default (config.yaml) and the type of every key (SCHEMA)."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
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


# issue 41: where nothing can override a cvflow default, config.get reads config.yaml without
# importing dask (which imports jinja2); else through dask.config as before
def test_the_defaults_read_without_dask_are_dask_configs():
    config.load()
    for key in sorted(_keys_read() | set(config.SCHEMA)):
        if "{" not in key:
            assert config._default(key, None) == dask.config.get(key, None), key


READ = """\
import json, sys
from cvflow import config
print(json.dumps([config.get("cvflow.execution.stall-seconds"), "dask" in sys.modules]))
"""


@pytest.mark.parametrize("files, expected", [
    ({}, [None, False]),
    ({"jobqueue.yaml": "jobqueue:\n  slurm:\n    cores: 2\n"}, [None, False]),
    ({"mine.yaml": "cvflow:\n  execution:\n    stall-seconds: 7\n"}, [7, True]),
])
def test_a_dask_config_file_naming_cvflow_is_read(tmp_path, files, expected):
    home = tmp_path / "home"
    (home / ".config" / "dask").mkdir(parents=True)
    for name, text in files.items():
        (home / ".config" / "dask" / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env["HOME"] = str(home)
    out = subprocess.run([sys.executable, "-c", READ], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    value, imported = json.loads(out.stdout.splitlines()[-1])
    default = yaml.safe_load((PACKAGE / "config.yaml").read_text())["cvflow"]["execution"]
    assert value == (expected[0] if expected[0] is not None else default["stall-seconds"])
    assert imported == expected[1]


def test_the_packaged_defaults_read_as_pure_python_yaml_reads_them():
    text = (PACKAGE / "config.yaml").read_text()
    assert config._defaults() == yaml.load(text, Loader=yaml.SafeLoader)


def test_the_defaults_kept_beside_the_bytecode_are_the_yamls_and_follow_its_bytes(
        tmp_path, monkeypatch):
    """The copy kept in __pycache__ (config.CACHE) reads as config.yaml reads, and a changed
    config.yaml is read again, not taken from the stale copy; under PYTHONDONTWRITEBYTECODE
    nothing is written."""
    text = (PACKAGE / "config.yaml").read_bytes()
    parsed = yaml.load(text, Loader=yaml.SafeLoader)
    monkeypatch.setattr(config, "CACHE", tmp_path / "__pycache__" / "config.yaml.marshal")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    config._cache(text, parsed)
    assert not config.CACHE.exists() and config._cached(text) is None
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    config._cache(text, parsed)
    assert config._cached(text) == parsed
    assert config._cached(text + b"\n# edited\n") is None
    config.CACHE.write_bytes(b"not marshal")
    assert config._cached(text) is None

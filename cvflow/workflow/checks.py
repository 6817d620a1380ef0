"""The input checks every section of a workflow file shares: one :class:`~cvflow.errors.InputError`
line naming the file and the key, and a mapping's keys checked against those allowed.
"""
from __future__ import annotations

from typing import Any

from ..errors import InputError


def fail(where: str, key: str, msg: str):
    raise InputError(f"{where}: {key}: {msg}")


def check_keys(where: str, key: str, section: Any, allowed: set[str]) -> dict:
    if section is None:
        return {}
    if not isinstance(section, dict):
        fail(where, key, f"expected a mapping, got {type(section).__name__}")
    unknown = sorted(set(section) - allowed)
    if unknown:
        fail(where, f"{key}.{unknown[0]}" if key else unknown[0],
             f"unknown key; allowed keys are {', '.join(sorted(allowed))}")
    return section

"""A store is data, on the terminal too: strings a store holds (learner names, param values,
stored error messages, attributes, variable names) reach `cvflow report`, `status`, `verify`
and `run` with every control character shown as an escape (cvflow.terminal.visible), so a
store someone else made cannot write the clipboard (OSC 52), clear the screen, retitle the
window or overwrite a line to forge "0 failed". JSON output is escaped by json.dumps.

The stores are real: a tiny study run by `cvflow run`, then rewritten as an attacker would,
through zarr's public API (the checksums recomputed, the consolidated metadata rewritten).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import zarr

from cvflow.terminal import lines, visible

# OSC 52 (write the clipboard), clear screen, OSC 0 (window title), a C1 CSI; then a carriage
# return and a newline that would forge the lines after them
HOSTILE = "\x1b]52;c;cHduZWQ=\x07\x1b[2J\x1b]0;title\x07\x9b31m"
LEARNER = f"ridge{HOSTILE}\rforged"
ERROR = f"ValueError: boom{HOSTILE}\r0 failed\n0 of 8 fits failed"
WORKFLOW = textwrap.dedent("""\
    name: tiny
    data: {source: sklearn, name: diabetes}
    task: regression
    learners:
      - name: ridge
        class: sklearn.linear_model.Ridge
        grid: {alpha: [0.1, 1.0]}
    design: {folds: 3, seed: 0}
    estimators: [kfold]
    """)


@pytest.mark.parametrize("text, line, block", [
    ("ridge", "ridge", "ridge"),
    ("a\tb", "a\tb", "a\tb"),                                   # a tab is harmless
    ("a\nb", "a\\nb", "a\nb"),                                  # a newline: a block's only
    ("\x1b]52;c;cHduZWQ=\x07", "\\x1b]52;c;cHduZWQ=\\x07", "\\x1b]52;c;cHduZWQ=\\x07"),
    ("\x1b[2J", "\\x1b[2J", "\\x1b[2J"),
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07", "\\x1b]0;title\\x07"),
    ("12 failed\r0 failed", "12 failed\\r0 failed", "12 failed\\r0 failed"),
    ("\x00\x08\x0b\x0c\x1f", "\\x00\\x08\\x0b\\x0c\\x1f", "\\x00\\x08\\x0b\\x0c\\x1f"),
    ("\x7f", "\\x7f", "\\x7f"),                                 # DEL
    ("\x80\x85\x9b\x9f", "\\x80\\x85\\x9b\\x9f", "\\x80\\x85\\x9b\\x9f"),   # C1, NEL among them
    # Unicode beyond the controls passes unchanged: accents, CJK, emoji (a ZWJ family), a
    # no-break space (U+00A0, just past C1), right-to-left script
    ("café Ångström", "café Ångström", "café Ångström"),
    ("岭回归 リッジ", "岭回归 リッジ", "岭回归 リッジ"),
    ("🙂 👨\u200d👩\u200d👧", "🙂 👨\u200d👩\u200d👧", "🙂 👨\u200d👩\u200d👧"),
    ("a\u00a0b", "a\u00a0b", "a\u00a0b"),
    ("انحدار", "انحدار", "انحدار"),
    ("C:\\temp\\x1b", "C:\\temp\\x1b", "C:\\temp\\x1b"),         # a backslash is kept
    # bidirectional overrides and isolates reorder the rest of a line ("Trojan source")
    ("a\u202eb\u2066c\u2069", "a\\u202eb\\u2066c\\u2069", "a\\u202eb\\u2066c\\u2069"),
])
def test_visible_against_a_table(text, line, block):
    assert visible(text) == line
    assert visible(text, multiline=True) == block
    assert visible(line) == line                                # idempotent


def test_visible_escapes_exactly_the_c0_and_c1_controls_as_repr_does():
    for code in [*range(0x250), *range(0x2000, 0x2070)]:
        char = chr(code)
        control = code < 0x20 or 0x7F <= code < 0xA0 or 0x202A <= code <= 0x202E \
            or 0x2066 <= code <= 0x2069
        expected = repr(char)[1:-1] if control and char != "\t" else char
        assert visible(char) == expected, hex(code)


def test_visible_shows_any_object_and_lines_keeps_one_item_per_line():
    assert visible(ValueError("x\x1b[2J")) == "x\\x1b[2J"
    assert lines(["one", "two\nforged", "\rthree"]) == "one\ntwo\\nforged\n\\rthree"


# ------------------------------------------------------------------------------------------
# whole processes on a tampered store


def cli(*args, cwd) -> subprocess.CompletedProcess:
    """``cvflow ARGS`` in a fresh interpreter; output as bytes, decoded strictly below."""
    return subprocess.run([sys.executable, "-m", "cvflow", *map(str, args)], cwd=cwd,
                          capture_output=True, timeout=300)


def terminal_text(proc: subprocess.CompletedProcess) -> str:
    """stdout + stderr, checked: valid UTF-8 without a control character but newline and tab.

    Checked per character, not per byte: a C1 control is U+0080..U+009F (UTF-8 C2 80..C2 9F);
    bytes 0x80..0x9F are also the continuation bytes of accents and CJK."""
    text = (proc.stdout + proc.stderr).decode("utf-8")
    bad = sorted({hex(ord(c)) for c in text
                  if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0})
    assert not bad, f"control characters {bad} reach the terminal:\n{text!r}"
    return text


def tamper(store, *, workflow_name: bool = True) -> None:
    """Rewrite ``store`` as an attacker would: a hostile learner name (its ``learner`` variable
    and every ``param_json``), a failed fit with a hostile error message, and (with
    ``workflow_name``) a hostile workflow name in the root attributes."""
    group = zarr.open_group(store, mode="r+")
    if workflow_name:
        workflow = json.loads(group.attrs["workflow"])
        workflow["name"] = f"tiny{HOSTILE}"
        group.attrs["workflow"] = json.dumps(workflow)
    n = group["learner"].shape[0]
    group["learner"][...] = np.array([LEARNER] * n, dtype=object)
    settings = [json.loads(str(t)) for t in group["param_json"][...]]
    group["param_json"][...] = np.array([json.dumps({**s, "learner": LEARNER})
                                         for s in settings], dtype=object)
    failed, error = group["failed"][...], group["error"][...].astype(object)
    failed[0, 0], error[0, 0] = True, ERROR
    group["failed"][...], group["error"][...] = failed, error
    consolidate(store)


def consolidate(store) -> None:
    """The consolidated metadata rewritten (what cvflow opens), zarr's note about it quiet."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Consolidated metadata")
        zarr.consolidate_metadata(store)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A tiny real study (diabetes, ridge with 2 alphas, 3 folds) run on the threads cluster;
    tests copy it before tampering."""
    tmp = tmp_path_factory.mktemp("terminal")
    (tmp / "wf.yaml").write_text(WORKFLOW)
    proc = cli("run", "wf.yaml", "--store", "clean.zarr", "--cluster", "threads", cwd=tmp)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return tmp


def copy(study, name: str, **kwargs):
    store = study / name
    shutil.copytree(study / "clean.zarr", store)
    tamper(store, **kwargs)
    return store


@pytest.fixture(scope="module")
def hostile(study):
    return copy(study, "hostile.zarr")


def assert_shown(text: str) -> None:
    """The hostile strings are on screen as escapes, and forge no line of their own."""
    assert "ridge\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\x1b]0;title\\x07\\x9b31m\\rforged" in text
    assert "ValueError: boom\\x1b]52" in text and "\\r0 failed\\n0 of 8 fits failed" in text
    assert not any(line.startswith(("0 of 8 fits failed", "forged", "0 failed"))
                   for line in text.splitlines())


def test_report_shows_a_hostile_store_visibly(hostile):
    proc = cli("report", hostile, cwd=hostile.parent)
    text = terminal_text(proc)
    assert proc.returncode == 0, text
    assert_shown(text)
    assert "1 of 8 fits failed:" in text and "selected: ridge\\x1b]52" in text


def test_status_shows_a_hostile_store_visibly(hostile):
    proc = cli("status", hostile, cwd=hostile.parent)
    text = terminal_text(proc)
    assert proc.returncode == 0, text
    assert_shown(text)
    assert text.startswith(f"{hostile}: 8/8 fits done, 1 failed (complete)\n")


def test_json_output_escapes_and_keeps_the_stored_strings(hostile):
    """--json needs no escaping of its own: json.dumps writes controls as \\u escapes, and the
    strings read back are the store's, unchanged."""
    status = cli("status", hostile, "--json", cwd=hostile.parent)
    info = json.loads(terminal_text(status))
    assert status.returncode == 0
    assert list(info["learners"]) == [LEARNER] and list(info["failures"]) == [ERROR]
    report = cli("report", hostile, "--json", cwd=hostile.parent)
    result = json.loads(terminal_text(report))
    assert report.returncode == 0
    assert result["kfold"]["selected_params"]["learner"] == LEARNER


def test_verify_names_a_hostile_variable_visibly(study):
    """A variable whose name holds control sequences, with a chunk missing: verify names it
    (exit 1 as for any damage), escaped."""
    store = copy(study, "variable.zarr")
    name = f"note{HOSTILE}\r0 damaged"
    group = zarr.open_group(store, mode="r+")
    clean = zarr.open_group(study / "clean.zarr", mode="r")["fit_seconds"]
    array = group.create_array(name, shape=(4,), chunks=(2,), dtype="f8",
                               compressors=clean.compressors)
    array[:] = np.arange(4.0)
    consolidate(store)
    (store / name / "c" / "1").unlink()
    proc = cli("verify", store, cwd=study)
    text = terminal_text(proc)
    assert proc.returncode == 1, text
    assert f"{store}: note\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\x1b]0;title\\x07\\x9b31m\\r0 damaged " \
           "chunk (1,) is missing" in text
    assert not any(line.startswith("0 damaged") for line in text.splitlines())


def test_an_error_line_quoting_a_store_attribute_is_visible(study):
    """The store's estimator options (an attribute) name an unknown option: one error line
    quoting it, exit 2, escaped."""
    store = copy(study, "options.zarr")
    group = zarr.open_group(store, mode="r+")
    group.attrs["estimators"] = json.dumps([["kfold", {f"opt{HOSTILE}\r": 1}]])
    consolidate(store)
    proc = cli("report", store, cwd=study)
    text = terminal_text(proc)
    assert proc.returncode == 2, text
    assert proc.stdout == b""
    assert text.startswith("cvflow: error: store: estimators.kfold.opt\\x1b]52;c;cHduZWQ=\\x07"
                           "\\x1b[2J\\x1b]0;title\\x07\\x9b31m\\r: unknown option of kfold")
    assert text.count("\n") == 1


def test_run_closing_report_shows_stored_errors_visibly(study):
    """`cvflow run` of the workflow on a store an attacker edited (its workflow attribute left
    as is, so the run resumes): its closing report quotes the stored error, escaped."""
    store = copy(study, "run.zarr", workflow_name=False)
    proc = cli("run", "wf.yaml", "--store", store, "--cluster", "threads", cwd=study)
    text = terminal_text(proc)
    assert proc.returncode == 0, text
    assert "ValueError: boom\\x1b]52" in text and "\\r0 failed\\n0 of 8 fits failed" in text
    assert not any(line.startswith("0 of 8 fits failed") for line in text.splitlines())

"""Text for a terminal: strings a store or a workflow holds, shown without controlling it.

A store is data (docs/guide/trust.md), and someone else may have written it: its learner names, param
values, stored error messages and attributes can hold terminal control sequences (``ESC ] 52``
writes the clipboard, ``ESC [ 2 J`` clears the screen, a carriage return overwrites a line and
forges an output such as "0 failed", ``\\x9b`` is a C1 control sequence introducer). Every
text cvflow writes for a person goes through :func:`visible`; JSON output is escaped by
``json.dumps`` already, pages by their HTML escaping.
"""
from __future__ import annotations

# DESIGN CHOICE: every C0 control, DEL and every C1 control is shown as Python's repr shows it
# (``\x1b``, ``\r``, ``\x9b``): the reader sees what the store holds, and nothing else of
# Unicode is touched (accents, CJK, emoji and their joiners stay as they are). A tab is
# harmless and kept; a newline is kept only in a multi-line block, so a one-line field (a
# name, an error message, one line of a report) cannot start a forged line of its own.
# A backslash is kept as is, so the function is idempotent and Windows paths stay readable.
# The bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069) are
# escaped too: they reorder what follows on the line ("Trojan source"), so a stored name could
# make a line read otherwise than it is; letters of right-to-left scripts are not touched.
_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_CONTROLS = [*range(0x00, 0x20), *range(0x7F, 0xA0), *_BIDI]
_LINE = {c: repr(chr(c))[1:-1] for c in _CONTROLS if c != 0x09}
_BLOCK = {c: escape for c, escape in _LINE.items() if c != 0x0A}


def visible(text: object, *, multiline: bool = False) -> str:
    """``text`` (``str()`` of it) for a terminal: each C0/C1 control character but a tab (and
    a newline when ``multiline``), and each bidirectional override, written out as its escape.

    Parameters
    ----------
    text : object
        The string to show (anything else is shown as its ``str()``).
    multiline : bool, default False
        Keep newlines (a block of lines cvflow itself joined); a one-line field shows them as
        ``\\n``.

    Returns
    -------
    str
        The text, each control character written as Python's ``repr`` writes it; the rest
        (backslashes included) unchanged, so ``visible(visible(s)) == visible(s)``.

    Examples
    --------
    >>> visible("ridge\\x1b]0;title\\x07\\r0 failed")
    'ridge\\\\x1b]0;title\\\\x07\\\\r0 failed'
    >>> visible("a\\tb\\nc", multiline=True) == "a\\tb\\nc"
    True
    >>> visible("café 岭回归 🙂")
    'café 岭回归 🙂'
    """
    return str(text).translate(_BLOCK if multiline else _LINE)


def lines(items) -> str:
    """One block of text from ``items``, each a line shown by :func:`visible` (a newline inside
    an item is shown as ``\\n``, never starts a line)."""
    return "\n".join(visible(item) for item in items)

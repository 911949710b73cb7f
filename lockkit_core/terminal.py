"""Text for terminals: keys and other stored strings with their control characters escaped.

Keys come from requests and task arguments, holders from what a process wrote into the store:
either may carry terminal escape sequences (``\\x1b]...``), a newline that forges a line of a
listing, or a bidi override that reorders what is shown. Every human output of the ``lockkit``
commands (``lockkit``, ``flask lockkit``, ``manage.py lockkit``, ``celery lockkit``) passes such
text through :func:`printable`; ``--json`` output is escaped by JSON itself.
"""

from __future__ import annotations

import unicodedata

__all__ = ["printable"]

#: Unicode categories that do not print: controls (C0, DEL, C1), formats (bidi overrides,
#: zero-width characters), line and paragraph separators, and unassigned code points
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def printable(text: str) -> str:
    """``text`` with every character that does not print escaped as Python writes it
    (``\\x1b``, ``\\n``, ``\\u202e``); everything else, letters of any script included, is
    kept as it is."""
    if text.isprintable():
        return text  # the common case: nothing to look at twice
    return "".join(
        _escape(ch) if unicodedata.category(ch) in _HIDDEN_CATEGORIES else ch for ch in text
    )


def _escape(ch: str) -> str:
    escaped = repr(ch)[1:-1]
    if escaped != ch and escaped.startswith("\\"):
        return escaped
    code = ord(ch)
    return (
        f"\\x{code:02x}"
        if code < 0x100
        else f"\\u{code:04x}"
        if code < 0x10000
        else f"\\U{code:08x}"
    )

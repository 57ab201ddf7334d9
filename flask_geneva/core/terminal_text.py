"""Stored text made safe for an operator's terminal: the CLI's output and the logs.

Step names, workflow types, hero types and error messages are stored text: an
exception message can hold ``ESC [2J`` (clear the screen), an OSC sequence that
retitles the window or writes a link, or a bidirectional override that reorders
what the operator reads. The CLI prints every such value through
:func:`escape_control_characters`, so each control character is shown as a
visible escape (``\\x1b``) instead of being obeyed; every logger of the package
escapes the values it formats with it too (R-LOG-07,
:mod:`flask_geneva.core.tagged_logging`).

Pure code: no database, no Flask.

.. versionadded:: 0.1
"""

from __future__ import annotations

import re

__all__ = ["escape_control_characters"]

# C0 controls (tab and newline included: one stored value is one output line),
# DEL, C1 controls (0x9b is a one-byte CSI), and the Unicode bidirectional
# embedding, override and isolate characters.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape_control_characters(text: str) -> str:
    """Return ``text`` with each control character shown as a visible escape.

    ``"a\\x1b[2Jb"`` becomes ``"a\\\\x1b[2Jb"``: the ESC is printed as the four
    characters ``\\x1b``. Escaped are the C0 controls (tab, newline and carriage
    return included), DEL, the C1 controls and the bidirectional formatting
    characters (U+200E/F, U+202A..U+202E, U+2066..U+2069). Other text, including
    non-ASCII letters, is unchanged.

    Args:
        text: Any text, typically a value read from the database.

    Returns:
        The text with every control character replaced by ``\\xNN`` or ``\\uNNNN``.

    .. versionadded:: 0.1
    """
    return _CONTROL.sub(_escape, text)

"""Control characters of stored text shown as visible escapes (the CLI's output)."""

from __future__ import annotations

import pytest

from flask_geneva.core.terminal_text import escape_control_characters

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b[2J\x1b[Hcleared", "\\x1b[2J\\x1b[Hcleared"),
        ("title\x1b]0;x\x07", "title\\x1b]0;x\\x07"),
        ("two\nlines\r\tand tab", "two\\x0alines\\x0d\\x09and tab"),
        ("del\x7f c1\x9b", "del\\x7f c1\\x9b"),
        ("abc\u202edef\u2066", "abc\\u202edef\\u2066"),
        ("Grüße 日本 ✓", "Grüße 日本 ✓"),
    ],
)
def test_control_characters_become_visible_escapes(text, shown):
    """C0, DEL, C1 and bidi controls are escaped; other text is unchanged (R-CLI-01)."""
    assert escape_control_characters(text) == shown

"""MkDocs hooks: put the generated reference into the pages that ask for it.

A page containing ``<!-- geneva:settings -->`` gets the settings table, one with
``<!-- geneva:cli -->`` the ``flask geneva`` reference, one with
``<!-- geneva:transitions -->`` the transition table, and one with
``<!-- geneva:changelog -->`` the repository's CHANGELOG.md, all written at
build time from the code (:mod:`flask_geneva.cli.reference`), so they cannot drift.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask_geneva.cli.reference import cli_reference
from flask_geneva.cli.reference import settings_reference
from flask_geneva.cli.reference import transitions_reference

ROOT = Path(__file__).resolve().parent.parent


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Replace the generated-content markers of one page (MkDocs event)."""
    if "<!-- geneva:settings -->" in markdown:
        markdown = markdown.replace("<!-- geneva:settings -->", settings_reference())
    if "<!-- geneva:cli -->" in markdown:
        markdown = markdown.replace("<!-- geneva:cli -->", cli_reference())
    if "<!-- geneva:transitions -->" in markdown:
        markdown = markdown.replace(
            "<!-- geneva:transitions -->", transitions_reference()
        )
    if "<!-- geneva:changelog -->" in markdown:
        changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
        # The page has its own title; drop the file's.
        body = changelog.split("\n", 1)[1] if changelog.startswith("# ") else changelog
        markdown = markdown.replace("<!-- geneva:changelog -->", body)
    return markdown

"""The README's admin screenshots exist as the script writes them (issue 21).

The README shows two screenshots of the admin (``docs/images/*.png``), made by
``python -m tests.browser.readme_screenshots`` at 1280 px. A renamed or deleted
image would leave a broken picture on the project page; this catches it.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from tests.browser.readme_screenshots import SHOTS

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

ROOT = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == PNG_SIGNATURE, path
    width, height = struct.unpack(">II", header[16:24])
    return width, height


def test_the_readme_shows_the_admin_screenshots_the_script_makes():
    """Every image the README links exists as a 1280 px wide PNG, and they are
    exactly the screenshots readme_screenshots.py writes (at least two)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = re.findall(r"!\[[^\]]+\]\((docs/images/[^)]+\.png)\)", readme)
    assert len(linked) >= 2
    assert sorted(Path(link).name for link in linked) == sorted(SHOTS)
    for link in linked:
        width, height = _png_size(ROOT / link)
        assert width == 1280, (link, width)
        assert height == SHOTS[Path(link).name][1], (link, height)

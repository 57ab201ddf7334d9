"""The admin screenshots exist as the script writes them and are shown (issues
21, 39).

The README and the documentation show screenshots of the admin
(``docs/images/*.png``), made by ``python -m tests.browser.readme_screenshots``
at 1280 px from the example app's demo. A renamed or deleted image would leave
a broken picture on the project page, an image no page shows is dead weight;
this catches both.
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
#: An image of the README stays small enough for a project page.
MAX_BYTES = 200 * 1024


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == PNG_SIGNATURE, path
    width, height = struct.unpack(">II", header[16:24])
    return width, height


def test_the_readme_shows_the_admin_screenshots_the_script_makes():
    """Every image the README links exists as a 1280 px wide PNG under 200 KiB,
    and they are exactly the screenshots readme_screenshots.py writes (the
    overview, the executions list, a workflow's page and the start page)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = re.findall(r"!\[[^\]]+\]\((docs/images/[^)]+\.png)\)", readme)
    assert len(linked) >= 4
    assert sorted(Path(link).name for link in linked) == sorted(SHOTS)
    for link in linked:
        width, height = _png_size(ROOT / link)
        assert width == 1280, (link, width)
        assert height == SHOTS[Path(link).name][1], (link, height)
        assert (ROOT / link).stat().st_size < MAX_BYTES, link


def test_every_image_is_shown_by_a_page():
    """Each PNG in docs/images is shown by the README or a documentation page
    (``images/NAME.png`` from docs/), and each image a documentation page
    shows exists."""
    images = {path.name for path in (ROOT / "docs" / "images").glob("*.png")}
    shown = set(
        re.findall(
            r"\(docs/images/([^)]+\.png)\)",
            (ROOT / "README.md").read_text(encoding="utf-8"),
        )
    )
    for page in (ROOT / "docs").glob("*.md"):
        text = page.read_text(encoding="utf-8")
        for name in re.findall(r"!\[[^\]]*\]\(images/([^)]+\.png)\)", text):
            assert name in images, (page.name, name)
            shown.add(name)
    assert images <= shown, sorted(images - shown)
    assert images == set(SHOTS)

"""The sdist and wheel carry the admin templates and static files (R-ADM templates/assets)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ALLOWED_ASSET_SUFFIXES = {".html", ".css", ".js", ".svg", ".png"}

pytestmark = pytest.mark.packaging


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the sdist, then the wheel from it (``python -m build``)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=170,
    )
    return out


def test_wheel_holds_admin_templates_and_static_files(dist):
    """The wheel ships flask_geneva/templates/geneva/... and flask_geneva/static/geneva/... with allowed suffixes only."""
    (wheel,) = dist.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "flask_geneva/templates/geneva/admin/workflow_detail.html" in names
    assert "flask_geneva/templates/geneva/admin/_macros.html" in names
    assert "flask_geneva/static/geneva/geneva.css" in names
    assert "flask_geneva/admin/views.py" in names
    assets = [
        n
        for n in names
        if n.startswith(("flask_geneva/templates/", "flask_geneva/static/"))
    ]
    assert all(Path(n).suffix in ALLOWED_ASSET_SUFFIXES for n in assets), assets
    assert not [n for n in names if n.startswith(("tests/", "example_app/"))]


def test_sdist_holds_top_level_templates_static_and_tests(dist):
    """The sdist keeps the top-level templates/, static/ and tests/ folders."""
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert "templates/geneva/admin/workflow_detail.html" in names
    assert "static/geneva/geneva.css" in names
    assert "tests/admin/test_buttons.py" in names

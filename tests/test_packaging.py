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


USER_SCRIPT = """
import importlib.metadata as metadata
import importlib.util

from flask import Flask
from flask_sqlalchemy import SQLAlchemy

import flask_geneva
from flask_geneva import Geneva
from flask_geneva import GenevaConfigurationError
from flask_geneva import step
from flask_geneva.testing import speedrun_workflow

assert flask_geneva.__version__ == metadata.version("flask-geneva")
assert importlib.util.find_spec("psycopg") is not None
assert importlib.util.find_spec("redis") is not None
assert importlib.util.find_spec("flask_admin") is None
plugins = {ep.name for ep in metadata.entry_points(group="pytest11")}
assert "flask_geneva.pytest_plugin" in plugins, plugins

db = SQLAlchemy()
geneva = Geneva(db)


class Hello(geneva.Workflow):
    __geneva_type__ = "Hello"
    may_proceed_without_hero = True

    @step
    def greet(self):
        print("greeted")


app = Flask(__name__)
app.config.update(
    TESTING=True,
    SQLALCHEMY_DATABASE_URI="sqlite://",
    GENEVA_TASK_BACKEND="recording",
)
db.init_app(app)
geneva.init_app(app)
with app.app_context():
    db.create_all()
    workflow = speedrun_workflow(Hello.create())
    print("state", workflow.state)
try:
    import flask_geneva.admin  # noqa: F401
except GenevaConfigurationError as exc:
    print("admin:", exc)
"""


def test_readme_user_install_works_in_a_fresh_venv_from_the_wheel(dist, tmp_path):
    """`pip install "flask-geneva[postgresql,redis]"` from the wheel runs a workflow; the admin asks for its extra; the example app runs with the `example` extra alone."""
    (wheel,) = dist.glob("*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    pip = [
        str(python),
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]
    subprocess.run([*pip, f"{wheel}[postgresql,redis]"], check=True, timeout=600)
    script = tmp_path / "user_app.py"
    script.write_text(USER_SCRIPT)
    result = subprocess.run(
        [str(python), str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "greeted" in result.stdout
    assert "state finished" in result.stdout
    assert "admin: the flask_geneva admin needs Flask-Admin" in result.stdout
    assert "pip install 'flask-geneva[admin]'" in result.stdout

    subprocess.run([*pip, f"{wheel}[example]"], check=True, timeout=600)
    demo = subprocess.run(
        [
            str(python),
            "-m",
            "example_app",
            "demo",
            "--users",
            "3",
            "--exit-when-settled",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "every workflow settled" in demo.stdout
    toolchain = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('pytest'))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert toolchain.stdout.strip() == "None"

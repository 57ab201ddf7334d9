"""The import contracts in pyproject.toml hold, and can fail (issue 33).

``lint-imports`` (import-linter) reads ``[tool.importlinter]``: the package's
layers (exhaustive: every subpackage and root module is placed), the layers
inside ``engine/``, and no web or task framework below ``ext/``. CI runs it as a
step of its own; these tests run it too, on the tree and on a scratch copy of
the package with one deliberate violation each, so a contract that stopped
checking anything would be noticed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.worker_harness import run

# Run once, in the SQLite pass: static import checks, independent of the database.
pytestmark = pytest.mark.database_independent

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """Run ``lint-imports`` with ``root``'s pyproject.toml and package first on the path."""
    return run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root)},
        timeout=120,
    )


@pytest.fixture
def scratch_copy(tmp_path: Path) -> Path:
    """A copy of the package and its pyproject.toml, to break on purpose."""
    shutil.copytree(
        REPO / "flask_geneva",
        tmp_path / "flask_geneva",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _lint_with(root: Path, module: str, line: str) -> str:
    """Append ``line`` to ``module`` (a path below ``root``), run ``lint-imports``
    there and return its output; it must report a broken contract."""
    path = root / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")
    result = _lint_imports(root)
    assert result.returncode == 1, result.stdout
    return result.stdout


def test_the_package_keeps_its_import_contracts():
    """Every contract in pyproject.toml is kept by the package as it is (issue 33)."""
    result = _lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


def test_an_import_up_the_layers_breaks_the_layers_contract(scratch_copy):
    """core importing ext (a layer far above it) is reported with both module names."""
    output = _lint_with(
        scratch_copy,
        "flask_geneva/core/clock.py",
        "from flask_geneva.ext import app_state  # noqa: F401",
    )
    assert "flask_geneva.core.clock -> flask_geneva.ext.app_state" in output
    assert "The package's layers" in output


def test_an_import_up_the_engine_breaks_the_engine_contract(scratch_copy):
    """The transition table importing the executor breaks the engine's own layers."""
    output = _lint_with(
        scratch_copy,
        "flask_geneva/engine/transitions/table.py",
        "from flask_geneva.engine.executor import step  # noqa: F401",
    )
    assert "Inside the engine" in output
    assert "flask_geneva.engine.transitions.table" in output


def test_a_framework_import_in_the_engine_breaks_the_forbidden_contract(scratch_copy):
    """The engine importing Flask, even inside a function, is reported (STYLE §3)."""
    output = _lint_with(
        scratch_copy,
        "flask_geneva/engine/scheduling.py",
        "def _uses_flask():\n    import flask  # noqa: F401",
    )
    assert "flask_geneva.engine.scheduling -> flask" in output


def test_a_subpackage_nobody_placed_breaks_the_exhaustive_layers(scratch_copy):
    """A new subpackage must be placed in a layer by its author before CI passes."""
    (scratch_copy / "flask_geneva" / "limits").mkdir()
    (scratch_copy / "flask_geneva" / "limits" / "__init__.py").write_text("")
    result = _lint_imports(scratch_copy)
    assert result.returncode == 1, result.stdout
    assert "flask_geneva.limits" in result.stdout

"""The pre-0.2 module paths still import, warn, and are used nowhere in the repo (issue 33).

The flat modules of the package root moved into the layer folders; users'
imports of the old paths keep working (the same module object, with a
``DeprecationWarning`` naming the new path) until 1.0. Our own code, tests, docs
and examples use the new paths only.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flask_geneva.core.moved_modules import MOVED_MODULES

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

REPO = Path(__file__).resolve().parents[1]


def _fresh_import(name: str) -> str:
    """Import ``name`` in a new interpreter, warnings as errors; return stderr."""
    result = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", f"import {name}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.stderr


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("flask_geneva.executor", "flask_geneva.engine.executor.step"),
        ("flask_geneva.store", "flask_geneva.db.locks"),
        ("flask_geneva.schema.units", "flask_geneva.db.install.units"),
        ("flask_geneva.tasks", "flask_geneva.ext.tasks"),
    ],
)
def test_an_old_path_is_the_new_module_with_a_warning(old, new):
    """``import`` of an old path returns the new module object itself and warns naming the new path."""
    with pytest.warns(DeprecationWarning, match=" moved to ") as warned:
        module = importlib.import_module(old)
    assert f"{old} moved to {new}" in [str(w.message).split(";")[0] for w in warned]
    assert module is importlib.import_module(new)
    # The module keeps its own spec: the old name is only an alias.
    assert module.__spec__ is not None
    assert module.__spec__.name == new


def test_an_old_root_import_of_a_moved_module_still_works():
    """``from flask_geneva import store`` (the old style) gives the new module, with a warning."""
    sys.modules.pop("flask_geneva.operator_resume", None)
    with pytest.warns(DeprecationWarning, match="flask_geneva.engine.operators.resume"):
        from flask_geneva import operator_resume
    assert operator_resume is importlib.import_module(
        "flask_geneva.engine.operators.resume"
    )


def test_a_name_of_the_old_policies_module_resolves_with_a_warning():
    """``from flask_geneva.policies import ExceptionPolicy`` (policies was a module) still works."""
    from flask_geneva.policies.exception_policy import ExceptionPolicy as Moved

    with pytest.warns(
        DeprecationWarning, match="policies.exception_policy.ExceptionPolicy"
    ):
        from flask_geneva.policies import ExceptionPolicy
    assert ExceptionPolicy is Moved
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = importlib.import_module("flask_geneva.policies").nothing_here


def test_every_old_path_names_a_module_that_exists():
    """Each entry of MOVED_MODULES points at an importable module under the new layout."""
    missing = []
    for new in sorted(set(MOVED_MODULES.values())):
        try:
            importlib.import_module(new)
        except ImportError as error:  # pragma: no cover - reported below
            missing.append(f"{new}: {error}")
    assert missing == []


def test_importing_the_public_api_touches_no_old_path():
    """``import flask_geneva`` and its public modules use new paths only (no warning)."""
    names = "flask_geneva, flask_geneva.testing, flask_geneva.cli, flask_geneva.admin"
    assert _fresh_import(names) == ""


_OLD_PATH = re.compile(
    r"(?<![\w.])flask_geneva\.("
    + "|".join(
        re.escape(old.removeprefix("flask_geneva."))
        for old in sorted(MOVED_MODULES, key=len, reverse=True)
    )
    + r")(?![\w])"
)
#: Strings that look like old paths but are not module paths: logger names,
#: Celery task names, an entry-point group, a dispatch uid, and the history.
_NOT_MODULE_PATHS = (
    '"flask_geneva.housekeeping"',
    "`flask_geneva.housekeeping` beat task",
    'logger="flask_geneva.housekeeping"',
    '"flask_geneva.tasks"',
    '"flask_geneva.integrations"',
    "``flask_geneva.integrations``",
    "(group `flask_geneva.integrations`)",
    "flask_geneva.integrations:admin",
    '"flask_geneva.worker_registry"',
    "flask_geneva.housekeeping runs a full pass",
)


def test_the_repository_uses_no_old_module_path():
    """Code, tests, docs and examples name the new module paths (CHANGELOG keeps the history)."""
    tracked = subprocess.run(
        ["git", "ls-files", "flask_geneva", "tests", "docs", "example_app", "bench"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = []
    for name in tracked:
        path = REPO / name
        if path.suffix not in {".py", ".md", ".html", ".toml"} or not path.exists():
            continue
        if name in {"docs/changelog.md", "flask_geneva/core/moved_modules.py"}:
            continue
        if name == Path(__file__).relative_to(REPO).as_posix():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            cleaned = line
            for allowed in _NOT_MODULE_PATHS:
                cleaned = cleaned.replace(allowed, "")
            if _OLD_PATH.search(cleaned):
                found.append(f"{name}:{number}: {line.strip()}")
    assert found == []

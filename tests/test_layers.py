"""Layering (STYLE §3): the executor loads neither Celery nor Flask-Admin; the admin
sits above the extension, in no import cycle (issue 15)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.import_graph import import_cycles
from tests.support.import_graph import import_graph
from tests.support.worker_harness import python_code
from tests.support.worker_harness import run

# Run once, in the SQLite pass: static import checks, independent of the database.
pytestmark = pytest.mark.database_independent

REPO = Path(__file__).resolve().parents[1]


def test_executor_imports_neither_celery_nor_flask_admin():
    """Importing flask_geneva and its executor loads no celery or flask_admin module."""
    code = (
        "import sys, flask_geneva, flask_geneva.engine.executor.step, flask_geneva.testing\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('celery', 'flask_admin'))\n"
        "print(','.join(bad))\n"
    )
    result = run(python_code(code), timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


PACKAGE = REPO / "flask_geneva"


def _is_admin(module: str) -> bool:
    return module == "flask_geneva.admin" or module.startswith("flask_geneva.admin.")


def test_the_admin_is_in_no_import_cycle():
    """No import cycle (function-level imports included) involves flask_geneva.admin or a submodule (issue 15)."""
    cycles = import_cycles(import_graph(PACKAGE))
    assert [cycle for cycle in cycles if any(map(_is_admin, cycle))] == []


def test_only_the_admin_imports_the_admin():
    """No module outside flask_geneva.admin imports it, not even inside a function: the extension finds it by entry point (issue 15, R-ADM-01)."""
    graph = import_graph(PACKAGE)
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        if not _is_admin(module)
        for target in targets
        if _is_admin(target)
    )
    assert offenders == []


def test_the_extension_mounts_the_admin_through_its_entry_point():
    """The `admin` integration entry point is flask_geneva.admin.init_standalone_admin (R-ADM-01)."""
    from flask_geneva.admin import init_standalone_admin
    from flask_geneva.ext.integrations import load_integration

    assert load_integration("admin") is init_standalone_admin


def test_an_integration_that_is_not_installed_is_named_with_the_installed_ones():
    """Asking for an integration that has no entry point names it and the installed ones."""
    from flask_geneva.exceptions import GenevaConfigurationError
    from flask_geneva.ext.integrations import load_integration

    with pytest.raises(GenevaConfigurationError, match=r"'nope'.*installed: 'admin'"):
        load_integration("nope")


def test_the_import_graph_sees_function_level_and_relative_imports(tmp_path):
    """The graph counts an import inside a function and a relative import, and skips TYPE_CHECKING blocks."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from pkg.sub import b\n")
    (package / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n"
        "from . import c\n"
    )
    (package / "sub" / "c.py").write_text("def g():\n    import pkg.a\n")
    graph = import_graph(package)
    assert graph["pkg.a"] == {"pkg.sub", "pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.sub", "pkg.sub.c"}
    assert import_cycles(graph) == [["pkg.a", "pkg.sub", "pkg.sub.b", "pkg.sub.c"]]


def test_mounting_without_the_entry_point_metadata_names_the_group(monkeypatch):
    """Where the package metadata lacks the entry point, loading the admin raises naming the group (R-ADM-01)."""
    from flask_geneva.exceptions import GenevaConfigurationError
    from flask_geneva.ext import integrations

    monkeypatch.setattr(integrations, "entry_points", lambda group: ())
    integrations.load_integration.cache_clear()
    try:
        with pytest.raises(
            GenevaConfigurationError,
            match=r"'admin'.*'flask_geneva\.integrations'; installed: none",
        ):
            integrations.load_integration("admin")
    finally:
        integrations.load_integration.cache_clear()


def test_a_model_method_without_a_registered_engine_says_how_to_get_one(monkeypatch):
    """With no engine registered, a model method raises naming flask_geneva.ext.model_engine."""
    from flask_geneva.models import services as model_services

    monkeypatch.setattr(model_services, "_registered", None)
    with pytest.raises(RuntimeError, match=r"import flask_geneva .*model_engine"):
        model_services.model_engine()


def test_every_engine_operation_a_model_method_calls_is_registered_once():
    """The operations the models look up by name are exactly the registered ones.

    Each model method is the one definition of its operation; the engine's table
    (flask_geneva.ext.model_engine.OPERATIONS) names the function that runs it. A
    name only on one side is a typo or a dead entry (issue 33).
    """
    import ast

    from flask_geneva.ext.model_engine import OPERATIONS

    used = set()
    for path in (PACKAGE / "models").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            function = node.func
            if (
                isinstance(function, ast.Attribute)
                and isinstance(function.value, ast.Call)
                and getattr(function.value.func, "id", None) == "model_engine"
            ):
                used.add(function.attr)
            elif getattr(function, "id", None) == "raise_from_engine":
                used.add(node.args[0].value)
    assert used == set(OPERATIONS)


def test_the_package_has_no_import_cycle():
    """No two modules of flask_geneva import each other, directly or through others.

    Function-level imports count: hiding an import inside a function does not
    remove the dependency (issue 15, docs/architecture.md).
    """
    assert import_cycles(import_graph(PACKAGE)) == []

"""Every SQL statement on geneva's tables is built in the store layer (issue 15).

"One write path": one small package of store modules owns every statement on
``geneva_drive_workflows`` and ``geneva_drive_step_executions``; the engine, the
CLI and the admin call its named functions and never build SQL themselves.
This test parses every module of ``flask_geneva`` with :mod:`ast` and reports,
outside :data:`STORE_PACKAGES` (and :data:`STORE_MODULES`), each place that

- calls a SQLAlchemy statement or expression builder (``select``, ``update``,
  ``delete``, ``insert``, ``text``, ``exists``, ``union``, ``and_``/``or_``,
  ``literal``, ``case``, ``null`` ... and any ``func.<name>`` aggregate),
  whether reached as ``sa.select`` or imported by name;
- refines a statement (``.where``, ``.filter``, ``.filter_by``, ``.group_by``,
  ``.having``, ``.select_from``, ``.with_for_update``, ``.returning``,
  ``.values(...)`` with arguments, ``.subquery``, ``.cte``, ``.options``,
  ``.execution_options``, ``.with_only_columns``...; ``.join`` is left out, it
  cannot be told from ``str.join``, and a join comes with a ``select`` anyway);
- uses the legacy query API (``Session.query`` / ``Model.query``).

A store function may hand back a ``Select`` for its caller to run or page
through: ordering and paging (``.order_by``, ``.limit``, ``.offset``) stay
allowed outside the store, which is what Flask-Admin's list views add. ORM
identity lookups (``Session.get``) and relationship loads are the ORM's own
reads, not statements a module builds.

Left out on purpose:

- ``schema/`` and the model definitions (:data:`DDL_MODULES`): DDL, install
  units, Alembic templates and the ``Index(..., postgresql_where=text(...))``
  of the mapped classes are their own concern (the schema), not statements
  run on the rows;
- :data:`HOST_TABLE_FUNCTIONS`: functions that build statements on the host
  application's tables (cursor iteration over the user's own models), not on
  geneva's.

Dialect quirks (``SKIP LOCKED``, advisory locks, ``RETURNING``, SQLite's
``BEGIN IMMEDIATE``) are inside the store modules too, so this test keeps them
there.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

PACKAGE = Path(__file__).resolve().parents[1] / "flask_geneva"

#: The store layer: every module under ``db/`` builds statements on geneva's
#: tables (issue 33: one folder for them), and no module outside it does, but
#: these (the step executions' row helpers still apply transitions, so they sit
#: in the engine).
STORE_PACKAGES = ("flask_geneva/db/",)
STORE_MODULES = frozenset({"flask_geneva/engine/step_execution_rows.py"})

#: Schema definition (DDL): table and index definitions, install units, templates.
DDL_MODULES = frozenset(
    {
        "flask_geneva/models/factory.py",
        "flask_geneva/db/column_types.py",
        "flask_geneva/models/workflow_signal.py",
    }
)
DDL_PACKAGES = ("flask_geneva/db/install/",)

#: (module, function) pairs whose statements run on the host's own tables.
HOST_TABLE_FUNCTIONS = frozenset(
    {
        # Cursor iteration over the user's models (R-IT-*): the user's entity.
        ("flask_geneva/engine/iteration.py", "IterableStep._batch"),
        ("flask_geneva/engine/iteration.py", "IterableStep._keyset_rows"),
    }
)

#: SQLAlchemy callables that build a statement or a SQL expression.
BUILDERS = frozenset(
    {
        "select",
        "update",
        "delete",
        "insert",
        "text",
        "exists",
        "union",
        "union_all",
        "and_",
        "or_",
        "not_",
        "case",
        "literal",
        "literal_column",
        "null",
        "tuple_",
        "bindparam",
        "lambda_stmt",
        "table",
        "column",
        "cast",
    }
)

#: Method names that refine a statement.
REFINERS = frozenset(
    {
        "where",
        "filter",
        "filter_by",
        "group_by",
        "having",
        "select_from",
        "with_for_update",
        "returning",
        "subquery",
        "scalar_subquery",
        "cte",
        "with_only_columns",
        "outerjoin",
        "correlate",
        "options",
        "execution_options",
    }
)

SQLALCHEMY_ALIASES = {"sa", "sqlalchemy"}


def _sqlalchemy_names(tree: ast.AST) -> dict[str, str]:
    """``{local name: sqlalchemy name}`` bound by ``from sqlalchemy[.x] import ...``."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "sqlalchemy"
        ):
            for alias in node.names:
                if alias.name in BUILDERS or alias.name == "func":
                    names[alias.asname or alias.name] = alias.name
    return names


def _rooted_in_sqlalchemy(node: ast.AST) -> bool:
    """``sa``, ``sa.sql``, ``sqlalchemy.sql.expression``..."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in SQLALCHEMY_ALIASES


def _is_func(node: ast.AST, imported: dict[str, str]) -> bool:
    """``sa.func`` / ``func`` (imported from sqlalchemy, under any name)."""
    if isinstance(node, ast.Attribute) and node.attr == "func":
        return _rooted_in_sqlalchemy(node.value)
    return isinstance(node, ast.Name) and imported.get(node.id) == "func"


def _finding(call: ast.AST, imported: dict[str, str]) -> str | None:
    """What ``call`` does that only the store may do, or None."""
    if isinstance(call, ast.Attribute) and call.attr == "query":
        if isinstance(call.ctx, ast.Load):
            return "legacy .query"
        return None
    if not isinstance(call, ast.Call):
        return None
    target = call.func
    if isinstance(target, ast.Name) and imported.get(target.id, "func") != "func":
        return f"{target.id}()"
    if not isinstance(target, ast.Attribute):
        return None
    owner = target.value
    if target.attr in BUILDERS and _rooted_in_sqlalchemy(owner):
        return f"{ast.unparse(owner)}.{target.attr}()"
    if _is_func(owner, imported):
        return f"func.{target.attr}()"
    if target.attr in REFINERS:
        return f".{target.attr}()"
    if target.attr == "values" and (call.args or call.keywords):
        return ".values(...)"
    return None


def statement_builders(package: Path) -> dict[str, list[str]]:
    """Map each module outside the store layer to what it builds, ``["fn:line what"]``.

    Args:
        package: The package folder (``.../flask_geneva``).

    Returns:
        ``{"flask_geneva/engine/operators/housekeeping.py": ["_purge:195 sa.delete()", ...]}``,
        empty when every statement is built in the store modules.
    """
    found: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package.parent).as_posix()
        if relative in STORE_MODULES or relative in DDL_MODULES:
            continue
        if relative.startswith(STORE_PACKAGES):
            continue
        if relative.startswith(DDL_PACKAGES):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = _sqlalchemy_names(tree)
        for function, node in _walk_with_function(tree):
            what = _finding(node, imported)
            if what is None or (relative, function) in HOST_TABLE_FUNCTIONS:
                continue
            found.setdefault(relative, []).append(f"{function}:{node.lineno} {what}")  # type: ignore[attr-defined]
    return found


def _walk_with_function(tree: ast.AST) -> list[tuple[str, ast.AST]]:
    """Every node with the name of the outermost function (or class) around it."""
    out: list[tuple[str, ast.AST]] = []
    stack: list[tuple[str, ast.AST]] = [("<module>", tree)]
    while stack:
        owner, node = stack.pop()
        for child in ast.iter_child_nodes(node):
            name = owner
            if owner == "<module>" and isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            ):
                name = child.name
            elif isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef
            ) and isinstance(node, ast.ClassDef):
                name = f"{owner}.{child.name}"
            out.append((name, child))
            stack.append((name, child))
    return out


def test_only_the_store_layer_builds_statements_on_genevas_tables():
    """No module outside the store layer builds SQL (issue 15, one write path; R-DM-41)."""
    assert statement_builders(PACKAGE) == {}


def test_the_check_finds_statements_built_outside_the_store(tmp_path):
    """A local ``select``/``update``, a ``func`` count and ``.query`` are all reported."""
    package = tmp_path / "flask_geneva"
    package.mkdir()
    (package / "sweeper.py").write_text(
        "import sqlalchemy as sa\n"
        "from sqlalchemy import func as f, update\n"
        "def sweep(session, cls):\n"
        "    session.execute(update(cls).values(state='x'))\n"
        "    n = session.scalar(sa.select(f.count()).select_from(cls))\n"
        "    session.execute(sa.sql.expression.text('VACUUM'))\n"
        "    return cls.query.all(), n, {}.values(), ', '.join(['a'])\n",
        encoding="utf-8",
    )
    (package / "db").mkdir()
    (package / "db" / "locks.py").write_text(
        "import sqlalchemy as sa\ndef rows(cls):\n    return sa.select(cls).where(cls.id > 0)\n",
        encoding="utf-8",
    )
    found = statement_builders(package)
    assert set(found) == {"flask_geneva/sweeper.py"}
    whats = sorted(entry.split(" ", 1)[1] for entry in found["flask_geneva/sweeper.py"])
    assert whats == [
        ".select_from()",
        ".values(...)",
        "func.count()",
        "legacy .query",
        "sa.select()",
        "sa.sql.expression.text()",
        "update()",
    ]

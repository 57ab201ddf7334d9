"""No private name of another library is used (issue 15: public SQLAlchemy API only).

Every ``obj._name`` attribute access in ``flask_geneva`` must name something
flask_geneva itself defines. A private attribute of SQLAlchemy (``_commit_all``,
``_register_persistent``...) changes without notice between releases; the write
path keeps instances in step through public API only (R-DM-41).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

PACKAGE = Path(__file__).resolve().parents[1] / "flask_geneva"

#: Underscore names that are documented public API of their library.
DOCUMENTED = {
    # werkzeug.local.LocalProxy._get_current_object, documented by Flask.
    "_get_current_object",
    # sys._getframe, documented in the Python library reference.
    "_getframe",
}


def _defined_and_used(package: Path) -> tuple[set[str], dict[str, list[str]]]:
    defined: set[str] = set()
    used: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                defined.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.Attribute):
                if isinstance(node.ctx, ast.Store):
                    defined.add(node.attr)
                elif node.attr.startswith("_") and not node.attr.startswith("__"):
                    used.setdefault(node.attr, []).append(
                        f"{path.relative_to(package.parent)}:{node.lineno}"
                    )
            elif isinstance(node, ast.alias):
                defined.add(node.asname or node.name.split(".")[-1])
            elif isinstance(node, ast.arg):
                defined.add(node.arg)
    return defined, used


def test_no_private_attribute_of_another_library_is_used():
    """Each ``x._name`` in the package is flask_geneva's own name or a documented one."""
    defined, used = _defined_and_used(PACKAGE)
    foreign = {
        name: places
        for name, places in used.items()
        if name not in defined and name not in DOCUMENTED
    }
    assert foreign == {}


def test_the_check_finds_a_private_sqlalchemy_call(tmp_path):
    """The check reports a private attribute the package does not define."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "rows.py").write_text(
        "def mark_clean(state, session):\n"
        "    state._commit_all(state.dict, session.identity_map)\n",
        encoding="utf-8",
    )
    defined, used = _defined_and_used(package)
    assert "_commit_all" in used
    assert "_commit_all" not in defined

"""The layer order holds (issue 15, docs/architecture.md "Layers").

Every module of the package belongs to exactly one of five layers, and imports
(module-level and function-level alike, read with ``ast``) only from its own
layer or a lower one. The four lower layers, the engine included, import
neither Flask nor Celery nor Flask-Admin: the engine gets its settings,
publisher and models from its caller (``EngineContext``). A new module must be
placed in :data:`LAYERS` before this test passes, which is where its author
decides what it may depend on.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.import_graph import _runtime_imports
from tests.import_graph import import_graph
from tests.import_graph import module_names

# Run once, in the SQLite pass: static import checks, independent of the database.
pytestmark = pytest.mark.backends("sqlite")

PACKAGE = Path(__file__).resolve().parents[1] / "flask_geneva"

#: Layer number -> (name, modules or packages; a name ending in ".*" covers a package).
LAYERS: dict[int, tuple[str, tuple[str, ...]]] = {
    1: (
        "foundations: pure code, no database access",
        (
            "exceptions",
            "clock",
            "durations",
            "keys",
            "terminal_text",
            "config",
            "setting_descriptions",
            # One GENEVA_* value read and checked (split from config).
            "setting_values",
            "dsl",
            "dsl.*",
            "policies",
            "policy_matchers",
            "policy_resolution",
            "backoff",
            "release_spread",
            "task_failures",
            "job_options",
            "cursors",
            "signals",
            # What a wait_for step waits for (workflow signals, SPEC §23).
            "signal_matchers",
            "error_reporting",
            "metrics",
            "tagged_logging",
            "publications",
            "transactions",
            "heroes",
        ),
    ),
    2: (
        "models: the ORM classes users touch",
        (
            "model_states",
            "model_columns",
            "model_services",
            "workflow_model",
            "workflow_actions",
            "step_execution_model",
            "model_factory",
            "models",
            "transition_types",
            # The workers table (build_models defines it) and its statements.
            "worker_rows",
            # The database's clock as a SQL expression (worker heartbeats, R-WRK-15).
            "database_time",
            # The maintenance runs table (build_models defines it) and its statements.
            "maintenance_rows",
            # The admin's hourly outcome counts (build_models defines the table).
            "store_outcome_hours",
            "store_model_queries",
            # The WorkflowSignal model (geneva_drive_signals).
            "signal_model",
        ),
    ),
    3: (
        "data: the write path and every locking read",
        (
            "engine_context",
            "core_rows",
            # Core reads and writes kept in the session (split from core_rows).
            "core_session",
            "row_updates",
            "store",
            "column_detection",
            "sqlite_locking",
            # READ COMMITTED on MySQL/MariaDB engines (R-CFG-04).
            "mysql_isolation",
            "session_transactions",
            "error_recording",
            "cleanup_lock",
            "store_queries",
            "store_maintenance",
            "store_admin_queries",
            "store_admin_filters",
            "store_admin_stats",
            "store_admin_signals",
            # Every statement on geneva_drive_signals (SPEC §23).
            "signal_rows",
            "schema",
            "schema.*",
        ),
    ),
    4: (
        "engine: orchestration through the transition table",
        (
            "transition_apply",
            "transitions",
            "executor",
            "executor_prepare",
            "executor_outcomes",
            "executor_run",
            "executor_events",
            "executor_continuation",
            "policy_decisions",
            "flow_control",
            "scheduling",
            "iteration",
            "early_delivery",
            "housekeeping",
            # Recovery of stuck and abandoned executions (split from housekeeping).
            "stuck_recovery",
            "operator_finalize",
            "operator_recovery",
            "operator_resume",
            "operator_resume_at",
            "operator_run_now",
            "step_evolution",
            "step_execution_rows",
            "dispatcher",
            "outbox",
            "worker_registry",
            # What operators see of the registry (status, admin, gauges).
            "worker_health",
            "worker_running",
            "maintenance_runs",
            # Housekeeping's hourly outcome counts for the admin (R-ADM-58).
            "outcome_rollup",
            "publishing",
            # Workflow signals: send, gate, wake, consume (SPEC §23).
            "workflow_signals",
            "workflow_signal_waits",
        ),
    ),
    5: (
        "integration: Flask, Celery and the operators' tools",
        (
            "app_state",
            "extension",
            "schema.autogenerate",
            "operations",
            "model_engine",
            "tasks",
            "celery_publisher",
            "worker_processes",
            "broker_checks",
            "startup_checks",
            "integrations",
            "reference",
            "testing",
            "pytest_plugin",
            "cli",
            "cli.*",
            "admin",
            "admin.*",
            "reporters",
            "reporters.*",
        ),
    ),
}

#: Libraries the layers below integration never import, not even in a function.
FRAMEWORKS = ("flask", "celery", "kombu", "flask_admin", "flask_sqlalchemy", "werkzeug")


def _short(module: str) -> str:
    return module.removeprefix("flask_geneva.")


def layer_of(module: str) -> int | None:
    """The layer of ``module`` (dotted, with or without the package prefix).

    An exact entry wins over a package wildcard (``schema.autogenerate`` is
    Flask-Migrate glue, the rest of ``schema`` is data).
    """
    name = _short(module)
    for number, (_, members) in LAYERS.items():
        if name in members:
            return number
    for number, (_, members) in LAYERS.items():
        for member in members:
            if member.endswith(".*") and name.startswith(member[:-1]):
                return number
    return None


def _modules() -> list[str]:
    return [name for name in module_names(PACKAGE) if name != "flask_geneva"]


def test_every_module_has_a_layer():
    """A module missing from LAYERS fails here: its author places it (issue 15)."""
    assert [name for name in _modules() if layer_of(name) is None] == []


def test_imports_only_go_down_the_layers():
    """No module imports a module of a higher layer, function-level imports included (issue 15)."""
    graph = import_graph(PACKAGE)
    upward = sorted(
        f"{_short(module)} (layer {layer_of(module)}) imports "
        f"{_short(target)} (layer {layer_of(target)})"
        for module, targets in graph.items()
        if module != "flask_geneva"
        for target in targets
        if target != "flask_geneva"
        and (layer_of(target) or 0) > (layer_of(module) or 0)
    )
    assert upward == []


def _third_party_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in _runtime_imports(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif node.level == 0 and node.module is not None:
            names.add(node.module.split(".")[0])
    return names


def test_the_engine_and_below_import_no_framework():
    """Layers 1-4 (the engine included) import neither Flask, Celery nor Flask-Admin (issue 15, STYLE §3.1)."""
    offenders = sorted(
        f"{_short(name)} imports {framework}"
        for name, path in module_names(PACKAGE).items()
        if name != "flask_geneva" and (layer_of(name) or 5) < 5
        for framework in sorted(_third_party_imports(path) & set(FRAMEWORKS))
    )
    assert offenders == []


def test_the_layer_test_sees_a_violation():
    """The checks can fail: an upward edge and a framework import are both detected."""
    assert layer_of("flask_geneva.executor") == 4
    assert layer_of("flask_geneva.app_state") == 5
    assert layer_of("flask_geneva.admin.views") == 5
    assert (layer_of("flask_geneva.app_state") or 0) > (
        layer_of("flask_geneva.executor") or 0
    )
    assert "flask" in _third_party_imports(PACKAGE / "app_state.py")

"""Old module paths of flask_geneva, kept importable after the layout of issue 33.

In 0.2 the flat modules of the package root moved into the layer folders
(``core/``, ``policies/``, ``dsl/``, ``db/``, ``models/``, ``engine/``, ``ext/``,
``cli/``). :data:`MOVED_MODULES` maps each old dotted path to its new one, and
:func:`install_moved_module_finder` (called when ``flask_geneva`` is imported)
makes ``import flask_geneva.executor`` and ``from flask_geneva.schema.units
import UNITS`` return the new module itself, the same object, with a
``DeprecationWarning`` that names the new path. Nothing of flask_geneva imports
an old path (``tests/test_moved_modules.py`` checks it).

.. versionadded:: 0.2
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

__all__ = ["MOVED_MODULES", "REMOVED_IN", "install_moved_module_finder"]

#: The release that removes the old paths.
REMOVED_IN = "1.0"

#: Old dotted module path -> the module that holds its code now.
MOVED_MODULES: dict[str, str] = {
    "flask_geneva.app_state": "flask_geneva.ext.app_state",
    "flask_geneva.backoff": "flask_geneva.policies.backoff",
    "flask_geneva.broker_checks": "flask_geneva.ext.broker_checks",
    "flask_geneva.celery_publisher": "flask_geneva.ext.celery_publisher",
    "flask_geneva.cleanup_lock": "flask_geneva.db.cleanup_lock",
    "flask_geneva.clock": "flask_geneva.core.clock",
    "flask_geneva.column_detection": "flask_geneva.db.optional_columns",
    "flask_geneva.config": "flask_geneva.core.config",
    "flask_geneva.core_rows": "flask_geneva.db.write_path",
    "flask_geneva.core_session": "flask_geneva.db.session_sync",
    "flask_geneva.cursors": "flask_geneva.core.cursors",
    "flask_geneva.database_time": "flask_geneva.db.database_time",
    "flask_geneva.dispatcher": "flask_geneva.engine.operators.dispatcher",
    "flask_geneva.durations": "flask_geneva.core.durations",
    "flask_geneva.early_delivery": "flask_geneva.engine.executor.early_delivery",
    "flask_geneva.engine_context": "flask_geneva.db.context",
    "flask_geneva.error_recording": "flask_geneva.db.error_recording",
    "flask_geneva.error_reporting": "flask_geneva.core.error_reporting",
    "flask_geneva.executor": "flask_geneva.engine.executor.step",
    "flask_geneva.executor_continuation": "flask_geneva.engine.executor.continuation",
    "flask_geneva.executor_events": "flask_geneva.engine.executor.events",
    "flask_geneva.executor_outcomes": "flask_geneva.engine.executor.outcomes",
    "flask_geneva.executor_prepare": "flask_geneva.engine.executor.prepare",
    "flask_geneva.executor_run": "flask_geneva.engine.executor.run",
    "flask_geneva.extension": "flask_geneva.ext.extension",
    "flask_geneva.flow_control": "flask_geneva.engine.flow_control",
    "flask_geneva.heroes": "flask_geneva.core.heroes",
    "flask_geneva.housekeeping": "flask_geneva.engine.operators.housekeeping",
    "flask_geneva.integrations": "flask_geneva.ext.integrations",
    "flask_geneva.iteration": "flask_geneva.engine.iteration",
    "flask_geneva.job_options": "flask_geneva.dsl.job_options",
    "flask_geneva.keys": "flask_geneva.core.keys",
    "flask_geneva.maintenance_rows": "flask_geneva.db.maintenance_runs",
    "flask_geneva.maintenance_runs": "flask_geneva.engine.operators.maintenance_runs",
    "flask_geneva.metrics": "flask_geneva.telemetry.metric_adapters",
    "flask_geneva.core.metrics": "flask_geneva.telemetry.metric_adapters",
    "flask_geneva.model_columns": "flask_geneva.db.column_types",
    "flask_geneva.model_engine": "flask_geneva.ext.model_engine",
    "flask_geneva.model_factory": "flask_geneva.models.factory",
    "flask_geneva.model_services": "flask_geneva.models.services",
    "flask_geneva.model_states": "flask_geneva.db.states",
    "flask_geneva.mysql_isolation": "flask_geneva.db.mysql",
    "flask_geneva.operations": "flask_geneva.ext.operations",
    "flask_geneva.operator_finalize": "flask_geneva.engine.operators.finalize",
    "flask_geneva.operator_recovery": "flask_geneva.engine.operators.recovery",
    "flask_geneva.operator_resume": "flask_geneva.engine.operators.resume",
    "flask_geneva.operator_resume_at": "flask_geneva.engine.operators.resume_at",
    "flask_geneva.operator_run_now": "flask_geneva.engine.operators.run_now",
    "flask_geneva.outbox": "flask_geneva.engine.outbox",
    "flask_geneva.outcome_rollup": "flask_geneva.engine.operators.outcome_rollup",
    "flask_geneva.policy_decisions": "flask_geneva.engine.policy_decisions",
    "flask_geneva.policy_matchers": "flask_geneva.policies.matchers",
    "flask_geneva.policy_resolution": "flask_geneva.policies.resolution",
    "flask_geneva.publications": "flask_geneva.core.publications",
    "flask_geneva.publishing": "flask_geneva.engine.publishing",
    "flask_geneva.reference": "flask_geneva.cli.reference",
    "flask_geneva.release_spread": "flask_geneva.policies.release_spread",
    "flask_geneva.row_updates": "flask_geneva.db.row_updates",
    "flask_geneva.scheduling": "flask_geneva.engine.scheduling",
    "flask_geneva.schema": "flask_geneva.db.install",
    "flask_geneva.schema.autogenerate": "flask_geneva.ext.autogenerate",
    "flask_geneva.schema.install": "flask_geneva.ext.schema_install",
    "flask_geneva.schema.key_type": "flask_geneva.db.install.key_type",
    "flask_geneva.schema.revisions": "flask_geneva.db.install.revisions",
    "flask_geneva.schema.units": "flask_geneva.db.install.units",
    "flask_geneva.session_transactions": "flask_geneva.db.session_transactions",
    "flask_geneva.setting_descriptions": "flask_geneva.core.setting_descriptions",
    "flask_geneva.setting_values": "flask_geneva.core.setting_values",
    "flask_geneva.signal_matchers": "flask_geneva.dsl.signal_matchers",
    "flask_geneva.signal_model": "flask_geneva.models.workflow_signal",
    "flask_geneva.signal_rows": "flask_geneva.db.workflow_signals",
    "flask_geneva.sqlite_locking": "flask_geneva.db.sqlite",
    "flask_geneva.startup_checks": "flask_geneva.ext.startup_checks",
    "flask_geneva.step_evolution": "flask_geneva.engine.step_evolution",
    "flask_geneva.step_execution_model": "flask_geneva.models.step_execution",
    "flask_geneva.step_execution_rows": "flask_geneva.engine.step_execution_rows",
    "flask_geneva.store": "flask_geneva.db.locks",
    "flask_geneva.store_admin_filters": "flask_geneva.db.queries.admin_filters",
    "flask_geneva.store_admin_queries": "flask_geneva.db.queries.admin",
    "flask_geneva.store_admin_signals": (
        "flask_geneva.db.queries.admin_workflow_signals"
    ),
    "flask_geneva.store_admin_stats": "flask_geneva.db.queries.admin_stats",
    "flask_geneva.store_maintenance": "flask_geneva.db.queries.maintenance",
    "flask_geneva.store_model_queries": "flask_geneva.db.queries.models",
    "flask_geneva.store_outcome_hours": "flask_geneva.db.outcome_hours",
    "flask_geneva.store_queries": "flask_geneva.db.queries.engine",
    "flask_geneva.stuck_recovery": "flask_geneva.engine.operators.stuck_recovery",
    "flask_geneva.tagged_logging": "flask_geneva.core.tagged_logging",
    "flask_geneva.task_failures": "flask_geneva.policies.task_failures",
    "flask_geneva.tasks": "flask_geneva.ext.tasks",
    "flask_geneva.terminal_text": "flask_geneva.core.terminal_text",
    "flask_geneva.transactions": "flask_geneva.core.transactions",
    "flask_geneva.transition_apply": "flask_geneva.engine.transitions.apply",
    "flask_geneva.transition_types": "flask_geneva.engine.transitions.types",
    "flask_geneva.transitions": "flask_geneva.engine.transitions.table",
    "flask_geneva.worker_health": "flask_geneva.engine.workers.health",
    "flask_geneva.worker_processes": "flask_geneva.ext.worker_processes",
    "flask_geneva.worker_registry": "flask_geneva.engine.workers.registry",
    "flask_geneva.worker_rows": "flask_geneva.db.workers",
    "flask_geneva.worker_running": "flask_geneva.engine.workers.running",
    "flask_geneva.workflow_actions": "flask_geneva.models.workflow_actions",
    "flask_geneva.workflow_model": "flask_geneva.models.workflow",
    "flask_geneva.workflow_signal_waits": "flask_geneva.engine.workflow_signals.waits",
    "flask_geneva.workflow_signals": "flask_geneva.engine.workflow_signals.delivery",
}


class _MovedModuleLoader(importlib.abc.Loader):
    """Loads an old path as the new module object itself (no second copy)."""

    def __init__(self, new_name: str) -> None:
        self.new_name = new_name
        self._real_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.new_name}; import it from there "
            f"(the old path is removed in flask_geneva {REMOVED_IN})",
            DeprecationWarning,
            # The warnings module skips the import machinery's frames itself.
            stacklevel=2,
        )
        module = importlib.import_module(self.new_name)
        self._real_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system set the old name's spec on the module: restore the
        # module's own, so that reloading and introspection see the real one.
        if self._real_spec is not None:
            module.__spec__ = self._real_spec


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of :data:`MOVED_MODULES`, before the path finder."""

    def find_spec(
        self,
        fullname: str,
        path: object = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        new_name = MOVED_MODULES.get(fullname)
        if new_name is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedModuleLoader(new_name))


_FINDER = _MovedModuleFinder()


def install_moved_module_finder() -> None:
    """Put the finder of old module paths first on ``sys.meta_path``, once.

    First, so that ``flask_geneva.schema.units`` (under an old package that is
    now ``db.install``) is not found a second time by the path finder as a new
    copy of ``db/install/units.py``.
    """
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)

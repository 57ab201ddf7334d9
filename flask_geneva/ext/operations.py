"""The public engine operations, run in a Flask app context (issue 15).

The engine takes an :class:`~flask_geneva.db.context.EngineContext`; these
thin adapters build it from the current app (:func:`flask_geneva.ext.app_state.
current_context`, which applies changed settings first, R-CFG-02) and call the
engine: :class:`Executor` runs one step execution, :func:`run_housekeeping`
one housekeeping pass, :func:`dispatch_due` one dispatcher pass,
:func:`start_workflow` an operator's start of a workflow (R-ADM-201).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from typing import Unpack

from sqlalchemy import orm

from flask_geneva.core import transactions
from flask_geneva.engine.executor import step as executor
from flask_geneva.engine.operators import dispatcher
from flask_geneva.engine.operators import housekeeping
from flask_geneva.engine.operators import start
from flask_geneva.ext.app_state import current_context

__all__ = ["Executor", "dispatch_due", "run_housekeeping", "start_workflow"]


class Executor:
    """Runs one step execution through prepare, body and finalize (SPEC §7)."""

    @classmethod
    def execute(
        cls, execution_or_id: Any, **options: Unpack[executor.ExecuteStepOptions]
    ) -> None:
        """Run the step execution ``execution_or_id`` (an instance or its id).

        Needs an app context: runs
        :func:`flask_geneva.engine.executor.step.execute_step`
        with the app's engine context and ``db.session``. The keyword options
        (``logger``, ``interruptible``, ``max_iterations``, ``lookup_attempts``,
        ``lookup_delay_seconds``, ``reraise``, ``run_early``,
        ``continue_inline``), the transactions and the errors are those of
        :func:`~flask_geneva.engine.executor.step.execute_step`.

        Raises:
            RuntimeError: No app context is active.
            GenevaConfigurationError: A changed setting is invalid (R-CFG-02).
            TypeError: An unknown keyword option.
        """
        executor.execute_step(current_context(), execution_or_id, **options)


def run_housekeeping(session: orm.Session | None = None) -> dict[str, int]:
    """Run one housekeeping pass with the current app's settings (R-HK-01).

    Needs an app context. See
    :func:`flask_geneva.engine.operators.housekeeping.run_housekeeping`
    for what a pass does and returns.

    Args:
        session: Session to use; default the extension's ``db.session``.

    Returns:
        ``{"workflows_cleaned_up", "step_executions_cleaned_up",
        "stuck_in_progress_recovered", "stuck_scheduled_recovered"}``: row counts.

    Raises:
        RuntimeError: No app context is active.
        GenevaConfigurationError: A ``GENEVA_*`` setting is invalid.

    .. versionadded:: 0.1
    """
    return housekeeping.run_housekeeping(current_context(), session)


def dispatch_due(session: orm.Session | None = None) -> int:
    """Run the dispatcher once with the current app's settings (R-DSP-02, R-WRK-13).

    Needs an app context. See
    :func:`flask_geneva.engine.operators.dispatcher.run_dispatcher`:
    publishes due deferred executions, recovers dead workers' executions and
    records the run.

    Args:
        session: Session to use; default the extension's ``db.session``.

    Returns:
        The number of executions published.

    Raises:
        RuntimeError: No app context is active.
        GenevaConfigurationError: A ``GENEVA_*`` setting is invalid.
    """
    return dispatcher.dispatch_due(current_context(), session)


def start_workflow(
    workflow_cls: Any,
    *,
    hero: Any,
    priority: int | None = None,
    start_at: datetime | None = None,
    actor: str | None = None,
    via: str = "api",
) -> Any:
    """Start a workflow as an operator, audited (R-ADM-201); needs an app context.

    Runs :func:`flask_geneva.engine.operators.start.start_workflow` in the
    extension's session with the app's engine context: ``create()``'s path and
    checks, and the operator action ``start`` in the same transaction. A
    transaction the database aborted with a deadlock is run again, as the other
    operator operations are (R-EXE-80).

    Args:
        workflow_cls: A concrete workflow class.
        hero: A saved mapped instance (None only for a class with
            ``may_proceed_without_hero``).
        priority: The workflow's priority, an int, or None.
        start_at: An aware datetime before which no step runs, or None.
        actor: Who starts it, or None.
        via: ``"api"``, ``"admin"`` or ``"cli"``.

    Returns:
        The new workflow, committed.

    Raises:
        RuntimeError: No app context is active.
        DuplicateWorkflowError, StepConfigurationError, TypeError, ValueError,
        GenevaError: As :func:`~flask_geneva.engine.operators.start.start_workflow`
            says; nothing is written.
    """
    session = current_context().bind(workflow_cls.__geneva__.session)
    return transactions.run_retrying_conflicts(
        session,
        lambda: start.start_workflow(
            session,
            workflow_cls,
            hero=hero,
            priority=priority,
            start_at=start_at,
            actor=actor,
            via=via,
        ),
        commit=True,
        what=f"start of a {workflow_cls.__name__} workflow",
    )

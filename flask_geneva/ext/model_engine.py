"""The engine operations the model methods call, registered by name (STYLE §3.1).

Imported by ``flask_geneva/__init__.py``. The models call these through
:func:`flask_geneva.models.services.model_engine`, so they never import the
orchestration modules (scheduling, flow control, row locks, executor) back. Each
entry is an engine function, wrapped only to bind the current app's engine
context (:func:`flask_geneva.ext.app_state.current_context`) to the session it
works in, so the engine below gets its settings and publisher from its caller,
never from Flask (issue 15). The model method's arguments reach the engine
function unchanged: the model method is their one definition.

The operator operations (pause, cancel, skip, resume, resume_at, run_now,
recover, signal) go through :func:`_operator`: a transaction of their own that
the database chose as a deadlock victim is run again (R-EXE-80).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core import transactions
from flask_geneva.db import locks as row_locks
from flask_geneva.db.states import parse_workflow_state
from flask_geneva.engine import flow_control
from flask_geneva.engine import operator_transaction
from flask_geneva.engine import scheduling
from flask_geneva.engine import step_evolution
from flask_geneva.engine import step_execution_rows
from flask_geneva.engine import workflow_creation
from flask_geneva.engine.children import results as child_results
from flask_geneva.engine.children import start as child_start
from flask_geneva.engine.executor import step as executor
from flask_geneva.engine.operators import recovery as operator_recovery
from flask_geneva.engine.operators import resume as operator_resume
from flask_geneva.engine.operators import resume_at as operator_resume_at
from flask_geneva.engine.operators import run_now as operator_run_now
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.engine.workers import step_heartbeats
from flask_geneva.engine.workflow_signals import delivery as workflow_signals
from flask_geneva.engine.workflow_signals import heroes as hero_signals
from flask_geneva.ext.app_state import current_context
from flask_geneva.models.services import register_model_engine

__all__ = ["OPERATIONS"]

_Operation = Callable[..., Any]


def _operator(operation: _Operation, *, session_first: bool = False) -> _Operation:
    """``operation(workflow, ...)`` as an operator runs it, retried when the database
    picked it as a deadlock victim (R-EXE-80).

    Each attempt binds the context, locks and re-checks the workflow itself, so a
    retry applies the operation's guard to what is stored then, or refuses with
    ``InvalidStateError``. Retried only in a transaction the operation owns
    (:func:`flask_geneva.core.transactions.owns_transaction`) and outside a step;
    otherwise, and after the last attempt, the deadlock is raised as itself.

    Args:
        operation: The engine function; called with the workflow's session
            first when ``session_first``.
    """

    @functools.wraps(operation)
    def run(workflow: Any, *args: Any, **kwargs: Any) -> Any:
        def attempt() -> Any:
            session = _bound_session(workflow)
            leading = (session, workflow) if session_first else (workflow,)
            return operation(*leading, *args, **kwargs)

        return transactions.run_retrying_conflicts(
            workflow._object_session(),
            attempt,
            commit=kwargs["commit"] and flow_control.current_step_context() is None,
            what=f"{operation.__name__} of workflow {workflow.id}",
        )

    return run


def _on_class_session(operation: _Operation) -> _Operation:
    """``operation(session, workflow_class, ...)`` in the extension's bound session."""

    @functools.wraps(operation)
    def run(workflow_class: Any, *args: Any, **kwargs: Any) -> Any:
        session = current_context().bind(workflow_class.__geneva__.session)
        return operation(session, workflow_class, *args, **kwargs)

    return run


def _unless_running(operation: _Operation, action: str) -> _Operation:
    """``operation(session, workflow, ...)`` under the row lock, refused while an
    execution runs (a new one would violate the one-active-execution index,
    R-EXT-26, R-DM-11); commits."""

    @functools.wraps(operation)
    def run(workflow: Any, *args: Any, **kwargs: Any) -> Any:
        session = _bound_session(workflow)
        row_locks.lock_workflow(session, workflow.id)
        try:
            operator_transaction.refuse_while_running(session, workflow, action)
        except BaseException:
            session.rollback()
            raise
        result = operation(session, workflow, *args, **kwargs)
        session.commit()
        return result

    return run


def _on_execution(operation: _Operation) -> _Operation:
    """``operation(execution, ...)`` with the context bound to the execution's
    session, if it has one."""

    @functools.wraps(operation)
    def run(execution: Any, *args: Any, **kwargs: Any) -> Any:
        session = orm.object_session(execution)
        if session is not None:
            current_context().bind(session)
        return operation(execution, *args, **kwargs)

    return run


def _transition_to(workflow: Any, state: str, attributes: dict[str, Any]) -> None:
    """Lock the row, apply ``TRANSITION_TO`` unvalidated, commit (R-WF-05)."""
    session = _bound_session(workflow)
    row_locks.lock_workflow(session, workflow.id)
    transitions.apply(
        transitions.TRANSITION_TO,
        clock.now(),
        workflow=workflow,
        to=parse_workflow_state(state),
        **attributes,
    )
    session.commit()


def _heartbeat(workflow: Any) -> bool:
    """See :func:`flask_geneva.engine.workers.step_heartbeats.heartbeat_now`
    (R-WRK-11, R-FLT-31)."""
    return step_heartbeats.heartbeat_now(_bound_session(workflow))


def _max_cursor_size() -> int | None:
    """``GENEVA_MAX_CURSOR_SIZE`` of the current app in bytes, None for no limit."""
    return current_context().settings.max_cursor_size_bytes


def _execute(execution: Any, **kwargs: Any) -> None:
    """See :func:`flask_geneva.engine.executor.step.execute_step` (R-SE-44)."""
    executor.execute_step(current_context(), execution, **kwargs)


def _on_workflow_session(operation: _Operation) -> _Operation:
    """``operation(workflow, ...)`` with the app's engine context bound to the
    workflow's session, if it has one: a read in a request or a CLI command
    whose session no geneva operation bound yet (R-CHD-03)."""

    @functools.wraps(operation)
    def run(workflow: Any, *args: Any, **kwargs: Any) -> Any:
        session = orm.object_session(workflow)
        if session is not None:
            current_context().bind(session)
        return operation(workflow, *args, **kwargs)

    return run


def _set_result(workflow: Any, value: Any) -> None:
    """See :func:`flask_geneva.engine.children.results.set_result` (R-CHD-01)."""
    settings = current_context().settings
    _bound_session(workflow)
    child_results.set_result(workflow, value, max_size=settings.max_result_size_bytes)


def _bound_session(workflow: Any) -> Any:
    """Bind the app's engine context to ``workflow``'s session and return it.

    Raises:
        GenevaConfigurationError: A changed setting is invalid (R-CFG-02),
            before any lock is taken.
    """
    return current_context().bind(workflow._object_session())


#: What each model method calls, by the name it looks up on ``model_engine()``.
OPERATIONS: dict[str, _Operation] = {
    # WorkflowActions (SPEC §8, §23)
    "create_workflow": _on_class_session(workflow_creation.create_workflow),
    "transition_to": _transition_to,
    "schedule_next_step": _unless_running(
        scheduling.schedule_next_step, "schedule the next step of"
    ),
    "reschedule_current_step": _unless_running(
        scheduling.reschedule_current_step, "reschedule the current step of"
    ),
    "cancel": _operator(flow_control.cancel),
    "pause": _operator(flow_control.pause),
    "skip": _operator(flow_control.skip),
    "resume": _operator(operator_resume.resume),
    "resume_at": _operator(operator_resume_at.resume_at),
    "run_now": _operator(operator_run_now.run_now),
    "recover": _operator(operator_recovery.recover),
    "history_in_flight": step_evolution.history_in_flight,
    "reattempt": flow_control.reattempt,
    "finish": flow_control.finish,
    "suspend": flow_control.suspend,
    "heartbeat": _heartbeat,
    "deliver_signal": _operator(workflow_signals.deliver_signal, session_first=True),
    "signal_hero": _on_class_session(hero_signals.signal_hero),
    # WorkflowChildren (SPEC §25)
    "set_result": _set_result,
    "read_result": _on_workflow_session(child_results.read_result),
    "start_children": _on_workflow_session(child_start.start_children),
    "children": _on_workflow_session(child_results.children),
    "child_results": _on_workflow_session(child_results.child_results),
    "parent_of": _on_workflow_session(child_results.parent_of),
    "child_counts_of": _on_workflow_session(child_results.child_counts_of),
    # StepExecutionMixin (SPEC §4)
    "max_cursor_size": _max_cursor_size,
    "start_execution": _on_execution(step_execution_rows.start),
    "mark_execution": _on_execution(step_execution_rows.mark),
    "execute": _execute,
}

register_model_engine(OPERATIONS)

"""The adapter from the model methods to the engine: :class:`EngineForModels`.

Imported by ``flask_geneva/__init__.py``. The models call these through
:func:`flask_geneva.models.services.model_engine`, so they never import the
orchestration modules (scheduling, flow control, store, executor) back. Each
method binds the current app's engine context
(:func:`flask_geneva.ext.app_state.current_context`) to the session it works in, so
the engine below gets its settings and publisher from its caller, never from
Flask (issue 15).

The operator operations (pause, cancel, skip, resume, resume_at, run_now,
recover, signal) go through :func:`_retrying_conflicts`: a transaction of their
own that the database chose as a deadlock victim is run again (R-EXE-80).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from typing import NoReturn
from typing import TypeVar

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core import transactions
from flask_geneva.db import locks as store
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db.states import StepExecutionState
from flask_geneva.db.states import parse_workflow_state
from flask_geneva.engine import flow_control
from flask_geneva.engine import scheduling
from flask_geneva.engine import step_evolution
from flask_geneva.engine import step_execution_rows
from flask_geneva.engine.executor import step as executor
from flask_geneva.engine.operators import recovery as operator_recovery
from flask_geneva.engine.operators import resume as operator_resume
from flask_geneva.engine.operators import resume_at as operator_resume_at
from flask_geneva.engine.operators import run_now as operator_run_now
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.engine.workflow_signals import delivery as workflow_signals
from flask_geneva.ext.app_state import current_context
from flask_geneva.models.services import Wait
from flask_geneva.models.services import register_model_engine

__all__ = ["EngineForModels"]

_Operation = TypeVar("_Operation", bound=Callable[..., Any])


def _retrying_conflicts(operation: _Operation) -> _Operation:
    """Run an operator operation again when the database picked it as a deadlock
    victim (R-EXE-80).

    Each attempt locks and re-checks the workflow itself, so a retry applies the
    operation's guard to what is stored then, or refuses with
    ``InvalidStateError``. Retried only in a transaction the operation owns
    (:func:`flask_geneva.core.transactions.owns_transaction`) and outside a step;
    otherwise, and after the last attempt, the deadlock is raised as itself.
    """

    @functools.wraps(operation)
    def run(self: Any, workflow: Any, *args: Any, **kwargs: Any) -> Any:
        session = workflow._object_session()
        return transactions.run_retrying_conflicts(
            session,
            lambda: operation(self, workflow, *args, **kwargs),
            commit=kwargs["commit"] and flow_control.current_step_context() is None,
            what=f"{operation.__name__} of workflow {workflow.id}",
        )

    return run  # type: ignore[return-value]


class EngineForModels:
    """Implements :class:`~flask_geneva.models.services.ModelEngine` (STYLE §3.1)."""

    def create_workflow(
        self,
        workflow_class: Any,
        *,
        hero: Any,
        allow_multiple: bool,
        step_job_options: Any,
        commit: bool,
    ) -> Any:
        """See :func:`flask_geneva.engine.scheduling.create_workflow` (R-WF-10..15)."""
        return scheduling.create_workflow(
            current_context().bind(workflow_class.__geneva__.session),
            workflow_class,
            hero=hero,
            allow_multiple=allow_multiple,
            step_job_options=step_job_options,
            commit=commit,
        )

    def transition_to(
        self, workflow: Any, state: str, attributes: dict[str, Any]
    ) -> None:
        """Lock the row, apply ``TRANSITION_TO`` unvalidated, commit (R-WF-05)."""
        session = _bound_session(workflow)
        store.lock_workflow(session, workflow.id)
        transitions.apply(
            transitions.TRANSITION_TO,
            clock.now(),
            workflow=workflow,
            to=parse_workflow_state(state),
            **attributes,
        )
        session.commit()

    def schedule_next_step(self, workflow: Any, *, wait: Wait) -> Any:
        """Schedule the next step or finish; refused while one runs (R-SCH-06)."""
        session = _bound_session(workflow)
        _lock_unless_running(session, workflow, "schedule the next step of")
        execution = scheduling.schedule_next_step(session, workflow, wait=wait)
        session.commit()
        return execution

    def reschedule_current_step(self, workflow: Any, *, wait: Wait) -> Any:
        """Reschedule the current step, refusing while one runs (R-SCH-07, R-EXT-26)."""
        session = _bound_session(workflow)
        _lock_unless_running(session, workflow, "reschedule the current step of")
        execution = scheduling.reschedule_current_step(session, workflow, wait=wait)
        session.commit()
        return execution

    @_retrying_conflicts
    def cancel(
        self, workflow: Any, *, actor: str | None, via: str, commit: bool
    ) -> None:
        """See :func:`flask_geneva.engine.flow_control.cancel` (R-EXT-03)."""
        _bound_session(workflow)
        flow_control.cancel(workflow, actor=actor, via=via, commit=commit)

    @_retrying_conflicts
    def pause(
        self, workflow: Any, *, actor: str | None, via: str, commit: bool
    ) -> None:
        """See :func:`flask_geneva.engine.flow_control.pause` (R-EXT-01/02)."""
        _bound_session(workflow)
        flow_control.pause(workflow, actor=actor, via=via, commit=commit)

    @_retrying_conflicts
    def skip(
        self,
        workflow: Any,
        *,
        actor: str | None,
        via: str,
        commit: bool,
        expected_step: str | None,
    ) -> None:
        """See :func:`flask_geneva.engine.flow_control.skip` (R-EXT-04/05)."""
        _bound_session(workflow)
        flow_control.skip(
            workflow, actor=actor, via=via, commit=commit, expected_step=expected_step
        )

    @_retrying_conflicts
    def resume(
        self,
        workflow: Any,
        *,
        rewind: bool,
        actor: str | None,
        via: str,
        commit: bool,
    ) -> Any:
        """See :func:`flask_geneva.engine.operators.resume.resume` (R-EXT-20..27)."""
        _bound_session(workflow)
        return operator_resume.resume(
            workflow, rewind=rewind, actor=actor, via=via, commit=commit
        )

    @_retrying_conflicts
    def resume_at(
        self,
        workflow: Any,
        step_name: str,
        *,
        actor: str | None,
        via: str,
        commit: bool,
    ) -> Any:
        """See :func:`flask_geneva.engine.operators.resume_at.resume_at` (R-EVO-06)."""
        _bound_session(workflow)
        return operator_resume_at.resume_at(
            workflow, step_name, actor=actor, via=via, commit=commit
        )

    @_retrying_conflicts
    def run_now(
        self, workflow: Any, *, actor: str | None, via: str, commit: bool
    ) -> Any:
        """See :func:`flask_geneva.engine.operators.run_now.run_now` (R-ADM-51)."""
        _bound_session(workflow)
        return operator_run_now.run_now(workflow, actor=actor, via=via, commit=commit)

    def history_in_flight(self, workflow_class: Any) -> dict[str, int]:
        """See :func:`flask_geneva.engine.step_evolution.history_in_flight`
        (R-EVO-09)."""
        return step_evolution.history_in_flight(workflow_class)

    @_retrying_conflicts
    def recover(
        self,
        workflow: Any,
        *,
        execution_id: Any,
        force: bool,
        actor: str | None,
        via: str,
        commit: bool,
    ) -> Any:
        """See :func:`flask_geneva.engine.operators.recovery.recover` (R-HK-28)."""
        _bound_session(workflow)
        return operator_recovery.recover(
            workflow,
            execution_id=execution_id,
            force=force,
            actor=actor,
            via=via,
            commit=commit,
        )

    def reattempt(self, workflow: Any, *, wait: Wait, rewind: bool) -> NoReturn:
        """See :func:`flask_geneva.engine.flow_control.reattempt` (R-FC-13)."""
        flow_control.reattempt(workflow, wait=wait, rewind=rewind)

    def finish(self, workflow: Any) -> NoReturn:
        """See :func:`flask_geneva.engine.flow_control.finish` (R-FC-14)."""
        flow_control.finish(workflow)

    def suspend(self, workflow: Any, *, wait: Wait) -> NoReturn:
        """See :func:`flask_geneva.engine.flow_control.suspend` (R-FC-15)."""
        flow_control.suspend(workflow, wait=wait)

    def heartbeat(self, workflow: Any) -> bool:
        """See :func:`flask_geneva.engine.workers.registry.heartbeat_now` (R-WRK-11)."""
        return worker_registry.heartbeat_now(_bound_session(workflow))

    @_retrying_conflicts
    def deliver_signal(
        self,
        workflow: Any,
        name: str,
        *,
        payload: Any,
        idempotency_key: str | None,
        commit: bool,
    ) -> Any:
        """See :func:`flask_geneva.engine.workflow_signals.delivery.deliver_signal`
        (R-WSIG-20)."""
        return workflow_signals.deliver_signal(
            _bound_session(workflow),
            workflow,
            name,
            payload=payload,
            idempotency_key=idempotency_key,
            commit=commit,
        )

    def signal_hero(
        self,
        workflow_class: Any,
        hero: Any,
        name: str,
        *,
        payload: Any,
        idempotency_key: str | None,
        start: bool,
    ) -> Any:
        """See :func:`flask_geneva.engine.workflow_signals.delivery.signal_hero`
        (R-WSIG-25)."""
        return workflow_signals.signal_hero(
            current_context().bind(workflow_class.__geneva__.session),
            workflow_class,
            hero,
            name,
            payload=payload,
            idempotency_key=idempotency_key,
            start=start,
        )

    def optional_columns(self, session: Any) -> Any:
        """See :func:`flask_geneva.db.optional_columns.optional_columns`
        (R-DM-30..35)."""
        return column_detection.optional_columns(session)

    def max_cursor_size(self) -> int | None:
        """``GENEVA_MAX_CURSOR_SIZE`` of the current app in bytes, None for no limit."""
        return current_context().settings.max_cursor_size_bytes

    def start_execution(self, execution: Any) -> bool:
        """See :func:`flask_geneva.engine.step_execution_rows.start` (R-SE-47)."""
        _bind_execution_session(execution)
        return step_execution_rows.start(execution)

    def mark_execution(
        self,
        execution: Any,
        state: str,
        outcome: str,
        error: BaseException | None,
    ) -> None:
        """See :func:`flask_geneva.engine.step_execution_rows.mark` (R-SE-47)."""
        _bind_execution_session(execution)
        step_execution_rows.mark(
            execution, StepExecutionState(state), outcome, error=error
        )

    def execute(
        self, execution: Any, *, interruptible: bool, max_iterations: int | None
    ) -> None:
        """See :func:`flask_geneva.engine.executor.step.execute_step` (R-SE-44)."""
        executor.execute_step(
            current_context(),
            execution,
            interruptible=interruptible,
            max_iterations=max_iterations,
        )


def _bound_session(workflow: Any) -> Any:
    """Bind the app's engine context to ``workflow``'s session and return it.

    Raises:
        GenevaConfigurationError: A changed setting is invalid (R-CFG-02),
            before any lock is taken.
    """
    return current_context().bind(workflow._object_session())


def _bind_execution_session(execution: Any) -> None:
    """Bind the app's engine context to ``execution``'s session, if it has one."""
    session = orm.object_session(execution)
    if session is not None:
        current_context().bind(session)


def _lock_unless_running(session: Any, workflow: Any, action: str) -> None:
    # Lock the row, then refuse while an execution runs: a new one would
    # violate the one-active-execution index (R-EXT-26, R-DM-11).
    store.lock_workflow(session, workflow.id)
    try:
        flow_control.refuse_while_running(session, workflow, action)
    except BaseException:
        session.rollback()
        raise


register_model_engine(EngineForModels())

"""The state-changing methods of ``geneva.Workflow``: create, flow control, scheduling.

Each method is the one definition of its operation (signature, defaults, docstring)
and passes its arguments to the engine operation of that name registered in
:mod:`flask_geneva.models.services` (SPEC §8, R-WF-10..15, R-SCH-06/07), so the
models import no orchestration module.
:class:`flask_geneva.models.workflow.WorkflowMixin` extends this class.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from datetime import datetime
from datetime import timedelta
from typing import TYPE_CHECKING
from typing import Any
from typing import NoReturn
from typing import Self

from sqlalchemy import orm

from flask_geneva.db import deadlines as deadline_rows
from flask_geneva.dsl.job_options import fold_priority
from flask_geneva.exceptions import UnawaitedSignalWarning
from flask_geneva.models.services import model_engine
from flask_geneva.models.services import raise_from_engine

if TYPE_CHECKING:
    from flask_geneva.models.step_execution import StepExecutionMixin

__all__ = ["WorkflowActions"]


class WorkflowActions:
    """State-changing methods of ``geneva.Workflow``, delegated to the engine.

    Create, schedule, pause, resume, cancel, skip and recover; inside a step also
    reattempt, finish and suspend.
    """

    @classmethod
    def create(
        cls,
        *,
        hero: Any = None,
        allow_multiple: bool = False,
        step_job_options: Mapping[str, Any] | None = None,
        priority: int | None = None,
        commit: bool = True,
        deadline: datetime | timedelta | None = None,
    ) -> Self:
        """Insert a workflow for ``hero`` and schedule its first step (R-WF-10..15).

        Args:
            hero: Any mapped model instance with a primary key; None only on a
                class with ``may_proceed_without_hero`` (R-HERO-06).
            allow_multiple: Exempt this row from the one-ongoing-per-hero rule
                (R-UNQ-04).
            step_job_options: Per-instance job options (``queue``, ``priority``,
                ``wait``, ``wait_until``), validated (R-WF-15).
            priority: This workflow's priority, an int (higher runs first,
                R-PRI-02): the same as ``step_job_options={"priority": n}``
                (R-PRI-01). A step's own priority still wins (R-JOB-02).
            commit: Commit the session at the end. With False the caller commits and
                task publication waits for that commit (R-WF-14, R-TXN-02). Inside
                a transaction the caller began explicitly (``with
                db.session.begin():`` or ``begin_nested()``) nothing is committed
                either way: the insert joins it and publishes after its commit.
            deadline: When the dispatcher cancels (or, with
                ``__geneva_on_deadline__ = "pause"``, pauses) the workflow if it
                has not ended (R-DL-02, R-DL-20): a timezone-aware datetime in
                the future, or a positive timedelta counted from now. None
                takes the class's ``__geneva_deadline__``, if any (R-DL-01).
                Needs the ``add_workflow_deadlines`` install unit.

        Returns:
            The new workflow, state ``ready`` (or ``finished`` without steps, R-WF-12).

        Raises:
            DuplicateWorkflowError: An ongoing workflow of this class exists for the
                hero (R-UNQ-02/03); no row is left and nothing is published.
            StepConfigurationError: ``step_job_options`` or ``priority`` is
                invalid (not an int, bools refused), or both give a priority
                and the values differ (R-PRI-01); a ``ValueError``.
            TypeError: ``hero`` is None on a class without
                ``may_proceed_without_hero`` (R-HERO-06), or not a saved mapped
                instance.
            sqlalchemy.exc.DBAPIError: A deadlock or serialization failure, raised
                as itself: retried first when the transaction was this call's own.
            ValueError: ``deadline`` is a naive datetime, not in the future, or
                not a positive duration (R-DL-02); nothing is written.
            GenevaError: A deadline applies (given or declared) and the
                ``add_workflow_deadlines`` unit is missing (R-DL-50).

        .. versionchanged:: 0.1
            ``deadline`` (issue 37).
        """

        if priority is not None:
            step_job_options = fold_priority(
                step_job_options,
                priority,
                context=f"{cls.__name__}.create()",
                keyword="priority=",
                options_name="step_job_options",
            )
        workflow: Self = model_engine().create_workflow(
            cls,
            hero=hero,
            allow_multiple=allow_multiple,
            step_job_options=step_job_options,
            commit=commit,
            deadline=deadline,
        )
        return workflow

    # -- state changes -------------------------------------------------------------

    def transition_to(self, state: str, **attributes: Any) -> None:
        """Lock the row, set ``state`` and ``attributes``, and persist (R-WF-05).

        No transition validation is done. Entering finished/canceled/paused sets
        ``transitioned_at`` (R-WF-03). Commits the session.
        """

        model_engine().transition_to(self, state, attributes)

    def schedule_next_step(
        self, *, wait: timedelta | int | float | None = None
    ) -> StepExecutionMixin | None:
        """Schedule the step after the current one, or finish (R-SCH-06). Commits.

        Raises:
            InvalidStateError: An execution is still in progress (R-EXT-26).
        """

        execution: StepExecutionMixin | None = model_engine().schedule_next_step(
            self, wait=wait
        )
        return execution

    def reschedule_current_step(
        self, *, wait: timedelta | int | float | None = None
    ) -> StepExecutionMixin:
        """Create a new execution of the current step, exactly ``wait`` (R-SCH-07).

        Raises:
            InvalidStateError: An execution is still in progress (R-EXT-26).
            StepNotDefinedError: The current/next step has no definition.
        """

        execution: StepExecutionMixin = model_engine().reschedule_current_step(
            self, wait=wait
        )
        return execution

    # -- flow control (SPEC §8) ------------------------------------------------------

    def cancel(
        self, *, actor: str | None = None, via: str = "api", commit: bool = True
    ) -> None:
        """Cancel the workflow: in a step raise ``CancelSignal``, else R-EXT-03.

        Raises:
            InvalidStateError: Outside a step, the state is not ready, paused or
                performing; message "Cannot cancel a <state> workflow".
        """

        model_engine().cancel(self, actor=actor, via=via, commit=commit)

    def pause(
        self, *, actor: str | None = None, via: str = "api", commit: bool = True
    ) -> None:
        """Pause the workflow: in a step raise ``PauseSignal``, else R-EXT-01/02.

        Raises:
            InvalidStateError: Outside a step, the state is not ready or performing.
        """

        model_engine().pause(self, actor=actor, via=via, commit=commit)

    def skip(
        self,
        *,
        actor: str | None = None,
        via: str = "api",
        commit: bool = True,
        expected_step: str | None = None,
    ) -> None:
        """Skip the current step: in a step raise ``SkipSignal``, else R-EXT-04.

        Args:
            expected_step: Skip only if the current step is still this step name
                (a guard against skipping twice from a stale page or a double
                click); None skips whatever step is current (R-EXT-05).

        Raises:
            InvalidStateError: Outside a step, the state is not ready or paused, or
                the current step is not ``expected_step``.
        """

        model_engine().skip(
            self, actor=actor, via=via, commit=commit, expected_step=expected_step
        )

    def resume(
        self,
        *,
        rewind: bool = False,
        actor: str | None = None,
        via: str = "api",
        commit: bool = True,
    ) -> StepExecutionMixin | None:
        """Resume a paused workflow atomically (R-EXT-20..27).

        Returns:
            The step execution that will run next (reused, successor or new),
            or None when the last step completed while the workflow was paused
            and resume finished it (R-EXE-42).

        Raises:
            InvalidStateError: The workflow is not paused (checked again under the
                row lock); message "Cannot resume a <state> workflow".
            StepNotDefinedError: ``next_step_name`` has no definition any more; the
                workflow stays paused (R-EXT-24).
        """

        resumed: StepExecutionMixin | None = model_engine().resume(
            self, rewind=rewind, actor=actor, via=via, commit=commit
        )
        return resumed

    def resume_at(
        self,
        step_name: str,
        *,
        actor: str | None = None,
        via: str = "api",
        commit: bool = True,
    ) -> StepExecutionMixin:
        """Continue a paused workflow from the step ``step_name`` (R-EVO-06).

        For a workflow stranded by a deploy (its step was removed or renamed
        without ``step.removed``/``step.renamed``), or to redo or jump over
        steps. One transaction under the row lock: the workflow becomes ready, a
        preserved scheduled execution is canceled and ``step_name`` is scheduled
        due now; the operator action ``resume_at`` is recorded (R-PDR-05).

        Args:
            step_name: A step the class defines (a renamed old name runs its
                new step).
            actor: Who asked, recorded with the action.
            via: ``"api"``, ``"admin"`` or ``"cli"``.
            commit: Commit the session at the end.

        Returns:
            The new step execution.

        Raises:
            InvalidStateError: The workflow is not paused, or a step execution is
                still in progress.
            StepNotDefinedError: ``step_name`` is removed or not defined; the
                message lists the allowed steps.

        .. versionadded:: 0.3
        """

        execution: StepExecutionMixin = model_engine().resume_at(
            self, step_name, actor=actor, via=via, commit=commit
        )
        return execution

    def run_now(
        self,
        *,
        actor: str | None = None,
        via: str = "api",
        commit: bool = True,
    ) -> StepExecutionMixin:
        """Run the waiting step of a ready workflow now (R-ADM-51).

        One transaction under the row lock: the scheduled execution that waits
        (a step ``wait``, a reattempt's backoff, a ``suspend``) is canceled and
        the same step is scheduled again, due now (a resumable step keeps its
        cursor); the operator action ``run_now`` is recorded (R-PDR-05).

        Args:
            actor: Who asked, recorded with the action.
            via: ``"api"``, ``"admin"`` or ``"cli"``.
            commit: Commit the session at the end.

        Returns:
            The new step execution.

        Raises:
            InvalidStateError: The workflow is not ready, or its step does not
                wait (already due, running or none); nothing changes.

        .. versionadded:: 0.3
        """
        execution: StepExecutionMixin = model_engine().run_now(
            self, actor=actor, via=via, commit=commit
        )
        return execution

    @classmethod
    def removed_steps_in_flight(cls) -> dict[str, int]:
        """Which ``step.removed``/``step.renamed`` names rows still carry (R-EVO-09).

        Returns:
            ``{old step name: number of ongoing workflows of this class carrying
            it}`` (as current or next step, or an active execution's step). A
            gravestone or rename missing from the result can be deleted.

        .. versionadded:: 0.3
        """
        in_flight: dict[str, int] = model_engine().history_in_flight(cls)
        return in_flight

    def recover(
        self,
        execution_id: Any = None,
        *,
        force: bool = False,
        actor: str | None = None,
        via: str = "api",
        commit: bool = True,
    ) -> StepExecutionMixin:
        """Recover the in-progress execution now, as housekeeping would (R-HK-28).

        For an execution whose worker died: applies R-HK-23..27 without waiting
        for ``GENEVA_STUCK_IN_PROGRESS_THRESHOLD``; see
        :func:`flask_geneva.engine.operators.recovery.recover`.

        Args:
            execution_id: The execution expected to be in progress, or None.
            force: Also recover an execution younger than ``GENEVA_RECOVER_GRACE``.

        Returns:
            The recovered step execution.

        Raises:
            InvalidStateError: Nothing is in progress (or not ``execution_id``),
                or without ``force`` the execution is younger than the grace.

        .. versionadded:: 0.2
        """

        recovered: StepExecutionMixin = model_engine().recover(
            self,
            execution_id=execution_id,
            force=force,
            actor=actor,
            via=via,
            commit=commit,
        )
        return recovered

    def reattempt(
        self, *, wait: timedelta | int | float | None = None, rewind: bool = False
    ) -> NoReturn:
        """End the running step and run it again after ``wait`` (R-FC-13).

        Raises:
            ReattemptSignal: Inside a step (caught by the executor).
            InvalidStateError: Outside a step (R-EXT-06).
            ValueError/TypeError: ``wait`` is not a non-negative duration.
        """

        raise_from_engine("reattempt", self, wait=wait, rewind=rewind)

    def finish(self) -> NoReturn:
        """Finish the workflow from inside a step (R-FC-14).

        Raises:
            FinishSignal: Inside a step. InvalidStateError: outside (R-EXT-06).
        """

        raise_from_engine("finish", self)

    def suspend(self, *, wait: timedelta | int | float | None = None) -> NoReturn:
        """Suspend a resumable step; a successor continues after ``wait`` (R-FC-15).

        Raises:
            SuspendSignal: Inside a resumable step.
            InvalidStateError: Outside a step, or inside a regular step (the message
                mentions ``resumable_step``).
        """

        raise_from_engine("suspend", self, wait=wait)

    def heartbeat(self) -> bool:
        """Prove now that the worker running this step is alive (R-WRK-11).

        Optional: a registered worker already heartbeats every
        ``GENEVA_WORKER_HEARTBEAT_INTERVAL`` from a background thread. Call it
        from a long step that may starve that thread (a C extension holding
        the GIL between calls, say); a resumable step's ``checkpoint()``
        counts as one. Outside a registered worker process it does nothing.

        Never fails the step for the write, nor waits for it longer than
        ``GENEVA_HEARTBEAT_TIMEOUT`` (default 5 s): the write runs in a thread
        and on a connection of its own, never this step's session. When the
        database refuses it (a blip) or does not answer in time (a network
        cut), a warning is logged and False returned, and the step goes on;
        the heartbeat thread keeps trying (R-WRK-11, R-FLT-31).

        Returns:
            True if a heartbeat was written during the call; False when this
            process is no registered worker (or the database has no worker
            registry), the write failed, or it got no answer in time.
        """
        written: bool = model_engine().heartbeat(self)
        return written

    # -- workflow signals (SPEC §23) -------------------------------------------------

    def signal(
        self,
        name: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
        commit: bool = True,
        warn_unawaited: bool = True,
    ) -> Any:
        """Deliver the workflow signal ``name`` (an external event) to this workflow.

        Stored in one transaction under the workflow's row lock. A step waiting
        for it (``@step(wait_for=name)``) is woken and runs with it; otherwise
        it is buffered until such a step reaches its gate (R-WSIG-10..13). A
        repeated ``idempotency_key`` changes nothing (R-WSIG-22). Never fails
        because of a step's matcher (R-WSIG-33).

        Args:
            name: The signal name (non-empty, at most 255 characters).
            payload: None or a JSON-like value of the cursor codec's types
                (dicts, lists, str, numbers, dates, datetimes, Decimal, UUID),
                at most ``GENEVA_MAX_SIGNAL_PAYLOAD_SIZE`` bytes encoded.
            idempotency_key: None, or a str unique per workflow (e.g. the
                webhook's event id).
            commit: Commit (the wake is published after it); False leaves the
                commit to the caller.
            warn_unawaited: Warn (:class:`~flask_geneva.UnawaitedSignalWarning`)
                when the signal is stored and no step of the class waits for
                ``name`` (R-WSIG-73); False for names delivered on purpose.

        Returns:
            A :class:`~flask_geneva.engine.workflow_signals.delivery.SignalDelivery`:
            ``.signal`` (the ``WorkflowSignal`` row), ``.duplicate``,
            ``.woken`` (execution ids), ``.unawaited`` (what the steps wait for
            when none waits for ``name``, else None).

        Raises:
            ValueError: Invalid ``name`` or ``idempotency_key``.
            CursorSerializationError: The payload holds an unsupported type.
            SignalPayloadTooLargeError: The payload is too large (R-WSIG-21).
            SignalBufferFullError: Too many pending signals (R-WSIG-23).
            InvalidStateError: The workflow is finished or canceled and the
                signal is no retry of one it received (a retried
                ``idempotency_key`` is a duplicate, R-WSIG-24).
            GenevaError: The ``add_workflow_signals`` unit is not installed.
        """
        delivery = model_engine().deliver_signal(
            self,
            name,
            payload=payload,
            idempotency_key=idempotency_key,
            commit=commit,
        )
        if warn_unawaited:
            _warn_if_unawaited(delivery, name)
        return delivery

    @classmethod
    def signal_hero(
        cls,
        hero: Any,
        name: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
        start: bool = False,
        warn_unawaited: bool = True,
    ) -> Any:
        """Deliver a workflow signal to the hero's ongoing workflow of this class.

        Args:
            hero: The hero record.
            name, payload, idempotency_key, warn_unawaited: As for
                :meth:`signal`.
            start: Create the workflow first when none is ongoing; concurrent
                calls create one (the one-ongoing unique index decides) and all
                signal it (R-WSIG-25). Not for a retry: an ``idempotency_key``
                the hero's ended workflow received is a duplicate, and nothing
                is created (R-WSIG-71).

        Returns:
            The :class:`~flask_geneva.engine.workflow_signals.delivery.SignalDelivery`.

        Raises:
            WorkflowNotFoundError: No ongoing workflow, no ended one that
                received ``idempotency_key``, and ``start`` is False.
            Everything :meth:`signal` raises.
        """
        delivery = model_engine().signal_hero(
            cls,
            hero,
            name,
            payload=payload,
            idempotency_key=idempotency_key,
            start=start,
        )
        if warn_unawaited:
            _warn_if_unawaited(delivery, name)
        return delivery

    @property
    def deadline(self) -> datetime | None:
        """When the dispatcher cancels (or pauses) this workflow if it has not
        ended (R-DL-01, R-DL-02): an aware UTC datetime, or None: no deadline,
        a deadline a pause spent (R-DL-23), or no ``add_workflow_deadlines``
        install unit (R-DL-50: nothing reads the absent column)."""
        session = orm.object_session(self)
        if session is None:
            # Not stored yet: what create() set, if anything, without a read.
            return self.__dict__.get("deadline_at")
        if not deadline_rows.installed(session):
            return None
        with session.no_autoflush:
            return self.deadline_at  # type: ignore[attr-defined, no-any-return]

    @property
    def received_signal(self) -> Any:
        """The workflow signal the running ``wait_for`` step claimed (R-WSIG-17).

        Inside the body (and its hooks) of a step declared with ``wait_for``:
        the ``WorkflowSignal`` row (``.name``, ``.payload``,
        ``.idempotency_key``, ``.created_at``). None elsewhere.
        """
        return self.__dict__.get("_geneva_received_signal")


def _warn_if_unawaited(delivery: Any, name: str) -> None:
    """Issue :class:`UnawaitedSignalWarning` for a stored signal no step awaits.

    ``delivery.unawaited`` says what the class's steps wait for (R-WSIG-73); the
    warning points at the line that called ``signal()`` or ``signal_hero()``.
    """
    if delivery.unawaited is not None:
        warnings.warn(
            UnawaitedSignalWarning(
                f"workflow signal {name!r} was stored, but {delivery.unawaited}"
            ),
            stacklevel=3,
        )

"""Workflow signals: steps that wait for external events (SPEC §23, R-WSIG-01..41).

A *workflow signal* is an external event sent to one workflow —
``workflow.signal("payment_confirmed", payload)`` from a webhook, an approval
or another system. A step declared with ``@step(wait_for=...)`` runs only once
a matching signal is there. (Not the blinker instrumentation signals of
:mod:`flask_geneva.signals`.)

How the two meet, whichever comes first, under the workflow's row lock that
both the sender and the executor take first (R-WSIG-30):

- **signal first**: :func:`deliver_signal` stores it ``pending`` (buffered);
  when the step's execution reaches its gate (:func:`pass_gate`, in the
  executor's prepare phase) it claims the oldest matching pending signal and
  runs with it (R-WSIG-13).
- **step first**: the gate finds nothing and parks the execution in
  ``waiting`` (transition ``park``): no broker message is held. The sender
  finds the parked execution, evaluates its matcher, claims the signal and
  wakes the execution (``wake``: ``scheduled``, due now) in its own
  transaction; the task is published after that commit (R-WSIG-11). A lost
  publication is sent again by the dispatcher
  (:func:`flask_geneva.engine.workflow_signals.waits.dispatch_signal_waits`, R-WSIG-31).

A claimed signal belongs to its step until the step resolves (completes, is
skipped, or the workflow ends): a reattempt, ``resume()``, recovery or a
resumable successor re-reads the same signal at the gate (R-WSIG-14/15).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core import cursors
from flask_geneva.core.stored_names import NAME_RULE
from flask_geneva.core.stored_names import fits_name_column
from flask_geneva.db import locks as row_locks
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db import workflow_signals as signal_rows
from flask_geneva.db import write_path
from flask_geneva.db.context import context_of
from flask_geneva.dsl.signal_matchers import unawaited_signal_message
from flask_geneva.engine import metric_events
from flask_geneva.engine import scheduling
from flask_geneva.engine import traces
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.exceptions import GenevaError
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.exceptions import SignalBufferFullError
from flask_geneva.exceptions import SignalPayloadTooLargeError
from flask_geneva.exceptions import SignalWaitTimeout
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.models import Outcome
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState
from flask_geneva.telemetry import tracing

__all__ = [
    "NOT_INSTALLED_MESSAGE",
    "GateResult",
    "NotOngoingError",
    "SignalDelivery",
    "deliver_signal",
    "end_signals_with_workflows",
    "pass_gate",
    "settle_claimed_signals",
    "wake",
    "wake_for_resume",
]

NOT_INSTALLED_MESSAGE = (
    "{what} needs the workflow signals table and the waiting columns of the step "
    "executions table. Run `flask geneva install` and then `flask db upgrade` to "
    "add them (install unit add_workflow_signals)."
)

_ENDED = (WorkflowState.FINISHED, WorkflowState.CANCELED)


class NotOngoingError(InvalidStateError):
    """The workflow found for a delivery had ended, or was gone, under its lock.

    An :class:`~flask_geneva.exceptions.InvalidStateError` to every caller;
    ``signal_hero`` catches it to look for the hero's workflow again
    (R-WSIG-25): the one it found ended between its lookup and the lock.
    """


@dataclasses.dataclass(frozen=True)
class SignalDelivery:
    """What :meth:`Workflow.signal` did (R-WSIG-20).

    Attributes:
        signal: The stored ``WorkflowSignal`` row (the earlier one for a
            duplicate).
        duplicate: True when a signal with the same idempotency key was
            already delivered to this workflow: nothing was written or woken.
        woken: Ids of the step executions this delivery woke (empty, or one).
        unawaited: For a stored signal whose name no step of the workflow's
            class waits for (a misspelt name), what the steps wait for, e.g.
            ``"no step of Checkout waits for 'paid'; its steps wait for
            'payment_confirmed'"``; else None (R-WSIG-73).
    """

    signal: Any
    duplicate: bool
    woken: tuple[Any, ...] = ()
    unawaited: str | None = None


@dataclasses.dataclass(frozen=True)
class GateResult:
    """How an execution passed its ``wait_for`` gate (:func:`pass_gate`).

    Attributes:
        kind: ``"run"`` (a signal is claimed: ``signal``), ``"parked"`` (the
            execution now waits) or ``"timed_out"`` (its wait deadline passed
            without a signal, R-WSIG-40).
        signal: The claimed signal row for ``"run"``.
    """

    kind: str
    signal: Any = None


def installed(session: orm.Session) -> bool:
    """Whether the ``add_workflow_signals`` unit is installed (R-WSIG-04)."""
    return column_detection.optional_columns(session).workflow_signals


def _require_installed(session: orm.Session, what: str) -> None:
    if not installed(session):
        raise GenevaError(NOT_INSTALLED_MESSAGE.format(what=what))


def _validated_text(value: Any, what: str, *, allow_none: bool) -> str | None:
    if value is None and allow_none:
        return None
    # PostgreSQL text cannot hold a NUL character: refused on every database.
    if not fits_name_column(value):
        allowed = "None or " if allow_none else ""
        raise ValueError(f"{what} must be {allowed}{NAME_RULE}, got {value!r}")
    return value


def _encoded_payload(payload: Any, max_size: int | None) -> Any:
    """The payload through the cursor codec, NUL- and size-checked (R-WSIG-21)."""
    if payload is None:
        return None
    return cursors.dump_document(
        payload, root="payload", max_size=max_size, too_large=_payload_too_large
    )


def _payload_too_large(size: int, max_size: int) -> SignalPayloadTooLargeError:
    return SignalPayloadTooLargeError(
        f"signal payload is {size} bytes, more than GENEVA_MAX_SIGNAL_PAYLOAD_SIZE "
        f"({max_size} bytes); send a reference (an id, a URL) instead of the "
        "document, or raise the setting (None disables the check)"
    )


# -- sending (R-WSIG-20..25, R-WSIG-30..33) ------------------------------------


def deliver_signal(
    session: orm.Session,
    workflow: Any,
    name: str,
    *,
    payload: Any = None,
    idempotency_key: str | None = None,
    commit: bool = True,
) -> SignalDelivery:
    """Store a workflow signal for ``workflow``; wake its parked step if it matches.

    One transaction under the workflow's row lock (R-WSIG-30): a duplicate
    idempotency key returns the earlier signal and changes nothing
    (R-WSIG-22), also when the workflow has finished or been canceled since
    (R-WSIG-24); otherwise the signal is inserted ``pending``. If the workflow is
    ``ready`` and its execution is parked (``waiting``), the step's matcher is
    evaluated: a match claims the signal for the step and wakes the execution
    (R-WSIG-11); a matcher that raises never fails the sender: its error is
    stored on the signal and the execution is woken without a signal, so the
    gate evaluates it again and the step's policies handle the error
    (R-WSIG-33). A paused workflow keeps the signal for ``resume()`` (R-WSIG-32).
    A parked execution whose workflow class or step the code does not define
    (neither a step, a rename nor a gravestone) is not woken (R-WSIG-72).

    Args:
        session: The session the workflow belongs to (bound to a context).
        workflow: The workflow instance (its copy may be stale; the state is
            read under the lock).
        name: The signal name, a non-empty str of at most 255 characters.
        payload: None or a value of the cursor codec's types (R-CUR-01).
        idempotency_key: None, or a str unique per workflow.
        commit: Commit (and publish the wake); False flushes and leaves the
            commit to the caller, whose commit publishes the wake.

    Returns:
        The :class:`SignalDelivery`; for a stored signal no step of the
        workflow's class waits for, its ``unawaited`` says what they wait for
        (R-WSIG-73).

    Raises:
        ValueError: ``name`` or ``idempotency_key`` is not a valid str.
        CursorSerializationError: The payload holds an unsupported type.
        SignalPayloadTooLargeError: The encoded payload is larger than
            ``GENEVA_MAX_SIGNAL_PAYLOAD_SIZE``.
        SignalBufferFullError: The workflow already buffers
            ``GENEVA_MAX_PENDING_SIGNALS_PER_WORKFLOW`` pending signals.
        InvalidStateError: The workflow is gone, or finished or canceled and
            the signal is no retry of one it received (R-WSIG-24).
        GenevaError: The ``add_workflow_signals`` unit is not installed.
    """
    settings = context_of(session).settings
    _validated_text(name, "signal name", allow_none=False)
    _validated_text(idempotency_key, "idempotency_key", allow_none=True)
    data = _encoded_payload(payload, settings.max_signal_payload_size_bytes)
    _require_installed(session, "workflow.signal()")
    signal_cls = workflow.__geneva__.WorkflowSignal
    span = None
    try:
        locked = row_locks.lock_workflow(session, workflow.id)
        if locked is None:
            raise NotOngoingError(f"workflow {workflow.id} no longer exists")
        # R-OTEL-31: the delivery's span, current until it committed.
        span = traces.action_span(
            f"geneva.signal {name}",
            kind="producer",
            workflow=locked,
            attributes=_span_attributes(name),
        )
        if locked.state in _ENDED:
            delivery = _retry_after_end(
                session, locked, signal_cls, name, idempotency_key
            )
        else:
            delivery = _store_and_wake(
                session, locked, signal_cls, name, data, idempotency_key, settings
            )
        workflow_cls = locked.__geneva__.workflow_class(locked.type)
        if not delivery.duplicate:
            delivery = dataclasses.replace(
                delivery, unawaited=unawaited_signal_message(workflow_cls, name)
            )
        metric_events.signal_delivered(  # R-OMET-14
            locked,
            metric_events.signal_tag(workflow_cls, name),
            metric_events.delivery_result(delivery.duplicate, delivery.woken),
        )
        if commit:
            session.commit()
            context_of(session).run_queued_tasks()
        else:
            session.flush()
    except BaseException as error:
        session.rollback()
        if span is not None:
            span.record_error(error)
        raise
    finally:
        if span is not None:
            span.end()
    return delivery


def _span_attributes(name: str) -> dict[str, Any]:
    """The signal delivery span's own attributes (R-OTEL-31)."""
    return {
        tracing.ATTRIBUTES["signal_name"]: name,
        "messaging.system": tracing.MESSAGING_SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "signal",
    }


def _retry_after_end(
    session: orm.Session, workflow: Any, signal_cls: Any, name: str, key: str | None
) -> SignalDelivery:
    """A finished or canceled workflow answers only a retry (R-WSIG-24).

    A signal whose idempotency key the workflow already received (a webhook
    retried after the workflow ended) is a duplicate: nothing is written. The
    read locks, so it sees the newest committed row even in a REPEATABLE READ
    snapshot the caller's transaction took earlier (MariaDB/MySQL).

    Raises:
        InvalidStateError: No key, or a key the workflow never received.
    """
    if key is not None:
        existing = signal_rows.signal_by_key(
            session, signal_cls, workflow.id, key, lock=True
        )
        if existing is not None:
            return SignalDelivery(existing, duplicate=True)
    received = "" if key is None else f" (no signal with idempotency key {key!r})"
    raise NotOngoingError(
        f"Cannot signal a {workflow.state} workflow ({workflow.id}){received}: "
        f"signal {name!r} was not stored"
    )


def _store_and_wake(
    session: orm.Session,
    workflow: Any,
    signal_cls: Any,
    name: str,
    data: Any,
    key: str | None,
    settings: Any,
) -> SignalDelivery:
    if key is not None:
        existing = signal_rows.signal_by_key(session, signal_cls, workflow.id, key)
        if existing is not None:
            return SignalDelivery(existing, duplicate=True)
    cap = settings.max_pending_signals_per_workflow
    if signal_rows.count_pending_signals(session, signal_cls, workflow.id) >= cap:
        raise SignalBufferFullError(
            f"workflow {workflow.id} already buffers {cap} pending signals "
            f"(GENEVA_MAX_PENDING_SIGNALS_PER_WORKFLOW); signal {name!r} was not "
            "stored. Is a step waiting for them, or are they sent to the wrong "
            "workflow?"
        )
    now = clock.now()
    signal = signal_cls(
        workflow_id=workflow.id,
        name=name,
        payload_data=data,
        idempotency_key=key,
        state="pending",
        created_at=now,
        updated_at=now,
    )
    if not signal_rows.insert_signal(session, signal):
        # A concurrent delivery with this key committed first (R-WSIG-22).
        existing = signal_rows.signal_by_key(
            session,
            signal_cls,
            workflow.id,
            key,  # type: ignore[arg-type]  # a duplicate has a key
            lock=True,
        )
        return SignalDelivery(existing, duplicate=True)
    workflow.logger.info("workflow signal %r received (signal %s)", name, signal.id)
    if workflow.state != WorkflowState.READY:
        # Paused (delivered on resume, R-WSIG-32) or performing (its step runs).
        return SignalDelivery(signal, duplicate=False)
    execution_cls = workflow.__geneva__.StepExecution
    parked = signal_rows.lock_waiting_execution(session, execution_cls, workflow.id)
    if parked is None:
        return SignalDelivery(signal, duplicate=False)
    step = workflow.steps.named(parked.step_name)
    if step is None and not workflow.steps.is_removed(parked.step_name):
        # R-WSIG-72: no class, or a step the code does not know: waking it
        # would fail the execution and pause the workflow (R-EXE-14).
        workflow.logger.warning(
            "step %r of the parked execution %s is not defined in %r: signal %s "
            "is stored pending and wakes nothing",
            parked.step_name,
            parked.id,
            workflow.type,
            signal.id,
        )
        return SignalDelivery(signal, duplicate=False)
    wait_for = getattr(step, "wait_for", None)
    claimed = False
    if wait_for is not None:
        try:
            matched = wait_for.matches(workflow, signal)
        except Exception as error:  # noqa: BLE001 - R-WSIG-33: never fails the sender
            signal.matcher_error = f"{type(error).__name__}: {error}"[:10000]
            session.flush()
            workflow.logger.warning(
                "matcher of step %r raised %s on signal %s; waking the step so "
                "its exception policies handle it",
                parked.step_name,
                type(error).__name__,
                signal.id,
            )
        else:
            if not matched:
                return SignalDelivery(signal, duplicate=False)
            claimed = signal_rows.claim_signal(session, signal, parked.step_name, now)
    wake(session, workflow, parked, now, signal_id=signal.id if claimed else None)
    return SignalDelivery(signal, duplicate=False, woken=(parked.id,))


def wake(
    session: orm.Session,
    workflow: Any,
    execution: Any,
    now: Any,
    *,
    signal_id: Any = None,
) -> None:
    """Apply ``wake`` and request the publication after the commit (R-WSIG-11)."""
    attributes: dict[str, Any] = {"scheduled_for": now}
    if signal_id is not None:
        attributes["signal_id"] = signal_id
    transitions.apply(
        transitions.WAKE,
        now,
        workflow=workflow,
        execution=execution,
        execution_attributes=attributes,
    )
    scheduling.enqueue_scheduled_execution(session, workflow, execution)
    workflow.logger.info(
        "woke step %r (execution %s)", execution.step_name, execution.id
    )


# -- the gate (R-WSIG-10..16, R-WSIG-40) ------------------------------------


def pass_gate(
    session: orm.Session, workflow: Any, execution: Any, step: Any, now: Any
) -> GateResult:
    """Find the signal a ``wait_for`` step runs with, or park it (R-WSIG-10..14).

    Called by the executor's prepare phase with the workflow and the execution
    locked, after the preconditions passed. In order: the signal the execution
    was woken with; the signal the step claimed earlier and has not consumed (a
    reattempt, ``resume()``, recovery or a resumable successor re-reads it,
    R-WSIG-14); the oldest pending signal its matcher accepts, claimed now
    (R-WSIG-13). Without one: a passed ``wait_deadline`` is a timeout
    (R-WSIG-40), else the execution parks (``park``, R-WSIG-10), keeping the
    time it first parked and its deadline.

    Raises:
        StepConfigurationError: The ``add_workflow_signals`` unit is not
            installed (the caller fails the step, R-WSIG-04).
        Exception: Whatever the step's matcher raises (the caller hands it to
            the exception policies, R-WSIG-33).
    """
    if not installed(session):
        raise StepConfigurationError(
            NOT_INSTALLED_MESSAGE.format(
                what=f"Step '{step.name}' of {workflow.type} (wait_for)"
            )
        )
    geneva = workflow.__geneva__
    signal_cls = geneva.WorkflowSignal
    signal = None
    if execution.signal_id is not None:
        signal = session.get(
            signal_cls,
            execution.signal_id,
            populate_existing=True,
            with_for_update=True,
        )
        if signal is not None and signal.state != "claimed":
            signal = None
    if signal is None:
        signal = signal_rows.claimed_signal_for_step(
            session, signal_cls, workflow.id, step.name
        )
    if signal is None:
        signal = _claim_pending(session, workflow, step, signal_cls, now)
    if signal is not None:
        return GateResult("run", signal)
    deadline = execution.wait_deadline
    if deadline is not None and deadline <= now:
        return GateResult("timed_out")
    since = execution.waiting_since or now
    if deadline is None and step.wait_timeout is not None:
        deadline = since + step.wait_timeout
    transitions.apply(
        transitions.PARK,
        now,
        workflow=workflow,
        execution=execution,
        execution_attributes={"waiting_since": since, "wait_deadline": deadline},
    )
    return GateResult("parked")


def _claim_pending(
    session: orm.Session, workflow: Any, step: Any, signal_cls: Any, now: Any
) -> Any:
    settings = context_of(session).settings
    wait_for = step.wait_for
    for candidate in signal_rows.pending_signals(
        session,
        signal_cls,
        workflow.id,
        wait_for.names,
        limit=settings.max_pending_signals_per_workflow,
    ):
        if wait_for.matches(workflow, candidate) and signal_rows.claim_signal(
            session, candidate, step.name, now
        ):
            return candidate
    return None


def timeout_error(step: Any, execution: Any) -> SignalWaitTimeout:
    """The :class:`SignalWaitTimeout` of ``execution`` at ``step`` (R-WSIG-40)."""
    waited = step.wait_timeout or timedelta(0)
    return SignalWaitTimeout(
        f"Step '{step.name}' waited {waited} for workflow signal "
        f"{step.wait_for.description} (since "
        f"{execution.waiting_since.isoformat() if execution.waiting_since else '?'})"
        " without receiving it",
        signal_name=step.wait_for.description,
    )


def settle_claimed_signals(
    session: orm.Session, workflow: Any, execution: Any, now: Any
) -> int:
    """Consume the claimed signals whose step resolved (R-WSIG-15).

    A claimed signal is consumed when the workflow ended (finished or
    canceled: every claimed signal of it), or when an execution of its step
    completed with ``success`` or was skipped. A reattempt, a pause, a failure
    or a continuation keeps it claimed for the step's next execution.

    The ended-workflow case mostly repeats :func:`end_signals_with_workflows`
    (R-WSIG-34), but not always: a workflow row whose changes include a
    non-column attribute (a relationship assigned in the same flush) is left
    by :func:`flask_geneva.db.write_path.write_geneva_rows` to the ORM flush, which
    calls no ``on_workflows_ended`` listener. So it stays.

    Args:
        execution: The execution just written, or None (an operator's action on
            the workflow alone).

    Returns:
        How many signals were consumed (0 without the install unit).
    """
    if not installed(session):
        return 0
    signal_cls = workflow.__geneva__.WorkflowSignal
    if workflow.state in _ENDED:
        return signal_rows.consume_claimed_signals(
            session, signal_cls, workflow.id, now
        )
    if execution is None:
        return 0
    resolved = execution.state == StepExecutionState.SKIPPED or (
        execution.state == StepExecutionState.COMPLETED
        and execution.outcome == Outcome.SUCCESS
    )
    if not resolved:
        return 0
    return signal_rows.consume_claimed_signals(
        session, signal_cls, workflow.id, now, step_name=execution.step_name
    )


@write_path.on_workflows_ended
def end_signals_with_workflows(
    session: orm.Session, geneva: Any, workflow_ids: list[Any], now: Any
) -> int:
    """End the signals of workflows just written finished or canceled (R-WSIG-34).

    Called by the write path (:func:`flask_geneva.db.write_path.write_geneva_rows`)
    in the transaction that ends the workflows, whatever ended them: pending
    signals become ``expired``, claimed ones ``consumed`` (R-WSIG-15).

    Returns:
        How many signals were ended (0 without the install unit or a
        ``WorkflowSignal`` model).
    """
    signal_cls = getattr(geneva, "WorkflowSignal", None)
    if signal_cls is None or not installed(session):
        return 0
    return signal_rows.end_signals_of_workflows(session, signal_cls, workflow_ids, now)


def consume_for_skipped_step(
    session: orm.Session, workflow: Any, step_name: str | None, now: Any
) -> int:
    """Consume what the step an operator skipped had claimed (R-WSIG-12)."""
    if step_name is None or not installed(session):
        return 0
    return signal_rows.consume_claimed_signals(
        session,
        workflow.__geneva__.WorkflowSignal,
        workflow.id,
        now,
        step_name=step_name,
    )


def wake_for_resume(session: orm.Session, workflow: Any, execution: Any) -> Any:
    """``resume()`` of a workflow whose step is parked: wake it (R-WSIG-32).

    The gate then claims what arrived while the workflow was paused, or parks
    the execution again (keeping its deadline).
    """
    wake(session, workflow, execution, clock.now())
    return execution

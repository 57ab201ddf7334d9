"""A delivered step claimed by its locking statement, if no user code decides.

R-EXE-84.

The prepare stage (:mod:`flask_geneva.engine.executor.prepare`) locks the
workflow and the execution, checks them and, when the step may run, claims it
with a second statement. On PostgreSQL, for a *plain* step, the locking
statement claims it itself (:mod:`flask_geneva.db.claim_statement`), saving a
statement and its round trip on every delivered step. A step is plain when
deciding whether it runs needs no user code and nothing but its two rows and
its hero: its workflow class has no cancel condition, and the step has no
``skip_if``/``run_if``, no ``wait_for`` (R-WSIG-10), no children wait
(R-CHD-21), no limits (R-LIM-10) and is no resumable step. The statement
guards everything else the checks read (R-EXE-11..13, R-EXE-18, R-LIM-14).

Then :func:`claim` checks the locked rows again in Python as prepare would,
applies the ``claim`` transition to the instances (its listeners run as
usual), and has :func:`flask_geneva.db.write_path.settle_written_claim` confirm
that the statement wrote exactly what the transition changed. Any
disagreement rolls the claim back and prepare takes its usual path, locking
again. A statement that claimed nothing leaves the rows locked as the usual
locking read does, and prepare goes on with them: a step that is not plain
costs no extra statement.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import sqlalchemy as sa

from flask_geneva import signals
from flask_geneva.core import clock
from flask_geneva.core.tagged_logging import as_tagged
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import claim_statement
from flask_geneva.db import session_sync
from flask_geneva.db import session_transactions
from flask_geneva.db import write_path
from flask_geneva.db.session_transactions import geneva_from_session
from flask_geneva.engine import limits as flow_limits
from flask_geneva.engine.executor import events as executor_events
from flask_geneva.engine.executor import hero_probes
from flask_geneva.engine.executor.run import StepRun
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState

__all__ = ["StatementClaim", "claim", "is_plain_step", "plain_steps"]

_log = module_logger("flask_geneva")

_RUNNABLE_WORKFLOW_STATES = (WorkflowState.READY, WorkflowState.PERFORMING)


@dataclasses.dataclass(frozen=True)
class PlainSteps:
    """The plain steps of the registered workflow classes (see the module).

    Attributes:
        types: Workflow types, one per plain step.
        steps: Step names, parallel to ``types``.
        heroless_types: Types whose class may proceed without a hero.
    """

    types: tuple[str, ...]
    steps: tuple[str, ...]
    heroless_types: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class StatementClaim:
    """What :func:`claim` did.

    Attributes:
        prepared: ``(workflow, execution, step)`` claimed and committed, as
            prepare returns a claim; None when not claimed here.
        locked: ``(workflow, execution, hero present)`` locked by the
            statement without a claim, for prepare to go on with; None when
            nothing is locked (prepare locks the usual way).
    """

    prepared: tuple[Any, Any, Any] | None = None
    locked: tuple[Any, Any, bool | None] | None = None


_NOT_TRIED = StatementClaim()
_plain_cache: dict[Any, PlainSteps] = {}


def is_plain_step(workflow_cls: Any, step: Any) -> bool:
    """Whether ``step`` of ``workflow_cls`` is claimed by its locking statement.

    Args:
        workflow_cls: A workflow class.
        step: One of its step definitions.

    Returns:
        True when running it depends on no user code (see the module) and the
        class is loaded from a locked row without calling ``__init__``.
    """
    return (
        not workflow_cls.__geneva_definitions__.cancel_conditions
        and step.skip_if is None
        and step.run_if is None
        and step.wait_for is None
        and step.wait_for_children is None
        and not step.limits
        and not step.is_resumable
        and not getattr(workflow_cls, "__geneva_defines_init__", False)
    )


def plain_steps(workflow_base: Any) -> PlainSteps:
    """The plain steps of every class mapped under ``workflow_base``.

    Worked out again whenever the classes mapped under it change.

    Args:
        workflow_base: A Geneva's ``Workflow`` base class.
    """
    mappers = sa.inspect(workflow_base).polymorphic_map
    key = (workflow_base, tuple(id(mapper) for mapper in mappers.values()))
    found = _plain_cache.get(key)
    if found is not None:
        return found
    types: list[str] = []
    steps: list[str] = []
    heroless: list[str] = []
    for type_name, mapper in mappers.items():
        cls = mapper.class_
        if not isinstance(type_name, str) or not hasattr(cls, "step_collection"):
            continue
        if cls.may_proceed_without_hero:
            heroless.append(type_name)
        for step in cls.step_collection():
            if is_plain_step(cls, step):
                types.append(type_name)
                steps.append(step.name)
    found = PlainSteps(tuple(types), tuple(steps), tuple(heroless))
    if len(_plain_cache) > 64:
        _plain_cache.clear()
    _plain_cache[key] = found
    return found


def claim(run: StepRun) -> StatementClaim:
    """Lock ``run.execution_id`` with its workflow and claim it, if plain (R-EXE-84).

    Tried on PostgreSQL when some registered step is plain. Ends the
    transaction when it claims (committed) or gives up on a claim it made
    (rolled back); otherwise leaves the rows locked in it.

    Args:
        run: The run of the delivered execution.

    Returns:
        The claim (committed: the ``precondition`` signal is sent), or the
        rows locked without one, or neither (nothing tried, the execution
        row missing, or the claim given up): prepare then locks as usual.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: The statement or the commit failed
            (rolled back by the caller; a deadlock is retried, R-EXE-80).
    """
    session = run.session
    if (
        run.execution_id is None
        or run.lookup_attempts < 1
        or session_sync.bind_of(session).dialect.name != "postgresql"
    ):
        return _NOT_TRIED
    geneva = geneva_from_session(session)
    plain = plain_steps(geneva.Workflow)
    if not plain.types:
        return _NOT_TRIED
    now = clock.now()
    attributes = worker_registry.claim_attributes(session)
    request = claim_statement.ClaimRequest(
        now=now,
        due_by=None if run.run_early else now + run.settings.clock_skew_tolerance,
        worker_id=None if attributes is None else attributes["worker_id"],
        plain_types=plain.types,
        plain_steps=plain.steps,
        heroless_types=plain.heroless_types,
    )
    locked = claim_statement.lock_and_claim(
        session, run.execution_id, hero_probes.claim_probes(session), request
    )
    if locked is None:
        return _NOT_TRIED
    workflow, execution = locked.workflow, locked.execution
    if locked.written is None:
        return StatementClaim(locked=(workflow, execution, locked.hero_present))
    step = _claim_stands(run, locked, now)
    if step is not None:
        transitions.apply(
            transitions.CLAIM,
            now,
            workflow=workflow,
            execution=execution,
            execution_attributes=attributes,
            current_step_name=step.name,
        )
        written = {execution: locked.written[0], workflow: locked.written[1]}
        if write_path.settle_written_claim(session, geneva, written):
            return StatementClaim(prepared=_commit(run, workflow, execution, step))
        as_tagged(run.base_logger or _log).warning(
            "the claim statement of step execution %s wrote other values than the "
            "claim transition; claiming it again with a locked read",
            run.execution_id,
        )
    session.rollback()
    return _NOT_TRIED


def _claim_stands(run: StepRun, locked: Any, now: Any) -> Any:
    """The step, when prepare's checks pass on the locked rows; else None.

    The statement's guards made them pass already; this is what prepare
    would check, on the rows as they were locked.
    """
    workflow, execution = locked.workflow, locked.execution
    if (
        execution.state != StepExecutionState.SCHEDULED
        or workflow.state not in _RUNNABLE_WORKFLOW_STATES
    ):
        return None
    if (
        not run.run_early
        and execution.scheduled_for - now > run.settings.clock_skew_tolerance
    ):
        return None
    workflow_cls = type(workflow)
    if not workflow_cls.may_proceed_without_hero:
        if locked.hero_present is False:
            return None
        if locked.hero_present is None:
            # Not probed: loaded as prepare loads it, its type learned (R-EXE-83).
            try:
                if hero_probes.hero_missing_at_claim(run.session, workflow, None):
                    return None
            except Exception:  # noqa: BLE001 - prepare's path handles it (R-HERO-03)
                return None
    step = workflow.steps.named(execution.step_name)
    if (
        step is None
        or not is_plain_step(workflow_cls, step)
        or flow_limits.parked(run.session, execution)
    ):
        return None
    return step


def _commit(
    run: StepRun, workflow: Any, execution: Any, step: Any
) -> tuple[Any, Any, Any]:
    """Start the run on the claimed rows and commit the claim, as prepare does."""
    run.install_loggers(workflow, execution)
    run.enter_error_context(workflow, execution)
    run.start_trace(workflow, execution)  # R-OTEL-12
    run.events.set_payload_base(workflow, execution, step)
    started_at, started = clock.now(), time.monotonic()
    run.passed_timing = executor_events.timing(started_at, started)
    run.mark_running(execution.id)  # before the claim commits (R-WRK-18)
    session_transactions.commit_keeping_state(run.session)
    run.events.emit(signals.precondition, run.passed_timing, outcome="passed")
    return workflow, execution, step

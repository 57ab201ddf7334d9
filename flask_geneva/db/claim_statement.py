"""Lock a delivered execution with its workflow and claim it, in one statement.

PostgreSQL only (R-EXE-84). A delivered step's claim used to send the locking
read of :func:`flask_geneva.db.locks.lock_workflow_and_execution_probing_heroes`,
then, after the executor's checks, the claim's guarded ``UPDATE`` of both rows.
For a step whose checks need no user code (the engine lists those steps in the
:class:`ClaimRequest`), the one statement built here does both::

    WITH geneva_locked AS (SELECT <both rows>, <hero probe> FROM workflows
                           JOIN step_executions ... FOR UPDATE),
         geneva_claimed_execution AS (UPDATE step_executions ... FROM geneva_locked
                                      WHERE <every guard> RETURNING id),
         geneva_claimed_workflow AS (UPDATE workflows ... WHERE EXISTS
                                     (SELECT FROM geneva_claimed_execution)
                                     RETURNING id)
    SELECT geneva_locked.*, (SELECT count(*) FROM geneva_claimed_workflow)
    FROM geneva_locked

The locking read is the one :mod:`flask_geneva.db.locks` sends (the workflow
row locked before the execution row, SPEC §7), so its result is returned as
that read's: the rows *as locked, before the claim*, materialized into the
session's instances. The guards are what the executor checks before a claim:
the execution ``scheduled`` and due (R-EXE-11, R-EXE-18), the workflow
``ready`` or ``performing`` (R-EXE-12), the hero not found missing by the
probe or not needed (R-EXE-13, R-EXE-83; a hero the statement does not probe
is the caller's to check), no limit queue entry (R-LIM-14), and the (workflow type,
step name) pair one of the listed plain steps. When a guard fails nothing is
written and the caller goes on exactly as after the plain locking read (the
rows stay locked in its transaction).

The claim writes what the ``claim`` transition writes (R-EXE-17): the
execution ``in_progress`` with ``started_at`` and ``updated_at`` at the
request's time and the claiming ``worker_id`` (R-WRK-05); the workflow
``performing`` with ``current_step_name``, ``started_at`` on its first claim
and ``updated_at``. The executor applies the transition to the instances as
well and :func:`flask_geneva.db.write_path.settle_written_claim` checks the
two agree before anything commits.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.dialects import postgresql

from flask_geneva.db import locks
from flask_geneva.db import session_sync
from flask_geneva.db.optional_columns import cached_statement
from flask_geneva.db.optional_columns import optional_columns
from flask_geneva.db.session_transactions import geneva_from_session
from flask_geneva.db.states import StepExecutionState
from flask_geneva.db.states import WorkflowState

__all__ = ["ClaimRequest", "LockedPair", "lock_and_claim"]

_CLAIMABLE_WORKFLOW_STATES = (WorkflowState.READY.value, WorkflowState.PERFORMING.value)


@dataclasses.dataclass(frozen=True)
class ClaimRequest:
    """What the one-statement claim may claim, and what it writes (R-EXE-84).

    Attributes:
        now: The claim's time (aware UTC): ``started_at`` and ``updated_at``.
        due_by: The latest ``scheduled_for`` that is not early (the claim's
            time plus the clock-skew tolerance, R-EXE-18); None claims an
            execution whatever its ``scheduled_for`` (a run-early delivery).
        worker_id: The claiming worker's id (R-WRK-05), or None to write none.
        plain_types: Workflow types of the claimable steps, one per step.
        plain_steps: The step names, parallel to ``plain_types``.
        heroless_types: Workflow types that may run without their hero
            (R-HERO-05): claimed whatever the hero probe says.
    """

    now: datetime
    due_by: datetime | None
    worker_id: Any
    plain_types: tuple[str, ...]
    plain_steps: tuple[str, ...]
    heroless_types: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class LockedPair:
    """The locked rows as :func:`lock_and_claim` read them.

    Attributes:
        workflow: The workflow instance, holding the row as locked (before the
            claim).
        execution: The execution instance, likewise.
        hero_present: Whether the hero row exists; None when not probed.
        written: When the statement claimed the execution, what it wrote, by
            column name: ``(the execution's, the workflow's)``, ``updated_at``
            included. The rows in the database are then ``in_progress`` and
            ``performing`` (uncommitted), unlike the instances, until the
            caller applies the claim. None when nothing was claimed.
    """

    workflow: Any
    execution: Any
    hero_present: bool | None
    written: tuple[dict[str, Any], dict[str, Any]] | None


def lock_and_claim(
    session: orm.Session,
    step_execution_id: Any,
    hero_types: tuple[tuple[str, Any], ...],
    request: ClaimRequest,
) -> LockedPair | None:
    """Lock the execution and its workflow; claim it when every guard holds.

    Args:
        session: A session on PostgreSQL; its transaction takes the locks and
            holds the claim until the caller commits or rolls back.
        step_execution_id: The delivered execution's primary key.
        hero_types: ``(hero_type, hero class)`` pairs the statement probes
            (as for :func:`~flask_geneva.db.locks.
            lock_workflow_and_execution_probing_heroes`).
        request: What may be claimed and what the claim writes.

    Returns:
        The locked pair; None when the execution row is gone (nothing locked),
        or when the rows must be loaded by the ORM (see
        :func:`~flask_geneva.db.locks.materialize_locked_pair`): the caller
        then locks them the usual way (a claim the statement made is rolled
        back first; otherwise the rows stay locked in the transaction).
    """
    connection = session_sync.connection_of(session)
    workflow_keys, workflow_columns, execution_keys, execution_columns, _ = (
        locks.lock_columns(session)
    )
    type_keys = tuple(
        (name, sa.inspect(cls).primary_key[0]) for name, cls in hero_types
    )
    writes_worker = (
        request.worker_id is not None and optional_columns(session).worker_registry
    )
    guards_queue = any(column.name == "limit_holds" for column in execution_columns)
    geneva = geneva_from_session(session)
    statement = cached_statement(
        (
            "lock-and-claim",
            geneva.Workflow,
            workflow_columns,
            execution_columns,
            type_keys,
            writes_worker,
            guards_queue,
            request.due_by is not None,
        ),
        lambda: _statement(
            geneva,
            workflow_columns,
            execution_columns,
            type_keys,
            writes_worker=writes_worker,
            guards_queue=guards_queue,
            guards_due=request.due_by is not None,
        ),
    )
    params: dict[str, Any] = {
        "step_execution_id": step_execution_id,
        "geneva_claim_now": request.now,
        "geneva_plain_types": list(request.plain_types),
        "geneva_plain_steps": list(request.plain_steps),
        "geneva_heroless_types": list(request.heroless_types),
    }
    if request.due_by is not None:
        params["geneva_due_by"] = request.due_by
    if writes_worker:
        params["geneva_worker_id"] = request.worker_id
    row = connection.execute(statement, params).one_or_none()
    if row is None:
        return None
    split = len(workflow_keys)
    end = split + len(execution_keys)
    pair = locks.materialize_locked_pair(
        session,
        (workflow_keys, row[:split]),
        (execution_keys, row[split:end]),
    )
    if pair is None:
        if row[-1]:
            session.rollback()  # the claim with it
        return None
    workflow, execution = pair
    present = row[end] if type_keys else None
    written = None
    if row[-1]:
        execution_values = {
            "state": StepExecutionState.IN_PROGRESS.value,
            "started_at": request.now,
            "updated_at": request.now,
        }
        if writes_worker:
            execution_values["worker_id"] = request.worker_id
        workflow_values = {
            "state": WorkflowState.PERFORMING.value,
            "current_step_name": execution.step_name,
            "started_at": workflow.started_at or request.now,
            "updated_at": request.now,
        }
        written = (execution_values, workflow_values)
    return LockedPair(
        workflow, execution, None if present is None else bool(present), written
    )


def _statement(
    geneva: Any,
    workflow_columns: Any,
    execution_columns: Any,
    type_keys: tuple[tuple[str, Any], ...],
    *,
    writes_worker: bool,
    guards_queue: bool,
    guards_due: bool,
) -> Any:
    workflows = sa.inspect(geneva.Workflow).local_table
    executions = sa.inspect(geneva.StepExecution).local_table
    workflow_labels = {
        column.name: f"geneva_w{index}" for index, column in enumerate(workflow_columns)
    }
    execution_labels = {
        column.name: f"geneva_e{index}"
        for index, column in enumerate(execution_columns)
    }
    probe = (
        locks.hero_type_probe(workflows, type_keys)
        if type_keys
        else sa.cast(sa.null(), sa.Boolean).label("geneva_hero_present")
    )
    locked = (
        sa.select(
            *(
                column.label(workflow_labels[column.name])
                for column in workflow_columns
            ),
            *(
                column.label(execution_labels[column.name])
                for column in execution_columns
            ),
            probe,
        )
        .select_from(
            workflows.join(executions, executions.c.workflow_id == workflows.c.id)
        )
        .where(executions.c.id == sa.bindparam("step_execution_id"))
        .with_for_update()
        .cte("geneva_locked")
    )

    def workflow_column(name: str) -> Any:
        return locked.c[workflow_labels[name]]

    def execution_column(name: str) -> Any:
        return locked.c[execution_labels[name]]

    text_array = postgresql.ARRAY(sa.Text)
    plain = (
        sa.func.unnest(
            sa.bindparam("geneva_plain_types", type_=text_array),
            sa.bindparam("geneva_plain_steps", type_=text_array),
        )
        .table_valued("type_name", "step_name")
        .render_derived(name="geneva_plain")
    )
    heroless = sa.bindparam("geneva_heroless_types", type_=text_array)
    guards = [
        executions.c.id == execution_column("id"),
        execution_column("state") == StepExecutionState.SCHEDULED.value,
        workflow_column("state").in_(_CLAIMABLE_WORKFLOW_STATES),
        sa.exists().where(
            plain.c.type_name == workflow_column("type"),
            plain.c.step_name == execution_column("step_name"),
        ),
        # A hero not probed (NULL) is checked by the caller before it commits.
        sa.or_(
            locked.c.geneva_hero_present.is_not(False),
            workflow_column("type") == sa.any_(heroless),
        ),
    ]
    if guards_due:
        guards.append(
            execution_column("scheduled_for")
            <= sa.bindparam("geneva_due_by", type_=executions.c.scheduled_for.type)
        )
    if guards_queue:
        guards.append(execution_column("limit_holds").is_(None))
    now_type = executions.c.updated_at.type
    execution_values: dict[str, Any] = {
        "state": StepExecutionState.IN_PROGRESS.value,
        "started_at": sa.bindparam("geneva_claim_now", type_=now_type),
        "updated_at": sa.bindparam("geneva_claim_now", type_=now_type),
    }
    if writes_worker:
        execution_values["worker_id"] = sa.bindparam(
            "geneva_worker_id", type_=executions.c.worker_id.type
        )
    claimed_execution = (
        executions.update()
        .where(*guards)
        .values(execution_values)
        .returning(executions.c.id)
        .cte("geneva_claimed_execution")
    )
    workflow_now = sa.bindparam("geneva_claim_now", type_=workflows.c.updated_at.type)
    claimed_workflow = (
        workflows.update()
        .where(
            workflows.c.id == workflow_column("id"),
            sa.exists().select_from(claimed_execution),
        )
        .values(
            state=WorkflowState.PERFORMING.value,
            current_step_name=execution_column("step_name"),
            started_at=sa.func.coalesce(workflows.c.started_at, workflow_now),
            updated_at=workflow_now,
        )
        .returning(workflows.c.id)
        .cte("geneva_claimed_workflow")
    )
    claimed = sa.select(sa.func.count()).select_from(claimed_workflow).scalar_subquery()
    return sa.select(*locked.c, claimed.label("geneva_claimed")).select_from(locked)

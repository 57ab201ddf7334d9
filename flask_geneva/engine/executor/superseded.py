"""A finalize that finds its execution already ended (SPEC §29.1, R-EXE-41, R-FLT-12).

Finalize locks the execution and finds it no longer ``in_progress``. Two
causes are told apart here:

- **Its own commit went through.** A finalize attempt's ``COMMIT`` reached the
  server, but the connection was lost before the answer came back (a server
  killed at that moment), so the attempt failed and was tried again
  (R-FLT-10). The row then holds the ``finished_at`` that attempt wrote:
  :func:`committed_before` recognises it, and nothing more is written.
- **Someone else ended it** while the body ran or while finalize waited out an
  outage: an operator (cancel, skip, ``recover()``) or the recovery of a
  worker judged lost (R-WRK-06). Their state wins (R-EXE-41): the body's
  outcome is not applied. :func:`record_superseded` keeps what the body did
  as an audit, under the execution's metadata key ``superseded``, and logs
  it as a warning, so a step that ran while another worker took it over is
  never silent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.engine.executor.run import BodyResult
from flask_geneva.engine.executor.run import StepRun
from flask_geneva.engine.workers import registry as worker_registry

__all__ = ["SUPERSEDED_KEY", "committed_before", "note_commit", "record_superseded"]

#: The execution's metadata key of a body outcome that came too late (R-FLT-12).
SUPERSEDED_KEY = "superseded"


def note_commit(run: StepRun, execution: Any) -> None:
    """Remember the ``finished_at`` finalize is about to commit (R-FLT-10).

    Called just before a finalize attempt commits; a later attempt that finds
    the row ended with this very ``finished_at`` knows its own commit went
    through (:func:`committed_before`).

    Args:
        run: The run.
        execution: The locked execution, its outcome applied in memory.
    """
    run.committing = sa.inspect(execution).dict.get("finished_at")


def committed_before(run: StepRun, execution: Any) -> bool:
    """Whether an earlier attempt of this finalize committed ``execution``'s end.

    Args:
        run: The run, with the ``finished_at`` its last attempt meant to
            commit (:func:`note_commit`), or None.
        execution: The locked execution, found ended.

    Returns:
        True when the row holds that ``finished_at`` (written by this run,
        to the microsecond): the attempt's commit reached the server before
        its connection was lost.
    """
    committing: datetime | None = run.committing
    return committing is not None and execution.finished_at == committing


def record_superseded(
    run: StepRun, session: orm.Session, execution: Any, body: BodyResult
) -> None:
    """Keep the body's outcome as an audit on an execution someone else ended.

    Under finalize's row lock: ``execution`` is no longer ``in_progress``
    (R-EXE-41). Its state, outcome and every other column stay as they are;
    the metadata key ``superseded`` gets ``{"outcome", "error",
    "body_ended_at", "found_state", "found_outcome", "worker_id"}`` (the
    body's outcome as the ``step`` signal names it, the exception's class and
    message or None, when finalize began, ISO-8601 UTC, the state and outcome
    that won, the worker that ran the body or None), then the transaction is
    committed. Without the metadata column nothing is written (R-DM-34). A
    warning names the execution, what it was found in and the body's outcome
    (R-FLT-12).

    Args:
        run: The run.
        session: The run's session, holding the locks.
        execution: The locked execution.
        body: How the body ended.
    """
    error = body.error
    started = run.events.finalize_started
    ended_at = (started[0] if started is not None else clock.now()).isoformat()
    worker_id = worker_registry.current_worker_id(session)
    run.logger.warning(
        "step execution %s was %s (outcome %s) when its body's outcome (%s) "
        "came to be recorded: the outcome is superseded and not applied; kept "
        "under the metadata key %r (R-EXE-41, R-FLT-12)",
        execution.id,
        execution.state,
        execution.outcome,
        body.label,
        SUPERSEDED_KEY,
    )
    execution.write_metadata(
        SUPERSEDED_KEY,
        {
            "outcome": body.label,
            "error": None if error is None else f"{type(error).__name__}: {error}",
            "body_ended_at": ended_at,
            "found_state": str(execution.state),
            "found_outcome": None
            if execution.outcome is None
            else str(execution.outcome),
            "worker_id": worker_id,
        },
    )
    session.commit()

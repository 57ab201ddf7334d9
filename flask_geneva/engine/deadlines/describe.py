"""A workflow's deadline as operators see it (SPEC §27.1, R-DL-60)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from sqlalchemy import orm

from flask_geneva.db import deadlines as deadline_rows
from flask_geneva.db.states import TERMINAL_WORKFLOW_STATES
from flask_geneva.engine.deadlines.enforce import on_deadline_of

__all__ = ["DeadlineFact", "deadline_fact"]


@dataclasses.dataclass(frozen=True)
class DeadlineFact:
    """A workflow's deadline for ``flask geneva show`` and the admin (R-DL-60).

    Attributes:
        at: The deadline (aware UTC).
        on_deadline: ``"cancel"`` or ``"pause"`` (its class's).
        overdue: The deadline passed and the workflow is still ongoing: the
            dispatcher's next run acts on it.
        ended: The workflow has ended (finished or canceled): its deadline no
            longer applies.
    """

    at: datetime
    on_deadline: str
    overdue: bool
    ended: bool = False

    @property
    def sentence(self) -> str:
        """What happens at the deadline, in words (no time)."""
        if self.ended:
            return "the workflow has ended: the deadline no longer applies"
        verb = "cancels" if self.on_deadline == "cancel" else "pauses"
        text = f"the dispatcher {verb} the workflow if it has not ended"
        if self.overdue:
            text += "; passed, so on its next run"
        return text


def deadline_fact(
    session: orm.Session, workflow: Any, now: datetime
) -> DeadlineFact | None:
    """The workflow's deadline, or None: none set, or no ``add_workflow_deadlines``
    unit (nothing is read then, R-DL-50).

    Reads ``deadline_at`` (one lazy load of the deferred column when the
    instance has not loaded it).
    """
    if not deadline_rows.installed(session):
        return None
    at = workflow.deadline_at
    if at is None:
        return None
    ongoing = workflow.state not in TERMINAL_WORKFLOW_STATES
    return DeadlineFact(
        at, on_deadline_of(workflow), ongoing and at <= now, ended=not ongoing
    )

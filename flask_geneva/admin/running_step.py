"""What the workflow page's buttons say and allow while a step runs (R-EXT-26, R-HK-28).

An operator looking at a workflow whose step is running (or whose worker died with
the execution still ``in_progress``) sees which buttons still make sense: Pause and
Cancel let the step finish first, Resume withdraws a pause, Skip and "Resume from
the beginning" are disabled with the reason, and Recover is offered for the
in-progress execution. The page only reads (R-ADM-32); the operations re-check
everything under the row locks.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.db.queries import admin as admin_queries
from flask_geneva.ext.app_state import current_state

__all__ = [
    "PAUSE_NOTE",
    "annotate_buttons",
    "in_progress_execution",
    "recovery_facts",
]

#: Shown beside Pause on a performing workflow (R-EXT-02, R-EXE-42).
PAUSE_NOTE = (
    "the running step will finish first; its outcome is kept and the next step "
    "waits for Resume"
)
#: Actions that would start another execution beside the running one (R-EXT-26).
_REFUSED_WHILE_RUNNING = ("skip", "resume_rewind")


def in_progress_execution(
    session: orm.Session, execution_cls: Any, workflow_id: Any
) -> Any:
    """The workflow's ``in_progress`` execution, or None; a plain read, no lock."""
    return admin_queries.in_progress_execution(session, execution_cls, workflow_id)


def annotate_buttons(buttons: list[Any], workflow: Any, running: Any) -> None:
    """Disable or annotate ``buttons`` for a workflow whose step may be running.

    Args:
        buttons: The page's buttons (``action``, ``enabled``, ``reason``, ``note``);
            changed in place. Buttons already disabled keep their reason.
        workflow: The workflow shown.
        running: Its ``in_progress`` execution, or None.
    """
    for button in buttons:
        if not button.enabled:
            continue
        if button.action == "recover":
            if running is None:
                button.enabled = False
                button.reason = "no step execution is in progress"
            else:
                button.note = (
                    f"for a step whose worker died: ends step execution {running.id} "
                    "as housekeeping ends a stuck one"
                )
            continue
        if button.action == "pause" and workflow.state == "performing":
            button.note = PAUSE_NOTE
        if running is None:
            continue
        if button.action in _REFUSED_WHILE_RUNNING:
            button.enabled = False
            button.reason = (
                f"not possible while step execution {running.id} (step "
                f"{running.step_name!r}) is in progress: wait for it to finish, or "
                "recover it if its worker died"
            )
        elif button.action == "resume":
            button.note = (
                f"step execution {running.id} is still in progress: Resume lets it "
                "finish as if the workflow had not been paused"
            )


def recovery_facts(
    session: orm.Session, execution_cls: Any, workflow: Any
) -> dict[str, Any] | None:
    """What the Recover confirmation shows (R-HK-28, R-ADM-22), or None.

    Returns:
        None when nothing is in progress, else ``{"execution", "age_seconds",
        "grace_seconds", "within_grace", "action"}``: the in-progress execution,
        its age and ``GENEVA_RECOVER_GRACE`` in whole seconds, whether it is still
        within the grace (recovering then needs the force box), and
        ``GENEVA_STUCK_RECOVERY_ACTION``.
    """
    running = in_progress_execution(session, execution_cls, workflow.id)
    if running is None:
        return None
    config = current_state().config
    started_at = running.started_at
    age = (clock.now() - started_at).total_seconds() if started_at else 0.0
    grace = config.recover_grace.total_seconds()
    return {
        "execution": running,
        "age_seconds": int(age),
        "grace_seconds": int(grace),
        "within_grace": age < grace,
        "action": config.stuck_recovery_action,
    }

"""What the demo leaves for you to try in the admin once everything settled.

After the summary, while the demo goes on serving the admin (R-APP-04), it
starts a few workflows and leaves them where an operator's buttons matter:

* two :class:`~example_app.workflows.ExportReview` workflows paused at their
  ``review`` step, their exports approved since: **Resume** runs the review
  again, which now passes, and the export is delivered;
* two :class:`~example_app.workflows.Onboarding` workflows paused before their
  first step ran: the page says the step "waits for Resume"; **Resume**,
  **Cancel** or **Skip current step**;
* two :class:`~example_app.workflows.RefundRequest` workflows parked at their
  ``refund`` step, waiting for the workflow signal ``refund_approved``:
  **Deliver signal…**.

Each function needs an app context.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from example_app import db
from example_app import geneva

__all__ = ["LEFT_EACH", "Leftovers", "describe", "leave_something_to_try"]

#: Workflows of each kind left to try.
LEFT_EACH = 2


@dataclass(frozen=True)
class Leftovers:
    """The ids of the workflows left to try, per kind."""

    paused_exports: list[Any]
    paused_onboardings: list[Any]
    waiting_refunds: list[Any]


def leave_something_to_try(actor: str, *, timeout: float = 60.0) -> Leftovers:
    """Start the workflows left to try and wait until they stand where the
    buttons matter (paused, parked), at most ``timeout`` seconds.

    Raises:
        TimeoutError: They did not get there in time (no worker running?).
    """
    from example_app.models import Export
    from example_app.models import User
    from example_app.workflows import ExportReview
    from example_app.workflows import Onboarding
    from example_app.workflows import RefundRequest

    users = list(
        db.session.scalars(
            sa.select(User)
            .where(User.unsubscribed.is_(False))
            .order_by(User.id)
            .limit(2 * LEFT_EACH)
        )
    )
    if len(users) < LEFT_EACH:
        # --users 0 or 1: a user of their own.
        users += [
            User(email=f"left-to-try-{n}@example.com")
            for n in range(LEFT_EACH - len(users))
        ]
        db.session.add_all(users)
        db.session.commit()
    exports = [Export(user_id=user.id) for user in users[:LEFT_EACH]]
    db.session.add_all(exports)
    db.session.commit()
    reviews = [ExportReview.create(hero=export) for export in exports]
    onboardings = []
    for user in users[:LEFT_EACH]:
        # Created and paused in one transaction: its first step is kept,
        # scheduled, until someone resumes it.
        workflow = Onboarding.create(hero=user, commit=False)
        workflow.pause(actor=actor, commit=False)
        onboardings.append(workflow)
    db.session.commit()
    refunds = [RefundRequest.create(hero=user) for user in users[-LEFT_EACH:]]
    left = Leftovers(
        [w.id for w in reviews], [w.id for w in onboardings], [w.id for w in refunds]
    )
    _wait_until_standing(left, timeout)
    # The review happened meanwhile: Resume now delivers the export.
    for export in exports:
        db.session.refresh(export)
        export.approved = True
    db.session.commit()
    return left


def _wait_until_standing(left: Leftovers, timeout: float) -> None:
    """Wait until the exports paused at review and the refunds parked."""
    workflow_cls = geneva.Workflow
    execution_cls = geneva.StepExecution
    deadline = time.monotonic() + timeout
    while True:
        paused = db.session.scalar(
            sa.select(sa.func.count()).where(
                workflow_cls.id.in_(left.paused_exports),
                workflow_cls.state == "paused",
            )
        )
        parked = db.session.scalar(
            sa.select(sa.func.count()).where(
                execution_cls.workflow_id.in_(left.waiting_refunds),
                execution_cls.state == "waiting",
            )
        )
        db.session.rollback()
        if paused == len(left.paused_exports) and parked == len(left.waiting_refunds):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the workflows left to try did not pause or park within {timeout} s"
            )
        time.sleep(0.2)


def describe(left: Leftovers) -> list[str]:
    """The lines the demo prints about what it left to try."""

    def ids(values: list[Any]) -> str:
        return ", ".join(f"#{value}" for value in values)

    return [
        "left for you to try in the admin:",
        f"  ExportReview {ids(left.paused_exports)}: paused at 'review', the "
        "export approved since: press Resume to deliver it",
        f"  Onboarding {ids(left.paused_onboardings)}: paused before 'welcome' "
        "(its step waits for Resume): Resume, Cancel or Skip current step",
        f"  RefundRequest {ids(left.waiting_refunds)}: waiting for the signal "
        "'refund_approved': Deliver signal…",
    ]

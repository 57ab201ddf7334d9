"""What the demo and the ``progress`` command share: counts and the operator.

Each function needs an app context.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import sqlalchemy as sa

from example_app import db
from example_app import geneva


def workflow_state_counts() -> Counter[str]:
    """Workflows per state, every state present or not."""
    return Counter(
        dict(
            db.session.execute(
                sa.select(geneva.Workflow.state, sa.func.count()).group_by(
                    geneva.Workflow.state
                )
            ).all()
        )
    )


def approve_paused_exports(actor: str) -> None:
    """Play the operator: approve up to 50 paused exports and resume them."""
    from example_app.workflows import ExportReview

    for workflow in db.session.scalars(
        ExportReview.with_state("paused").limit(50)
    ).all():
        workflow.hero.approved = True
        db.session.commit()
        workflow.resume(actor=actor)


def counts_by_type_and_state() -> list[Any]:
    """``(type, state, count)`` rows, ordered by type then state."""
    return list(
        db.session.execute(
            sa.select(geneva.Workflow.type, geneva.Workflow.state, sa.func.count())
            .group_by(geneva.Workflow.type, geneva.Workflow.state)
            .order_by(geneva.Workflow.type, geneva.Workflow.state)
        ).all()
    )

"""A parent and its children, built by running real steps, for the operators'
views of child workflows (SPEC §25.5: R-CHD-60 CLI, R-CHD-61 the workflow page,
R-CHD-62 bulk actions through the workflows list's ``parent`` filter).

``OpsParent.fan_out`` starts one ``OpsChild`` per key of :data:`CHILD_KEYS`
(same hero, explicit keys); ``collect`` waits for them all. A child whose key
is in :data:`FAILING_KEYS` raises in its first step (the default policy pauses
it: settled as failed for the parent, R-CHD-20). A child's second step is a day
later, so after :func:`build_family` the children that did not fail are
``ready`` and the parent's ``collect`` is parked waiting for them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flask_geneva import step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user

#: The keys of the children ``OpsParent.fan_out`` starts (set by build_family).
CHILD_KEYS: list[str] = []
#: Keys of the children whose first step raises.
FAILING_KEYS: set[str] = set()


class OpsChild(geneva.Workflow):
    """A child: a first step now (raising for a key of FAILING_KEYS), one a day later."""

    @step
    def begin(self):
        if self.child_key in FAILING_KEYS:
            raise RuntimeError(f"child {self.child_key} cannot begin")

    @step(wait=timedelta(days=1))
    def later(self):
        pass


class OpsParent(geneva.Workflow):
    """Starts one OpsChild per key of CHILD_KEYS, then waits for all of them."""

    @step
    def fan_out(self):
        for key in CHILD_KEYS:
            self.start_child(OpsChild, hero=self.hero, key=key)

    @step(wait_for_children=True, on_child_failure="ignore")
    def collect(self):
        pass


def build_family(
    geneva_jobs: Any,
    keys: list[str] | None = None,
    *,
    failing: set[str] = frozenset(),  # type: ignore[assignment]
    email: str = "parent@example.com",
) -> tuple[Any, list[Any]]:
    """Create an OpsParent and run its due steps and its children's.

    Args:
        geneva_jobs: The recording jobs fixture; its due tasks are drained
            (the children's day-later steps stay recorded).
        keys: The children's keys (default ``part-0`` .. ``part-2``).
        failing: Keys of children whose first step raises.
        email: The hero's email (a new user).

    Returns:
        ``(parent id, child ids lowest first)``; the parent's ``collect`` is
        parked (``waiting``) while a child has not settled.
    """
    CHILD_KEYS[:] = keys if keys is not None else ["part-0", "part-1", "part-2"]
    FAILING_KEYS.clear()
    FAILING_KEYS.update(failing)
    try:
        parent_id = OpsParent.create(hero=make_user(email)).id
        geneva_jobs.drain(respect_eta=True)
    finally:
        FAILING_KEYS.clear()
    table = geneva.Workflow.__table__
    child_ids = sorted(
        db.session.scalars(
            db.select(table.c.id).where(table.c.parent_workflow_id == parent_id)
        )
    )
    db.session.commit()
    return parent_id, child_ids


def waiting_execution_id(parent_id: Any) -> Any:
    """The id of the parent's parked ``collect`` execution."""
    [row] = [r for r in execution_rows(parent_id) if r["step_name"] == "collect"]
    assert row["state"] == "waiting", row
    return row["id"]

"""A child workflow's deadline (SPEC §27.1, R-DL-30).

A child started by ``start_child``/``start_children`` gets the deadline given
there; without one, the earlier of its parent's deadline and its own class's
``__geneva_deadline__`` (counted from now).
"""

from __future__ import annotations

from datetime import datetime
from datetime import timedelta
from typing import Any

from sqlalchemy import orm

from flask_geneva.db import deadlines as deadline_rows
from flask_geneva.dsl import deadlines as deadline_values
from flask_geneva.exceptions import GenevaError

__all__ = ["child_deadline_at"]


def child_deadline_at(
    session: orm.Session,
    parent: Any,
    child_cls: Any,
    deadline: datetime | timedelta | None,
    *,
    now: datetime,
) -> datetime | None:
    """The ``deadline_at`` of the children ``parent`` starts now (R-DL-30).

    Args:
        session: The step's session.
        parent: The workflow whose step starts the children.
        child_cls: The children's workflow class.
        deadline: The ``deadline=`` given to ``start_child``/``start_children``
            (an aware datetime after now or a positive timedelta from now),
            which wins, later than the parent's or not; None inherits.
        now: The time of the start.

    Returns:
        The deadline, or None: no deadline given, none on the parent, none
        declared by the child's class.

    Raises:
        ValueError/TypeError: ``deadline`` is invalid (R-DL-02).
        GenevaError: A deadline applies and the ``add_workflow_deadlines``
            unit is missing (R-DL-50).
    """
    present = deadline_rows.installed(session)
    moment: datetime | None
    if deadline is not None:
        moment = deadline_values.deadline_at(deadline, now=now)
    else:
        declared = child_cls.__geneva_definitions__.deadline
        moment = deadline_values.earliest(
            parent.deadline_at if present else None,
            now + declared if declared is not None else None,
        )
    if moment is not None and not present:
        raise GenevaError(
            f"the {child_cls.__name__} children have a deadline, but "
            f"{deadline_rows.NOT_INSTALLED_MESSAGE}"
        )
    return moment

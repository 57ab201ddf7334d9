"""The one statement that writes a workflow's result (SPEC §25, R-CHD-01)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.db import session_sync
from flask_geneva.db.states import WORKFLOWS_TABLE

__all__ = ["write_result"]


def write_result(
    session: orm.Session, workflow_cls: Any, workflow_id: Any, document: Any
) -> None:
    """Write ``document`` (the codec's JSON value, or None) as the result.

    One ``UPDATE`` of ``result`` by primary key in the session's transaction:
    no state guard (a result is no state change, R-DM-40), no ORM flush.
    """
    table = workflow_cls.metadata.tables[WORKFLOWS_TABLE]
    session_sync.connection_of(session).execute(
        sa.update(table).where(table.c.id == workflow_id).values(result=document)
    )

"""The ``WorkflowSignal`` model: ``geneva_drive_signals`` on the host's ``db.Model``.

A *workflow signal* is an external event delivered to one workflow
(``workflow.signal("payment_confirmed", payload)``) that a step declared with
``@step(wait_for=...)`` waits for (SPEC §23, R-WSIG-01..). It is not one of the
blinker instrumentation signals of :mod:`flask_geneva.signals`.

The table is optional: it is created by the install unit ``add_workflow_signals``
(and by ``db.create_all()``); without it nothing here is queried (R-WSIG-04).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core.cursors import deserialize_cursor
from flask_geneva.db.column_types import JSONDocument
from flask_geneva.db.column_types import UTCDateTime
from flask_geneva.db.column_types import primary_key_type
from flask_geneva.db.states import SIGNAL_KEY_INDEX
from flask_geneva.db.states import SIGNALS_TABLE
from flask_geneva.db.states import WorkflowSignalState

__all__ = ["SIGNAL_KEY_INDEX", "WorkflowSignalMixin", "build_signal_model"]

#: The unique index that makes an idempotency key unique per workflow (R-WSIG-22).


class WorkflowSignalMixin:
    """The columns and helpers of a workflow signal row (R-WSIG-03).

    Attributes:
        id: Primary key (the key type of the other tables).
        workflow_id: The workflow it was sent to (no foreign key).
        name: The signal name a ``wait_for`` step matches, e.g.
            ``"payment_confirmed"``.
        payload: The JSON payload (the cursor codec's types, R-WSIG-21), or None.
        idempotency_key: Unique per workflow; a second delivery with the same key
            is a duplicate (R-WSIG-22).
        state: ``pending`` (buffered), ``claimed`` (a step took it), ``consumed``
            (its step resolved, or its workflow ended while claimed) or
            ``expired`` (its workflow ended before any step claimed it,
            R-WSIG-34).
        step_name: The step that claimed it, while claimed or consumed.
        matcher_error: ``"<class>: <message>"`` when a step's matcher raised while
            the signal was sent (R-WSIG-33); the error itself surfaces on the
            workflow through its exception policies.
        created_at, claimed_at, consumed_at, updated_at: Timestamps (UTC).
    """

    __geneva__: ClassVar[Any]

    if TYPE_CHECKING:
        # The columns build_signal_model maps, for type checkers.
        id: orm.Mapped[Any]
        workflow_id: orm.Mapped[Any]
        name: orm.Mapped[str]
        payload_data: orm.Mapped[Any]
        idempotency_key: orm.Mapped[str | None]
        state: orm.Mapped[str]
        step_name: orm.Mapped[str | None]
        matcher_error: orm.Mapped[str | None]
        created_at: orm.Mapped[datetime]
        claimed_at: orm.Mapped[datetime | None]
        consumed_at: orm.Mapped[datetime | None]
        updated_at: orm.Mapped[datetime]

    @property
    def payload(self) -> Any:
        """The payload, decoded with the cursor codec (dates, times, ...; R-WSIG-21)."""
        data = self.payload_data
        return None if data is None else deserialize_cursor(data)

    @property
    def is_pending(self) -> bool:
        return self.state == WorkflowSignalState.PENDING

    @property
    def is_claimed(self) -> bool:
        return self.state == WorkflowSignalState.CLAIMED

    @property
    def is_consumed(self) -> bool:
        return self.state == WorkflowSignalState.CONSUMED

    @property
    def is_expired(self) -> bool:
        """Its workflow ended before a step claimed it (R-WSIG-34)."""
        return self.state == WorkflowSignalState.EXPIRED

    def __repr__(self) -> str:
        return (
            f"<WorkflowSignal {self.id} {self.name!r} workflow={self.workflow_id} "
            f"{self.state}>"
        )


def build_signal_model(db: Any, geneva: Any, *, key_type: str = "bigint") -> Any:
    """Create the ``WorkflowSignal`` model on ``db.Model`` (R-WSIG-03).

    Args:
        db: The host's ``flask_sqlalchemy.SQLAlchemy`` instance.
        geneva: The :class:`~flask_geneva.Geneva` extension it belongs to.
        key_type: ``"bigint"`` or ``"uuid"``, as for the other two tables.

    Returns:
        The mapped class (``geneva.WorkflowSignal``).
    """
    key = primary_key_type(key_type)
    id_default = uuid.uuid4 if key_type == "uuid" else None
    now = clock.now

    class WorkflowSignal(WorkflowSignalMixin, db.Model):  # type: ignore[misc]
        """An external event delivered to one workflow (SPEC §23)."""

        __geneva__ = geneva
        __tablename__ = SIGNALS_TABLE

        id: orm.Mapped[Any] = orm.mapped_column(
            key, primary_key=True, default=id_default
        )
        workflow_id: orm.Mapped[Any] = orm.mapped_column(key, nullable=False)
        name: orm.Mapped[str] = orm.mapped_column(sa.String(255), nullable=False)
        payload_data: orm.Mapped[Any] = orm.mapped_column(
            "payload", JSONDocument().evaluates_none(), nullable=True
        )
        idempotency_key: orm.Mapped[str | None] = orm.mapped_column(
            sa.String(255), nullable=True
        )
        state: orm.Mapped[str] = orm.mapped_column(
            sa.String(32),
            nullable=False,
            default=WorkflowSignalState.PENDING.value,
            server_default=WorkflowSignalState.PENDING.value,
        )
        step_name: orm.Mapped[str | None] = orm.mapped_column(
            sa.String(255), nullable=True
        )
        matcher_error: orm.Mapped[str | None] = orm.mapped_column(
            sa.Text, nullable=True
        )
        created_at: orm.Mapped[datetime] = orm.mapped_column(
            UTCDateTime(), nullable=False, default=lambda: now()
        )
        claimed_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        consumed_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        updated_at: orm.Mapped[datetime] = orm.mapped_column(
            UTCDateTime(), nullable=False, default=lambda: now(), onupdate=lambda: now()
        )

        __table_args__ = (
            sa.Index(
                "index_geneva_drive_signals_on_workflow_state_created",
                "workflow_id",
                "state",
                "created_at",
            ),
            sa.Index(SIGNAL_KEY_INDEX, "workflow_id", "idempotency_key", unique=True),
        )

    return WorkflowSignal

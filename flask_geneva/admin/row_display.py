"""What the admin pages show of a stored row: metadata, error class, hero (R-ADM-31).

Stored values of any shape come back as plain values with a problem marker
instead of raising; the templates escape them (R-ADM-06).
"""

from __future__ import annotations

from typing import Any

from flask_geneva.admin.presenters import recorded_exception
from flask_geneva.core.keys import format_hero
from flask_geneva.models import InvalidJSON

__all__ = ["error_class_of", "hero_reference_of", "metadata_of"]


def metadata_of(row: Any, has_column: Any) -> tuple[dict[str, Any], str | None]:
    """Return ``(metadata dict, problem marker or None)`` of a row (R-ADM-31).

    Args:
        row: A workflow or step execution row.
        has_column: The optional-column flags of
            :func:`flask_geneva.db.optional_columns.optional_columns`, or a bool
            saying whether the row's table has its metadata column.

    Returns:
        The metadata (``{}`` when absent or unreadable) and a marker such as
        ``"unparsable metadata"``, or None when the value was fine or absent.
    """
    present = has_column if isinstance(has_column, bool) else True
    if not isinstance(has_column, bool):
        present = bool(
            has_column.step_execution_metadata
            if hasattr(row, "step_name")
            else has_column.workflow_metadata
        )
    if not present:
        return {}, None
    value = row.meta
    if value is None:
        return {}, None
    if isinstance(value, InvalidJSON):
        return {}, "unparsable metadata"
    if not isinstance(value, dict):
        return {}, f"metadata is not an object ({type(value).__name__})"
    return value, None


def error_class_of(execution: Any, columns: Any) -> str:
    """The recorded error class of an execution, or ``""`` (R-SE-20/21).

    The ``error_class_name`` column when the table has it and it is set, else the
    class recorded in the execution's metadata.
    """
    if columns.error_class_name and execution.error_class_name:
        return str(execution.error_class_name)
    meta = metadata_of(execution, columns)[0]
    return str(recorded_exception(meta).get("class") or "")


def hero_reference_of(workflow: Any) -> str:
    """A workflow's hero as ``Type#id`` (R-ADM-11), or ``""`` when it has none."""
    if workflow.hero_type is None and workflow.hero_id is None:
        return ""
    return format_hero(workflow.hero_type, workflow.hero_id)

"""Error recording: an exception's class, message and backtrace (R-SE-20, R-SE-21).

:func:`record_error` fills a failed execution's error columns and its
``exception`` metadata; :func:`record_exception_metadata` fills only the
metadata (a reattempted execution keeps its error columns empty).
"""

from __future__ import annotations

import traceback
from typing import Any

from sqlalchemy import orm

from flask_geneva.db.optional_columns import OptionalColumns
from flask_geneva.db.optional_columns import optional_columns

__all__ = [
    "exception_class_name",
    "exception_details",
    "record_error",
    "record_exception_metadata",
]


def exception_class_name(error: BaseException) -> str:
    """Module-qualified class name of ``error``; builtins unqualified (R-SE-20)."""
    cls = type(error)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def exception_details(error: BaseException) -> dict[str, Any]:
    """Return ``{"class", "message", "backtrace"}`` for metadata (R-SE-20)."""
    frames = traceback.format_exception(type(error), error, error.__traceback__)
    return {
        "class": exception_class_name(error),
        "message": str(error),
        "backtrace": [line.rstrip("\n") for line in frames],
    }


def record_error(
    execution: Any, error: BaseException, *, backtrace: bool = True
) -> None:
    """Record ``error`` on the execution's error columns and metadata (R-SE-20).

    Args:
        execution: The execution the error ends.
        error: The exception.
        backtrace: False for an error that was never raised (``WorkerLostError``,
            R-HK-29): no backtrace is recorded.
    """
    details = exception_details(error)
    if not backtrace:
        details["backtrace"] = []
    execution.error_message = details["message"]
    execution.error_backtrace = "\n".join(details["backtrace"]) or None
    session = orm.object_session(execution)
    columns = optional_columns(session) if session is not None else OptionalColumns()
    if columns.error_class_name:
        execution.error_class_name = details["class"][:255]
    execution.write_metadata("exception", details)


def record_exception_metadata(execution: Any, error: BaseException) -> None:
    """Store exception info in metadata only (reattempted executions, R-SE-21)."""
    execution.write_metadata("exception", exception_details(error))

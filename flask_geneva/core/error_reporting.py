"""Error reporting and the error context (SPEC §9.6, R-REP-01..10).

``GENEVA_ERROR_REPORTER`` is called as ``reporter(error, *, handled, context,
source)``; ``context`` includes ``{"geneva_drive": {...}}`` with the ids of the
workflow and step execution being executed (R-REP-10). A reporter that raises is
logged and never breaks execution (R-REP-03). The executor decides *when* to report
(R-REP-01/02: after the state commit, per the policy's ``report`` mode); this module
only builds the context and makes the call. Ready-made reporters live in
:mod:`flask_geneva.reporters`.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator
from typing import Any

from flask_geneva.core import log_fields
from flask_geneva.core.tagged_logging import as_tagged
from flask_geneva.core.tagged_logging import column_values
from flask_geneva.core.tagged_logging import module_logger

__all__ = [
    "current_error_context",
    "error_context",
    "log_reported_error",
    "logging_reporter",
    "report",
    "report_row_error",
]

_log = module_logger("flask_geneva")

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "geneva_error_context", default=None
)


def current_error_context() -> dict[str, Any]:
    """Return ``{"geneva_drive": {...}}`` in an executor call, else ``{}`` (R-REP-10).

    The inner dict has ``workflow_id``, ``workflow_class``, ``step_execution_id``,
    ``step_name``, ``hero_type`` and ``hero_id``; keys whose value is None are left
    out. Ids that are neither int nor str (UUIDs) are given as strings, so the
    dict is JSON-serialisable. A new dict is returned on each call.

    .. versionadded:: 0.1
    """
    value = _context.get()
    return {"geneva_drive": dict(value)} if value else {}


def set_error_context(workflow: Any, execution: Any) -> contextvars.Token[Any]:
    """Set the error context (R-REP-10); undo with :func:`reset_error_context`."""
    workflow_id, workflow_class, hero_type, hero_id = column_values(
        workflow, ("id", "type", "hero_type", "hero_id")
    )
    execution_id, step_name = column_values(execution, ("id", "step_name"))
    values = {
        "workflow_id": workflow_id,
        "workflow_class": workflow_class,
        "step_execution_id": execution_id,
        "step_name": step_name,
        "hero_type": hero_type,
        "hero_id": hero_id,
    }
    # Ids that are neither int nor str (UUIDs) become strings; None values are
    # left out.
    return _context.set(
        {
            k: v if isinstance(v, int | str) else str(v)
            for k, v in values.items()
            if v is not None
        }
    )


def reset_error_context(token: contextvars.Token[Any]) -> None:
    """Restore the error context that was active before :func:`set_error_context`."""
    _context.reset(token)


@contextlib.contextmanager
def error_context(workflow: Any, execution: Any) -> Iterator[None]:
    """Set the error context for the block (an executor call, R-REP-10)."""
    token = set_error_context(workflow, execution)
    try:
        yield
    finally:
        reset_error_context(token)


def report(
    reporter: Any, error: BaseException, *, extra: dict[str, Any] | None = None
) -> str | None:
    """Call ``reporter`` for ``error`` with the current context (R-REP-02/03).

    Args:
        reporter: The configured ``GENEVA_ERROR_REPORTER`` callable, or None (then
            the error is only logged).
        error: The exception to report.
        extra: Call-specific keys merged into ``context``.

    Returns:
        None if the reporter succeeded (or none is set), else ``"<class>: <message>"``
        of the reporter's own exception, which is logged and swallowed (R-PDR-02).

    .. versionadded:: 0.1
    """
    context = {**current_error_context(), **(extra or {})}
    if reporter is None:
        return None
    try:
        reporter(error, handled=True, context=context, source="flask_geneva")
    except Exception as reporter_error:  # noqa: BLE001 - R-REP-03: never breaks execution
        _log.warning("error reporter raised %r; ignored", reporter_error)
        return f"{type(reporter_error).__name__}: {reporter_error}"
    return None


def report_row_error(
    logger: logging.Logger | logging.LoggerAdapter[Any],
    reporter: Any,
    error: BaseException,
    *,
    doing: str,
    workflow_id: Any,
    execution_id: Any,
    **operation: str,
) -> None:
    """Log and report the error of one row of a maintenance pass (R-HK-22).

    Logs ``"<doing> step execution <id>: <class>: <error>"`` at ERROR on
    ``logger`` with the traceback, then calls :func:`report` with the row's ids
    (made JSON-safe) and ``operation`` (e.g. ``dispatcher="dispatch_due"``)
    under ``"geneva_drive"``. The pass goes on with the next row.
    """
    as_tagged(logger).error(
        "%s step execution %s: %s: %s",
        doing,
        execution_id,
        type(error).__name__,
        error,
        exc_info=error,
        extra=dict(log_fields.id_fields(workflow_id, execution_id=execution_id)),
    )
    ids = {"workflow_id": workflow_id, "step_execution_id": execution_id}
    row = {key: _jsonable(value) for key, value in ids.items()}
    report(reporter, error, extra={"geneva_drive": {**row, **operation}})


def _jsonable(value: Any) -> Any:
    return value if value is None or isinstance(value, int | str) else str(value)


def logging_reporter(
    error: BaseException, *, handled: bool, context: dict[str, Any], source: str
) -> None:
    """A ready ``GENEVA_ERROR_REPORTER`` that logs the error with its context.

    Logs one ERROR record on the ``flask_geneva`` logger with the error's
    traceback; see :class:`flask_geneva.reporters.logging.LoggingReporter` for
    another logger or level.

    .. versionadded:: 0.1
    """
    log_reported_error(
        _log, logging.ERROR, error, handled=handled, context=context, source=source
    )


def log_reported_error(
    logger: logging.Logger | logging.LoggerAdapter[Any],
    level: int,
    error: BaseException,
    *,
    handled: bool,
    context: dict[str, Any],
    source: str,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write the one log record of a reported error, with its traceback (R-REP-03).

    Shared by :func:`logging_reporter` and
    :class:`flask_geneva.reporters.logging.LoggingReporter`.

    Args:
        logger: Where to log.
        level: A ``logging`` level number.
        error, handled, context, source: As given to a reporter.
        extra: ``extra`` attributes of the log record, if any.
    """
    as_tagged(logger).log(
        level,
        "%s reported %s: %s (handled=%s) context=%r",
        source,
        type(error).__name__,
        error,
        handled,
        context,
        exc_info=(type(error), error, error.__traceback__),
        extra=extra,
    )

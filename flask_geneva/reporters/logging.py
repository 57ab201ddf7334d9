"""An error reporter that writes reports to a logger (R-REP-03, R-REP-10).

``GENEVA_ERROR_REPORTER = "flask_geneva.reporters.logging:logging_reporter"`` logs
each report to the ``flask_geneva`` logger at ERROR with its traceback and the
error context. :class:`LoggingReporter` picks another logger or level.
"""

from __future__ import annotations

import logging
from typing import Any

from flask_geneva.core.error_reporting import log_reported_error
from flask_geneva.core.error_reporting import logging_reporter

__all__ = ["LoggingReporter", "logging_reporter"]


class LoggingReporter:
    """A ``GENEVA_ERROR_REPORTER`` that logs each report (R-REP-03).

    Each call logs one record, with the error's traceback as ``exc_info`` and the
    context under the record attribute ``geneva_context`` (so structured log
    handlers can pick it up)::

        flask_geneva reported TimeoutError: upstream slow (handled=True)
        context={'geneva_drive': {'workflow_id': 1, ...}}

    Args:
        logger: A logger, or the name of one; default ``"flask_geneva"``.
        level: Log level for the records (a ``logging`` level number or name);
            default ERROR.

    Raises:
        ValueError: ``level`` is not a known level name; the message lists them.

    .. versionadded:: 0.1
    """

    def __init__(
        self,
        logger: logging.Logger | str = "flask_geneva",
        *,
        level: int | str = logging.ERROR,
    ) -> None:
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        if isinstance(level, str):
            names = logging.getLevelNamesMapping()
            if level.upper() not in names:
                raise ValueError(
                    f"invalid log level {level!r}: must be one of "
                    f"{', '.join(sorted(names))}"
                )
            level = names[level.upper()]
        self.level = level

    def __call__(
        self,
        error: BaseException,
        *,
        handled: bool,
        context: dict[str, Any],
        source: str,
    ) -> None:
        """Log ``error`` with its context (the reporter signature of R-REP-03)."""
        log_reported_error(
            self.logger,
            self.level,
            error,
            handled=handled,
            context=context,
            source=source,
            extra={"geneva_context": context},
        )

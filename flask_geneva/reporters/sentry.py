"""An error reporter for Sentry's Python SDK (R-REP-03, R-REP-10).

Needs the optional ``sentry`` extra: ``pip install "flask-geneva[sentry]"``. The SDK
is imported only when a reporter is built or called, never by ``flask_geneva``
itself. Initialise Sentry as usual (``sentry_sdk.init(dsn=...)``) and set::

    from flask_geneva.reporters.sentry import SentryReporter

    app.config["GENEVA_ERROR_REPORTER"] = SentryReporter()  # fails now if SDK missing

or, in a config file, ``GENEVA_ERROR_REPORTER =
"flask_geneva.reporters.sentry:sentry_reporter"`` (the SDK is then first imported
at the first report; a missing SDK shows up as ``report_error`` in the policy
decision record, R-PDR-02).

Each report becomes one Sentry event for the exception, with:

- tags ``geneva_drive.<key>`` for every key of the error context
  (``workflow_id``, ``workflow_class``, ``step_execution_id``, ``step_name``,
  ``hero_type``, ``hero_id``), so issues can be searched by workflow or step;
- the same values as the structured context ``geneva_drive``;
- extras for the call-specific keys the executor adds (for example ``dropped``,
  ``hook``, ``handler``, ``step_error``) and ``source``;
- an exception mechanism ``{"type": "flask_geneva", "handled": handled}``.
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any
from typing import Literal

from flask_geneva.exceptions import GenevaConfigurationError

__all__ = ["MISSING_SDK_MESSAGE", "SentryReporter", "sentry_reporter"]

#: Message of the error raised when ``sentry_sdk`` cannot be imported.
MISSING_SDK_MESSAGE = (
    "flask_geneva.reporters.sentry needs the Sentry SDK (package 'sentry-sdk'), "
    "which is not installed; install the 'sentry' extra: "
    'pip install "flask-geneva[sentry]"'
)

_CONTEXT_KEY = "geneva_drive"
_Level = Literal["fatal", "error", "warning", "info", "debug"]
_LEVELS: tuple[_Level, ...] = ("fatal", "error", "warning", "info", "debug")


def _import_sdk() -> ModuleType:
    """Import ``sentry_sdk`` or fail with a message naming the extra."""
    try:
        import sentry_sdk
    except ImportError as exc:
        raise GenevaConfigurationError(MISSING_SDK_MESSAGE) from exc
    return sentry_sdk


class SentryReporter:
    """A ``GENEVA_ERROR_REPORTER`` sending each report to Sentry (R-REP-03).

    Args:
        level: Sentry level of the events: ``"fatal"``, ``"error"`` (default),
            ``"warning"``, ``"info"`` or ``"debug"``.
        tag_prefix: Prefix of the tag names built from the error context; default
            ``"geneva_drive."``.

    Raises:
        GenevaConfigurationError: ``sentry_sdk`` is not installed (the message
            names the ``sentry`` extra), or ``level`` is not a Sentry level (the
            message lists them).

    .. versionadded:: 0.1
    """

    def __init__(
        self, *, level: str = "error", tag_prefix: str = "geneva_drive."
    ) -> None:
        _import_sdk()
        if level not in _LEVELS:
            raise GenevaConfigurationError(
                f"invalid Sentry level {level!r}: must be one of "
                f"{', '.join(map(repr, _LEVELS))}"
            )
        self.level: _Level = level
        self.tag_prefix = tag_prefix

    def __call__(
        self,
        error: BaseException,
        *,
        handled: bool,
        context: dict[str, Any],
        source: str,
    ) -> None:
        """Capture ``error`` in a fresh Sentry scope carrying the context.

        Uses the client of the current Sentry scope; without an initialised
        client nothing is sent (the SDK's own no-op behaviour).

        Args:
            error: The exception to report.
            handled: Whether a policy handled it (always True from flask_geneva).
            context: ``{"geneva_drive": {...}}`` plus call-specific keys (R-REP-10).
            source: ``"flask_geneva"``.

        Raises:
            GenevaConfigurationError: ``sentry_sdk`` is not installed.
        """
        sentry_sdk = _import_sdk()
        from sentry_sdk.utils import event_from_exception

        ids = context.get(_CONTEXT_KEY)
        ids = dict(ids) if isinstance(ids, dict) else {}
        client = sentry_sdk.get_client()
        options: dict[str, Any] = {
            "mechanism": {"type": "flask_geneva", "handled": handled}
        }
        # sentry-sdk 2 takes the client's options; 3 reads them from the client.
        if "client_options" in inspect.signature(event_from_exception).parameters:
            options["client_options"] = client.options
        event, hint = event_from_exception(error, **options)
        event["level"] = self.level
        with sentry_sdk.new_scope() as scope:
            for key, value in ids.items():
                scope.set_tag(f"{self.tag_prefix}{key}", str(value))
            if ids:
                scope.set_context(_CONTEXT_KEY, ids)
            scope.set_extra("source", source)
            for key, value in context.items():
                if key != _CONTEXT_KEY:
                    scope.set_extra(key, value)
            sentry_sdk.capture_event(event, hint=hint)


def sentry_reporter(
    error: BaseException,
    *,
    handled: bool,
    context: dict[str, Any],
    source: str,
) -> None:
    """Report ``error`` to Sentry with default settings (see :class:`SentryReporter`).

    For ``GENEVA_ERROR_REPORTER = "flask_geneva.reporters.sentry:sentry_reporter"``.

    Raises:
        GenevaConfigurationError: ``sentry_sdk`` is not installed; the message
            names the ``sentry`` extra.

    .. versionadded:: 0.1
    """
    SentryReporter()(error, handled=handled, context=context, source=source)

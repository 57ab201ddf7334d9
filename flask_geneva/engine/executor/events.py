"""What one executor run tells the outside: instrumentation events and error reports.

:class:`RunEvents` holds the payload every blinker event of a run carries
(:mod:`flask_geneva.signals`, R-SIG-01) and sends ``precondition``, ``step`` and
``finalize`` (R-SIG-02..04) without letting a receiver break the run; it queues
the errors to report and calls the reporter after the commit (R-REP-02/03,
R-EXE-43), adding ``report_error`` to the policy decision record when the
reporter fails (R-PDR-02).
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import orm

from flask_geneva import signals
from flask_geneva.core import clock
from flask_geneva.core import error_reporting
from flask_geneva.core import transactions
from flask_geneva.core.config import GenevaConfig
from flask_geneva.core.tagged_logging import column_values
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import locks as row_locks

__all__ = ["RunEvents", "timing"]

_log = module_logger("flask_geneva")


def timing(started_at: Any, started: float) -> dict[str, Any]:
    """The timing fields of a signal (R-SIG-01).

    Args:
        started_at: Wall-clock start (aware UTC).
        started: ``time.monotonic()`` at the start.

    Returns:
        ``started_at``, ``finished_at`` (now) and ``duration`` in seconds.
    """
    return {
        "started_at": started_at,
        "finished_at": clock.now(),
        "duration": max(0.0, time.monotonic() - started),
    }


class RunEvents:
    """Signals and pending error reports of one executor run.

    Attributes:
        reports: Errors to report after the commit: (error, extra context,
            execution id whose policy record gets ``report_error``, or None).
        finalize_started: Wall-clock and monotonic start of Phase 3.
    """

    def __init__(self, session: orm.Session, settings: GenevaConfig) -> None:
        self.session = session
        self.settings = settings
        self.reports: list[tuple[BaseException, dict[str, Any], Any]] = []
        self.finalize_started: tuple[Any, float] | None = None
        self._workflow_cls: Any = None
        self._payload_base: dict[str, Any] = {}

    # -- reporting (R-REP, R-EXE-43) ---------------------------------------------------

    def drop_error(self, logger: Any, error: Exception | None) -> None:
        """Report an exception that is not re-raised (R-EXE-43), then flush reports."""
        # R-EXE-43: the state changed under the step; report instead of dropping.
        if error is not None:
            logger.warning(
                "encountered %s: %s; not re-raised, the state changed during "
                "the step (R-EXE-43)",
                type(error).__name__,
                error,
            )
            self.reports.append((error, {"dropped": True}, None))
        self.report_pending()

    def report_pending(self) -> None:
        """Call the reporter after the commit (R-REP-02); never raises (R-REP-03)."""
        reports = list(self.reports)
        self.reports.clear()
        if not reports:
            return
        reporter = self.settings.error_reporter
        for error, extra, execution_id in reports:
            with transactions.user_code_transactions():  # R-EXE-80
                failure = error_reporting.report(reporter, error, extra=extra)
            if failure is not None and execution_id is not None:
                self._store_report_error(execution_id, failure)

    def _store_report_error(self, execution_id: Any, failure: str) -> None:
        """Add ``report_error`` to the stored policy decision (R-PDR-02)."""
        session = self.session
        try:
            execution = row_locks.lock_execution(session, execution_id)
            if execution is not None:
                decision = execution.read_metadata("policy_decision")
                if isinstance(decision, dict):
                    execution.write_metadata(
                        "policy_decision", {**decision, "report_error": failure}
                    )
            session.commit()
        except Exception as error:  # noqa: BLE001 - bookkeeping must not break the run
            session.rollback()
            _log.warning("could not record the reporter failure: %r", error)

    # -- blinker events (R-SIG) --------------------------------------------------

    def set_payload_base(self, workflow: Any, execution: Any, step: Any) -> None:
        """Remember the fields every signal of this run carries (R-SIG-01)."""
        self._workflow_cls = type(workflow)
        workflow_id, workflow_class = column_values(workflow, ("id", "type"))
        execution_id, step_name = column_values(execution, ("id", "step_name"))
        base = {
            "execution_id": execution_id,
            "workflow_id": workflow_id,
            "workflow_class": workflow_class,
            "step_name": step_name,
        }
        if step is not None and step.is_resumable:
            base["resumable"] = True
        self._payload_base = base

    def emit(self, event: Any, timing: dict[str, Any], **fields: Any) -> None:
        """Send blinker ``event`` with the run's payload; receivers cannot break it."""
        if self._workflow_cls is None or not event.receivers:
            return  # nobody listens: no payload to build
        with transactions.user_code_transactions():  # R-EXE-80
            signals.send_safely(
                event, self._workflow_cls, {**self._payload_base, **timing, **fields}
            )

    def emit_step_event(self, result: Any, timing: dict[str, Any]) -> None:
        """Send ``step`` with how the body ended (R-SIG-03)."""
        if not signals.step.receivers:
            return
        fields: dict[str, Any] = {"outcome": result.label}
        if result.kind == "exception":
            fields["exception"] = result.error
        if result.kind == "interrupted" and result.interrupt is not None:
            fields["wait"] = result.interrupt.wait
        self.emit(signals.step, timing, **fields)

    def emit_finalize(self, states: tuple[str, str], error: Exception | None) -> None:
        """Send ``finalize`` with the states as stored (R-SIG-04)."""
        if not signals.finalize.receivers:
            return
        fields: dict[str, Any] = {"workflow_state": states[0], "step_state": states[1]}
        if error is not None:
            fields["exception"] = error
        started = self.finalize_started
        if started is None:
            now = clock.now()
            times = {"started_at": now, "finished_at": now, "duration": 0.0}
        else:
            times = timing(*started)
        self.emit(signals.finalize, times, **fields)

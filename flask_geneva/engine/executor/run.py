"""The state of one executor run: its settings, session, loggers and events.

:class:`RunBase` is the base of the executor's phases
(:mod:`flask_geneva.engine.executor.outcomes`,
:mod:`flask_geneva.engine.executor.prepare`,
:mod:`flask_geneva.engine.executor.step`): it holds what one call of
:meth:`~flask_geneva.engine.executor.step.Executor.execute` carries through its three
phases, and the tagged loggers it installs on the rows (R-EXE-01, R-LOG-02).
:class:`BodyResult` says how the body ended (R-EXE-35).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from sqlalchemy import orm

from flask_geneva.core.tagged_logging import execution_logger
from flask_geneva.db.context import EngineContext
from flask_geneva.engine.executor import events as executor_events
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.exceptions import FlowControlSignal
from flask_geneva.exceptions import StepInterrupt
from flask_geneva.policies import task_failures

__all__ = ["BodyResult", "RunBase"]

_log = logging.getLogger("flask_geneva")


@dataclasses.dataclass
class BodyResult:
    """How the body ended (R-EXE-35)."""

    kind: str  # "completed" | "signal" | "interrupted" | "exception"
    signal: FlowControlSignal | None = None
    interrupt: StepInterrupt | None = None
    error: Exception | None = None

    @property
    def label(self) -> str:
        if self.kind == "signal" and self.signal is not None:
            return "finished" if self.signal.action == "finish" else self.signal.action
        return self.kind


class RunBase:
    """What one executor run holds across its phases (SPEC §7)."""

    def __init__(
        self,
        *,
        session: orm.Session,
        execution_id: Any,
        base_logger: Any,
        interruptible: bool,
        max_iterations: int | None,
        lookup_attempts: int = 1,
        lookup_delay_seconds: float = 0.0,
        reraise: str = task_failures.RERAISE_ALWAYS,
        run_early: bool = False,
        context: EngineContext,
    ) -> None:
        self.session = session
        #: The engine context the run started with, used for the whole run.
        self.context = context
        #: The settings in force when the run started, used for the whole run
        #: (a change of ``app.config`` applies from the next run, R-CFG-02).
        settings = self.settings = context.settings
        self.reraise = reraise
        self.run_early = run_early
        self.lookup_attempts = max(int(lookup_attempts), 1)
        self.lookup_delay_seconds = lookup_delay_seconds
        self.execution_id = execution_id
        self.base_logger = base_logger
        self.interruptible = interruptible
        self.max_iterations = max_iterations
        self.logger: Any = _log
        self._logger_targets: list[Any] = []
        #: The (workflow, execution) the current ``self.logger`` is tagged for.
        self._logger_for: tuple[Any, Any] | None = None
        self.events = executor_events.RunEvents(session, settings)
        # (error, extra context, execution id whose policy record gets
        # report_error), reported after the commit (R-REP-02).
        self.reports = self.events.reports
        self._finalizing = False
        #: An imperative handler ran in finalize's transaction (R-EXE-80).
        self._user_code_ran = False
        self._error_context_token: Any = None
        self._passed_timing: dict[str, Any] = {}
        self.iterable_step: Any = None
        #: ``(running set, execution id)`` this run added to its worker's set
        #: of running executions, removed when the run ends (R-WRK-18).
        self._running: list[tuple[Any, Any]] = []
        self._handed_over: list[tuple[Any, Any]] = []

    # -- running executions (R-WRK-18) -------------------------------------------------

    def _mark_running(self, execution_id: Any, *, adopted: bool = False) -> None:
        """Hold ``execution_id`` in this worker's running set until the run ends.

        Called before the claim commits (R-WRK-18). ``adopted``: the previous
        run of the task added it with its inline claim and hands it over.
        """
        running = worker_registry.running_executions(self.session)
        if running is None or execution_id is None:
            return
        if adopted or running.add(execution_id):
            self._running.append((running, execution_id))

    def _unmark_running(self, keep: Any = None) -> None:
        """Remove what this run added, except ``keep`` (handed to the next run)."""
        for running, execution_id in self._running:
            if keep is None or execution_id != keep:
                running.discard(execution_id)
            else:
                self._handed_over.append((running, execution_id))
        self._running.clear()

    def drop_handed_over(self) -> None:
        """Remove the inline-claimed id when no next run will adopt it (R-WRK-18)."""
        for running, execution_id in self._handed_over:
            running.discard(execution_id)
        self._handed_over.clear()

    # -- loggers (R-EXE-01) ------------------------------------------------------------

    def _install_loggers(self, workflow: Any, execution: Any) -> None:
        # Phases 1 and 3 hand back the same instances (the lock re-reads into
        # them), so the tagged adapter is built once per run.
        tagged_for = self._logger_for
        if tagged_for is None or not (
            tagged_for[0] is workflow and tagged_for[1] is execution
        ):
            self.logger = execution_logger(workflow, execution, self.base_logger)
            self._logger_for = (workflow, execution)
        adapter = self.logger
        for target in (workflow, execution):
            if target not in self._logger_targets:
                self._logger_targets.append(target)
            target.__dict__["_geneva_logger"] = adapter

    def _restore_loggers(self) -> None:
        for target in self._logger_targets:
            target.__dict__.pop("_geneva_logger", None)
            # The workflow signal a wait_for step ran with (R-WSIG-17).
            target.__dict__.pop("_geneva_received_signal", None)
        self._logger_targets.clear()

"""The engine operations the model methods call, registered by the engine (STYLE §3.1).

The ORM mixins import nothing above the data layer. Their state-changing methods
(``create``, ``pause``, ``resume``, ``mark_completed``, ``execute``, ...) call the
:class:`ModelEngine` registered here; :mod:`flask_geneva.ext.model_engine` registers the
implementation when :mod:`flask_geneva` is imported, so every import of a model has
one. Tests may register a stand-in.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from typing import NoReturn
from typing import Protocol

__all__ = ["ModelEngine", "model_engine", "register_model_engine"]

Wait = timedelta | int | float | None


class ModelEngine(Protocol):
    """What the model methods need from the engine, one method per model method."""

    def create_workflow(
        self,
        workflow_class: Any,
        *,
        hero: Any,
        allow_multiple: bool,
        step_job_options: Any,
        commit: bool,
    ) -> Any:
        """Insert and schedule a workflow of ``workflow_class`` (R-WF-10..15)."""

    def transition_to(
        self, workflow: Any, state: str, attributes: dict[str, Any]
    ) -> None:
        """Lock, set ``state`` and ``attributes`` unvalidated, commit (R-WF-05)."""

    def schedule_next_step(self, workflow: Any, *, wait: Wait) -> Any:
        """Schedule the step after the current one, or finish; commit (R-SCH-06)."""

    def reschedule_current_step(self, workflow: Any, *, wait: Wait) -> Any:
        """Create a new execution of the current step; commit (R-SCH-07)."""

    def cancel(
        self, workflow: Any, *, actor: str | None, via: str, commit: bool
    ) -> None:
        """Cancel the workflow (R-EXT-03)."""

    def pause(
        self, workflow: Any, *, actor: str | None, via: str, commit: bool
    ) -> None:
        """Pause the workflow (R-EXT-01/02)."""

    def skip(
        self,
        workflow: Any,
        *,
        actor: str | None,
        via: str,
        commit: bool,
        expected_step: str | None,
    ) -> None:
        """Skip the current step (R-EXT-04/05)."""

    def resume(
        self,
        workflow: Any,
        *,
        rewind: bool,
        actor: str | None,
        via: str,
        commit: bool,
    ) -> Any:
        """Resume a paused workflow (R-EXT-20..27)."""

    def resume_at(
        self,
        workflow: Any,
        step_name: str,
        *,
        actor: str | None,
        via: str,
        commit: bool,
    ) -> Any:
        """Resume a paused workflow at a named step (R-EVO-06)."""

    def run_now(
        self, workflow: Any, *, actor: str | None, via: str, commit: bool
    ) -> Any:
        """Run a ready workflow's waiting step now (R-ADM-51)."""

    def history_in_flight(self, workflow_class: Any) -> dict[str, int]:
        """Gravestones and renamed names still in flight (R-EVO-09)."""

    def recover(
        self,
        workflow: Any,
        *,
        execution_id: Any,
        force: bool,
        actor: str | None,
        via: str,
        commit: bool,
    ) -> Any:
        """Recover the in-progress execution now (R-HK-28)."""

    def reattempt(self, workflow: Any, *, wait: Wait, rewind: bool) -> NoReturn:
        """Raise ``ReattemptSignal`` inside a step (R-FC-13, R-EXT-06)."""

    def finish(self, workflow: Any) -> NoReturn:
        """Raise ``FinishSignal`` inside a step (R-FC-14, R-EXT-06)."""

    def suspend(self, workflow: Any, *, wait: Wait) -> NoReturn:
        """Raise ``SuspendSignal`` inside a resumable step (R-FC-15)."""

    def heartbeat(self, workflow: Any) -> bool:
        """Record the running worker's heartbeat now (R-WRK-11)."""

    def deliver_signal(
        self,
        workflow: Any,
        name: str,
        *,
        payload: Any,
        idempotency_key: str | None,
        commit: bool,
    ) -> Any:
        """Deliver a workflow signal to ``workflow`` (R-WSIG-20..33)."""

    def signal_hero(
        self,
        workflow_class: Any,
        hero: Any,
        name: str,
        *,
        payload: Any,
        idempotency_key: str | None,
        start: bool,
    ) -> Any:
        """Deliver a workflow signal to the hero's ongoing workflow (R-WSIG-25)."""

    def optional_columns(self, session: Any) -> Any:
        """Which optional columns exist on ``session``'s database (R-DM-30..35)."""

    def max_cursor_size(self) -> int | None:
        """``GENEVA_MAX_CURSOR_SIZE`` of the current app in bytes, None for no limit."""

    def start_execution(self, execution: Any) -> bool:
        """Move ``execution`` from scheduled to in_progress (R-SE-47)."""

    def mark_execution(
        self,
        execution: Any,
        state: str,
        outcome: str,
        error: BaseException | None,
    ) -> None:
        """Mark ``execution`` finished in ``state`` with ``outcome`` (R-SE-47)."""

    def execute(
        self, execution: Any, *, interruptible: bool, max_iterations: int | None
    ) -> None:
        """Run the executor on ``execution`` (R-SE-44)."""


_registered: ModelEngine | None = None


def register_model_engine(engine: ModelEngine) -> None:
    """Install ``engine`` as the one the model methods call; replaces any earlier one.

    Args:
        engine: An object implementing :class:`ModelEngine`.
    """
    global _registered
    _registered = engine


def model_engine() -> ModelEngine:
    """Return the registered engine.

    Returns:
        The :class:`ModelEngine` that :mod:`flask_geneva.ext.model_engine` registered.

    Raises:
        RuntimeError: None is registered, which happens only if ``flask_geneva``'s
            package ``__init__`` has not finished importing.
    """
    if _registered is None:
        raise RuntimeError(
            "no flask_geneva engine is registered for the model methods; "
            "import flask_geneva (it registers flask_geneva.ext.model_engine)"
        )
    return _registered

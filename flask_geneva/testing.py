"""Test helpers for applications using flask_geneva (SPEC §14).

Import the helpers in your tests; enable the ``geneva_jobs`` fixture with
``pytest_plugins = ["flask_geneva.pytest_plugin"]``. Every helper needs an app
context and works with ``GENEVA_ENQUEUE_AFTER_COMMIT=False`` (R-TH-10). The
helpers that run an execution run it even before its ``scheduled_for``: the early
delivery guard of workers (R-EXE-18) does not apply to them, nor to
``drain(respect_eta=False)``.
"""

from __future__ import annotations

from typing import Any

from flask_geneva.core import clock
from flask_geneva.core.publications import Publication
from flask_geneva.db import locks as row_locks
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db.queries import engine as engine_queries
from flask_geneva.engine.publishing import RecordingBackend
from flask_geneva.engine.scheduling import new_scheduled_execution
from flask_geneva.ext.app_state import current_state
from flask_geneva.ext.operations import Executor
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState

__all__ = [
    "RecordingJobs",
    "WaitingForChildren",
    "WaitingForSignal",
    "assert_cursor",
    "assert_step_executed",
    "assert_step_has_successor",
    "assert_waiting_for_signal",
    "assert_workflow_state",
    "perform_next_step",
    "perform_step_inline",
    "run_iterations",
    "speedrun_current_step",
    "speedrun_workflow",
]

_SETTLED = (WorkflowState.FINISHED, WorkflowState.CANCELED, WorkflowState.PAUSED)
_EXECUTION_DONE = (
    StepExecutionState.FAILED,
    StepExecutionState.CANCELED,
    StepExecutionState.SKIPPED,
)


def _session() -> Any:
    return current_state().geneva.session


def _refresh(instance: Any) -> Any:
    session = _session()
    if session.in_transaction():
        session.commit()
    session.refresh(instance)
    return instance


class WaitingForSignal(RuntimeError):
    """A speedrun reached a step parked at its ``wait_for`` gate (R-WSIG-50).

    Attributes:
        workflow_id: The workflow.
        step_name: The parked step.
        awaited: What it waits for (the signal name or the matcher's repr).
    """

    def __init__(self, message: str, *, workflow_id: Any, step_name: str, awaited: str):
        super().__init__(message)
        self.workflow_id = workflow_id
        self.step_name = step_name
        self.awaited = awaited


class WaitingForChildren(RuntimeError):
    """A speedrun reached a step parked for its workflow's children (R-CHD-21).

    A speedrun runs one workflow: run its children too (``geneva_jobs.drain()``
    runs every recorded task), then speedrun the parent again.

    Attributes:
        workflow_id: The workflow.
        step_name: The parked step.
        settled: Its children settled so far.
        started: Its children started.
    """

    def __init__(
        self,
        message: str,
        *,
        workflow_id: Any,
        step_name: str,
        settled: int,
        started: int,
    ):
        super().__init__(message)
        self.workflow_id = workflow_id
        self.step_name = step_name
        self.settled = settled
        self.started = started


def _awaited(workflow: Any, execution: Any) -> str:
    step = workflow.steps.named(execution.step_name)
    wait_for = getattr(step, "wait_for", None)
    return wait_for.description if wait_for is not None else "?"


def _raise_if_parked(helper: str, workflow: Any, execution: Any) -> None:
    if execution.state != StepExecutionState.WAITING:
        return
    step = workflow.steps.named(execution.step_name)
    if getattr(step, "wait_for_children", None) is not None and (
        step.wait_for is None or execution.signal_id is not None
    ):
        counts = workflow.child_counts
        settled = counts.settled if counts is not None else 0
        started = counts.started if counts is not None else 0
        raise WaitingForChildren(
            f"{helper}: workflow {workflow.id} waits at step "
            f"'{execution.step_name}' (execution {execution.id}) for its child "
            f"workflows ({settled} of {started} settled); run them too (e.g. "
            "geneva_jobs.drain(), or speedrun_workflow on each of "
            "workflow.children()) and run it again",
            workflow_id=workflow.id,
            step_name=execution.step_name,
            settled=settled,
            started=started,
        )
    awaited = _awaited(workflow, execution)
    raise WaitingForSignal(
        f"{helper}: workflow {workflow.id} is waiting for the workflow signal "
        f"{awaited!r} at step '{execution.step_name}' (execution {execution.id}); "
        f"send it with workflow.signal({awaited!r}, payload) and run again",
        workflow_id=workflow.id,
        step_name=execution.step_name,
        awaited=awaited,
    )


def speedrun_workflow(workflow: Any, max_iterations: int = 100) -> Any:
    """Run the workflow's executions until it settles (R-TH-01).

    Waits and ``scheduled_for`` are ignored; executions run non-interruptibly. Stops
    when the workflow is finished, canceled or paused, or has no current execution.
    Step exceptions propagate after their state handling.

    Args:
        workflow: The workflow instance.
        max_iterations: Upper bound on executions run.

    Returns:
        The refreshed workflow.

    Raises:
        RuntimeError: Still ongoing with a current execution after
            ``max_iterations`` executions (a possible infinite loop).
        WaitingForSignal: A step is parked waiting for a workflow signal; the
            message names it (R-WSIG-50).
        WaitingForChildren: A step is parked waiting for the workflow's
            children, which a speedrun does not run (R-CHD-21).
    """
    for _ in range(max_iterations):
        _refresh(workflow)
        if workflow.state in _SETTLED:
            return workflow
        execution = workflow.current_execution
        if execution is None:
            return workflow
        _raise_if_parked("speedrun_workflow", workflow, execution)
        Executor.execute(execution, interruptible=False, run_early=True)
    _refresh(workflow)
    if workflow.state not in _SETTLED and workflow.current_execution is not None:
        raise RuntimeError(
            f"speedrun_workflow: workflow {workflow.id} still running after "
            f"max_iterations={max_iterations} executions; possible infinite loop"
        )
    return workflow


def speedrun_current_step(workflow: Any, max_executions: int = 100) -> Any:
    """Run the current step to its end, following resumable chains (R-TH-02).

    Never runs the following step. Returns the final refreshed execution, or None
    when there is no current execution.

    Raises:
        RuntimeError: ``max_executions`` executions ran without the step ending.
        WaitingForSignal: The step is parked for a workflow signal (R-WSIG-50).
        WaitingForChildren: The step is parked for the workflow's children
            (R-CHD-25).
    """
    _refresh(workflow)
    execution = workflow.current_execution
    if execution is None:
        return None
    step_name = execution.step_name
    resumable_columns = column_detection.optional_columns(_session()).resumable
    runs = 0
    while True:
        _refresh(execution)
        if execution.state == StepExecutionState.COMPLETED:
            successor = execution.successor if resumable_columns else None
            if successor is None:
                return execution
            execution = successor
            continue
        if execution.state in _EXECUTION_DONE:
            return execution
        _raise_if_parked("speedrun_current_step", workflow, execution)
        if runs >= max_executions:
            raise RuntimeError(
                f"speedrun_current_step: step '{step_name}' did not finish within "
                f"max_executions={max_executions} executions"
            )
        Executor.execute(execution, interruptible=False, run_early=True)
        runs += 1


def perform_next_step(workflow: Any) -> Any:
    """Run the current execution once (interruptibly); return it, or None (R-TH-03)."""
    _refresh(workflow)
    execution = workflow.current_execution
    if execution is None:
        return None
    Executor.execute(execution, run_early=True)
    _refresh(workflow)
    return execution


def perform_step_inline(workflow: Any, step_name: Any = None) -> Any:
    """Run ``step_name`` (default: ``next_step_name``) now, out of band (R-TH-04).

    Cancels the scheduled executions, inserts a scheduled execution due now
    without publishing it or changing ``next_step_name``, and executes it.

    Raises:
        ValueError: The step is not defined; the message lists the defined steps.
    """
    _refresh(workflow)
    name = str(step_name) if step_name is not None else workflow.next_step_name
    step = workflow.steps.named(name) if name is not None else None
    if step is None:
        available = ", ".join(workflow.steps.names)
        raise ValueError(
            f"Step '{name}' is not defined in {workflow.type}. "
            f"Available steps: {available}"
        )
    session = _session()
    row_locks.lock_workflow(session, workflow.id)
    now = clock.now()
    row_locks.cancel_scheduled_executions(session, workflow.id, now)
    execution = new_scheduled_execution(workflow, step.name, now)
    session.add(execution)
    session.commit()
    Executor.execute(execution, run_early=True)
    _refresh(workflow)
    _refresh(execution)
    return execution


def run_iterations(workflow: Any, count: int) -> Any:
    """Run the current execution for at most ``count`` checkpoints (R-TH-05).

    Raises:
        RuntimeError: There is no current execution.
    """
    _refresh(workflow)
    execution = workflow.current_execution
    if execution is None:
        raise RuntimeError("No current step execution to run")
    Executor.execute(execution, max_iterations=count, run_early=True)
    _refresh(workflow)
    return _refresh(execution)


def assert_step_executed(
    workflow: Any, step_name: Any, state: Any = "completed"
) -> None:
    """Assert an execution of ``step_name`` in ``state`` exists (R-TH-06)."""
    execution_cls = workflow.__geneva__.StepExecution
    found = engine_queries.executed_step_id(
        _session(), execution_cls, workflow.id, str(step_name), str(state)
    )
    if found is None:
        raise AssertionError(
            f"Expected step '{step_name}' to be {state}, but it was not found"
        )


def assert_workflow_state(workflow: Any, expected: Any) -> None:
    """Refresh and assert the workflow state (R-TH-07).

    Raises:
        ValueError: ``expected`` is not a workflow state (a typo would otherwise
            make the assertion fail for the wrong reason, or never).
        AssertionError: The state differs.
    """
    from flask_geneva.models import WorkflowState

    states = [state.value for state in WorkflowState]
    if str(expected) not in states:
        raise ValueError(
            f"{expected!r} is not a workflow state; expected one of {', '.join(states)}"
        )
    _refresh(workflow)
    if workflow.state != str(expected):
        raise AssertionError(
            f"Expected workflow to be {expected}, but was {workflow.state}"
        )


def assert_cursor(workflow: Any, expected: Any) -> None:
    """Refresh and compare the current execution's cursor (R-TH-08)."""
    _refresh(workflow)
    execution = workflow.current_execution
    actual = execution.cursor_value if execution is not None else None
    if actual != expected:
        raise AssertionError(f"Expected cursor {expected!r}, got {actual!r}")


def assert_step_has_successor(workflow: Any, step_name: Any) -> None:
    """Assert the latest completed execution of the step has a successor (R-TH-09)."""
    execution_cls = workflow.__geneva__.StepExecution
    latest = engine_queries.latest_completed_execution(
        _session(), execution_cls, workflow.id, str(step_name)
    )
    if latest is None:
        raise AssertionError(f"Expected completed execution for step {step_name}")
    successor = latest.successor
    if successor is None:
        raise AssertionError(
            f"Expected successor execution for step {step_name}, but none found"
        )
    if successor.state != StepExecutionState.SCHEDULED:
        raise AssertionError(
            f"Expected successor to be scheduled, but was {successor.state}"
        )


def assert_waiting_for_signal(workflow: Any, name: Any) -> None:
    """Assert the workflow's current step is parked waiting for ``name`` (R-WSIG-50).

    Args:
        workflow: The workflow (refreshed first).
        name: The signal name (or the matcher's repr for a custom matcher).

    Raises:
        AssertionError: No current execution, it is not ``waiting``, or its step
            waits for something else; the message says what was found.
    """
    _refresh(workflow)
    execution = workflow.current_execution
    if execution is None:
        raise AssertionError(
            f"Expected workflow {workflow.id} to be waiting for signal {name!r}, "
            f"but it has no current execution (state {workflow.state})"
        )
    if execution.state != StepExecutionState.WAITING:
        raise AssertionError(
            f"Expected workflow {workflow.id} to be waiting for signal {name!r}, "
            f"but step '{execution.step_name}' is {execution.state}"
        )
    step = workflow.steps.named(execution.step_name)
    wait_for = getattr(step, "wait_for", None)
    names = () if wait_for is None else (wait_for.names or (wait_for.description,))
    if str(name) not in names:
        raise AssertionError(
            f"Expected workflow {workflow.id} to be waiting for signal {name!r}, "
            f"but step '{execution.step_name}' waits for "
            f"{_awaited(workflow, execution)}"
        )


class RecordingJobs:
    """What the ``geneva_jobs`` fixture returns (R-TH-20).

    Attributes:
        backend: The app's :class:`RecordingBackend`.
    """

    def __init__(self, backend: RecordingBackend) -> None:
        self.backend = backend
        #: ``(publication, exception)`` for every task that raised while draining.
        self.failures: list[tuple[Publication, BaseException]] = []

    @property
    def enqueued(self) -> list[Publication]:
        """Recorded publications, oldest first."""
        return self.backend.enqueued

    def clear(self) -> None:
        """Forget the recorded publications."""
        self.backend.clear()

    def drain(self, *, respect_eta: bool = False, limit: int = 1000) -> int:
        """Run recorded publications FIFO through the task logic until none remain.

        Publications made while draining are appended and run in turn (never
        recursively inside a publication). A task that raises is recorded in
        :attr:`failures` and draining goes on, as a worker would.

        Args:
            respect_eta: Leave publications whose eta is in the future.
            limit: Maximum number of tasks to run.

        Returns:
            The number of tasks run.

        Raises:
            RuntimeError: ``limit`` tasks ran and more remain.
        """
        from flask_geneva.ext.tasks import perform_step_execution

        ran = 0
        kept: list[Publication] = []
        while self.backend.enqueued:
            publication = self.backend.enqueued.pop(0)
            if (
                respect_eta
                and publication.eta is not None
                and publication.eta > clock.now()
            ):
                kept.append(publication)
                continue
            if ran >= limit:
                self.backend.enqueued.insert(0, publication)
                raise RuntimeError(
                    f"drain() ran limit={limit} tasks and more remain; pass a "
                    "larger limit= (a fan-out to many children publishes a task "
                    "per child)"
                )
            ran += 1
            try:
                # One step per recorded task, FIFO (R-EXE-77): no inline
                # continuation, so tests see every publication.
                perform_step_execution(
                    publication.step_execution_id,
                    run_early=not respect_eta,
                    continue_inline=False,
                )
            except Exception as error:  # noqa: BLE001 - a failing task fails only itself
                _session().rollback()
                self.failures.append((publication, error))
        self.backend.enqueued.extend(kept)
        return ran

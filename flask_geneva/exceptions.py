"""The errors flask_geneva raises, and the flow-control signals (SPEC §15.6).

The tree::

    GenevaError(Exception)                    every error raised on purpose
    ├── GenevaConfigurationError(ValueError)  bad GENEVA_* value or wiring (init_app)
    ├── StepConfigurationError(ValueError)    invalid DSL, raised at class definition
    ├── InvalidStateError                     operation not allowed in the current state
    ├── InvalidStateTransition                executor transition not allowed (R-WF-02)
    ├── StateConflictError                    guarded state write lost a race (R-DM-40)
    ├── DuplicateWorkflowError                ongoing workflow already exists (R-UNQ-03)
    ├── DatabaseUnavailableError              create() lost its database (R-FLT-50)
    ├── HeroTypeNotFoundError(LookupError)    no mapped class for hero_type (R-HERO-03)
    ├── CursorTooLargeError(ValueError)       serialized cursor too large (R-CUR-10)
    ├── CursorSerializationError(TypeError)   cursor value of an unsupported type
    ├── InstallError                          ``flask geneva install`` could not write
    ├── WorkerLostError                       recorded when a step's worker was lost
    ├── StepTimeout                           a step ran longer than its timeout
    ├── LimitKeyError                         a limit's key is unusable (R-LIM-05)
    ├── ScheduleNotFoundError(LookupError)    no schedule of that name (R-SCHED-30)
    └── StepExecutionError                    carries workflow/execution ids, step name
        ├── ClaimFailedError                  the claim lost its database (R-FLT-01)
        ├── StepNotDefinedError               stored step/class no longer in code
        ├── StepFailedError                   defined for parity, not raised
        └── PreconditionError                 defined for parity, not raised

    FlowControlSignal(BaseException)          raised by in-step flow control (R-FC-02)
    ├── CancelSignal, PauseSignal, SkipSignal, FinishSignal
    ├── ReattemptSignal(wait, rewind)
    └── SuspendSignal(wait)
    StepInterrupt(BaseException)              resumable-step interruption (R-IT-07)

    UnawaitedSignalWarning(UserWarning)       a signal no step waits for (R-WSIG-73)

Every exception keeps its constructor arguments in ``args`` and survives
``pickle.loads(pickle.dumps(error))``; exceptions hold ids and strings, never ORM
instances (``StepExecutionError.workflow``/``.step_execution`` are conveniences that
are dropped when pickled).

The signals derive from :class:`BaseException` so that a step body's
``except Exception:`` cannot swallow them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

__all__ = [
    "CancelSignal",
    "ChildWorkflowFailed",
    "ClaimFailedError",
    "CursorSerializationError",
    "CursorTooLargeError",
    "DatabaseUnavailableError",
    "DuplicateWorkflowError",
    "FinishSignal",
    "FlowControlSignal",
    "GenevaConfigurationError",
    "GenevaError",
    "HeroTypeNotFoundError",
    "InstallError",
    "InvalidStateError",
    "InvalidStateTransition",
    "LimitKeyError",
    "PauseSignal",
    "PreconditionError",
    "ReattemptSignal",
    "ResultTooLargeError",
    "ScheduleNotFoundError",
    "SignalBufferFullError",
    "SignalPayloadTooLargeError",
    "SignalWaitTimeout",
    "SkipSignal",
    "StateConflictError",
    "StepConfigurationError",
    "StepExecutionError",
    "StepFailedError",
    "StepInterrupt",
    "StepNotDefinedError",
    "StepTimeout",
    "SuspendSignal",
    "UnawaitedSignalWarning",
    "WorkerLostError",
    "WorkflowNotFoundError",
]


class GenevaError(Exception):
    """Base class of every error flask_geneva raises on purpose."""


class GenevaConfigurationError(GenevaError, ValueError):
    """A ``GENEVA_*`` setting or the extension wiring is invalid (R-CFG-01).

    Raised by :meth:`flask_geneva.Geneva.init_app`; the message names the setting,
    the value given and what is allowed.
    """


#: Short alias used in the style guide.
ConfigurationError = GenevaConfigurationError


class StepConfigurationError(GenevaError, ValueError):
    """A workflow class, step, policy or job option is declared wrongly (§5.1).

    Raised while the class body is being processed (class creation), or when
    per-instance job options are assigned (R-JOB-07). The message names the bad value
    and lists the allowed ones.
    """


class InvalidStateError(GenevaError):
    """An operation is not allowed in the workflow's current state (§8).

    Example: ``cannot resume workflow 17: state is 'finished', expected 'paused'``.
    """


class InvalidStateTransition(GenevaError):
    """The executor tried a state transition the state machine forbids (R-WF-02)."""


class StateConflictError(GenevaError):
    """A guarded state write found the row in another state (R-DM-40).

    Every UPDATE that changes the ``state`` of a workflow or step execution
    carries ``AND state = <the state read under the row lock>``. When the row
    holds another state, nothing is written and this is raised; the caller's
    transaction is rolled back (R-EXE-51), never silently overwritten.

    Args:
        row: What the row is: ``"workflow"`` or ``"step execution"``.
        row_id: The row's primary key.
        expected: The state the write expected (read before the change).
        actual: The state the row holds.
    """

    def __init__(self, row: str, row_id: Any, expected: Any, actual: Any) -> None:
        super().__init__(row, row_id, expected, actual)
        self.row = row
        self.row_id = row_id
        self.expected = expected
        self.actual = actual

    def __str__(self) -> str:
        return (
            f"{self.row} {self.row_id!r} is in state {self.actual!r}, not "
            f"{self.expected!r} as read before the change; the state write was "
            "refused"
        )


class DuplicateWorkflowError(GenevaError):
    """An ongoing workflow of this class already exists for the hero (R-UNQ-03)."""


class DatabaseUnavailableError(GenevaError):
    """The database refused the connection or stopped answering (R-FLT-50..53).

    Raised by ``create()`` when its connection failed: the server refused it,
    or gave no answer within the connection's timeouts (a network cut,
    ``GENEVA_CONNECTION_TIMEOUT``). The message names the database error;
    ``__cause__`` is SQLAlchemy's exception.

    Attributes:
        outcome_unknown: The connection failed during the COMMIT, so the
            workflow may have been stored: look it up before creating it again.
            False: nothing was written.
    """

    def __init__(self, message: str, outcome_unknown: bool = False) -> None:
        super().__init__(message, outcome_unknown)
        self.outcome_unknown = outcome_unknown

    def __str__(self) -> str:
        return str(self.args[0])


class HeroTypeNotFoundError(GenevaError, LookupError):
    """A stored ``hero_type`` names no mapped model class (R-HERO-03)."""


class CursorTooLargeError(GenevaError, ValueError):
    """A resumable step's cursor exceeds ``GENEVA_MAX_CURSOR_SIZE`` (R-CUR-10)."""


class CursorSerializationError(GenevaError, TypeError):
    """A cursor value has a type that cannot be stored (R-CUR-03)."""


class SignalPayloadTooLargeError(GenevaError, ValueError):
    """A workflow signal's payload is too large (R-WSIG-21).

    Larger than ``GENEVA_MAX_SIGNAL_PAYLOAD_SIZE`` bytes, encoded.

    Raised by ``workflow.signal(...)`` before anything is written.
    """


class SignalBufferFullError(GenevaError):
    """A workflow already buffers ``GENEVA_MAX_PENDING_SIGNALS_PER_WORKFLOW``
    pending workflow signals (R-WSIG-23); nothing is written."""


class SignalWaitTimeout(GenevaError):
    """A ``wait_for`` step waited longer than its ``wait_timeout`` (R-WSIG-40).

    Without ``on_wait_timeout`` it is raised into the step's exception policies
    like any other exception (the default policy pauses the workflow).

    Attributes:
        signal_name: What the step waited for (a name or the matcher's repr).
    """

    def __init__(self, message: str, *, signal_name: str | None = None) -> None:
        super().__init__(message)
        self.signal_name = signal_name

    def __reduce__(self) -> Any:
        return (_rebuild_wait_timeout, (str(self), self.signal_name))


def _rebuild_wait_timeout(message: str, signal_name: str | None) -> SignalWaitTimeout:
    return SignalWaitTimeout(message, signal_name=signal_name)


class ResultTooLargeError(GenevaError, ValueError):
    """A workflow result is too large (R-CHD-01).

    Larger than ``GENEVA_MAX_RESULT_SIZE`` bytes, encoded. Raised by
    ``workflow.set_result(...)`` before anything is written.
    """


class ChildWorkflowFailed(GenevaError):
    """Children a ``wait_for_children`` step waited for failed (R-CHD-23).

    Raised at the step's gate, when its wait is settled and at least one of
    the workflow's children is canceled or paused by an error (its
    ``child_settled`` is ``canceled`` or ``failed``), unless the step says
    ``on_child_failure="ignore"``. It goes into the step's exception policies
    like any other exception (the default policy pauses the workflow).

    Attributes:
        failed_count: How many children are canceled or paused by an error.
        failed_child_ids: The ids of some of them (at most 10), lowest first.
    """

    def __init__(
        self,
        message: str,
        *,
        failed_count: int = 0,
        failed_child_ids: tuple[Any, ...] = (),
    ) -> None:
        super().__init__(message)
        self.failed_count = failed_count
        self.failed_child_ids = tuple(failed_child_ids)

    def __reduce__(self) -> Any:
        return (
            _rebuild_child_failed,
            (str(self), self.failed_count, self.failed_child_ids),
        )


def _rebuild_child_failed(
    message: str, failed_count: int, failed_child_ids: tuple[Any, ...]
) -> ChildWorkflowFailed:
    return ChildWorkflowFailed(
        message, failed_count=failed_count, failed_child_ids=failed_child_ids
    )


class WorkflowNotFoundError(GenevaError, LookupError):
    """``signal_hero(..., start=False)`` found no ongoing workflow for the hero
    (R-WSIG-25)."""


class ScheduleNotFoundError(GenevaError, LookupError):
    """No schedule of that name is declared on the extension (R-SCHED-30).

    The message names the schedule and lists the declared ones.
    """


class UnawaitedSignalWarning(UserWarning):
    """A workflow signal was stored that no step of the workflow's class waits for.

    Issued by ``workflow.signal()`` and ``MyWorkflow.signal_hero()`` after the
    signal is stored (a misspelt name, or a step a later deploy adds); the
    message names the signal, the class and the names its steps wait for
    (R-WSIG-73). Pass ``warn_unawaited=False`` to deliver such names on purpose.
    """


class InstallError(GenevaError):
    """``flask geneva install`` could not write the migration revisions (R-MIG-01)."""


class WorkerLostError(GenevaError):
    """The worker running a step was lost before the step's outcome was recorded.

    Never raised: recovery of an ``in_progress`` execution (housekeeping, the
    dispatcher, ``workflow.recover()``) records it on the execution it ends
    (``error_class_name`` ``flask_geneva.exceptions.WorkerLostError``), with a
    message naming the worker and its last heartbeat, so the ``recovered``
    outcome is not read as a completed step (R-HK-29). The step may have run in
    part or in full before its worker stopped.

    .. versionadded:: 0.1
    """


class StepTimeout(GenevaError):
    """A step's body ran longer than the step's ``timeout`` (R-STO-10..14).

    Raised into the step's exception policies like any other exception (the
    default policy pauses the workflow): in the worker when Celery's soft time
    limit interrupts the body (Celery's ``SoftTimeLimitExceeded`` becomes its
    ``__cause__``), or when the body returns after its timeout passed (a pool
    that cannot interrupt it). Recorded, never raised, by the recovery of an
    execution whose worker died past the timeout (R-STO-20).

    Attributes:
        step_name: The step, or None.
        timeout_seconds: The step's timeout in seconds, or None.
    """

    def __init__(
        self,
        message: str,
        *,
        step_name: str | None = None,
        timeout_seconds: float | None = None,
    ) -> None:
        super().__init__(message)
        self.step_name = step_name
        self.timeout_seconds = timeout_seconds

    def __reduce__(self) -> Any:
        # The class itself and every attribute, so a subclass (with its own
        # __init__ and attributes) comes back as itself (R-STO-02).
        return (_rebuild_step_timeout_of, (type(self), str(self), dict(vars(self))))


def _rebuild_step_timeout(
    message: str, step_name: str | None, timeout_seconds: float | None
) -> StepTimeout:
    # Unpickles what an earlier version pickled (the class was always StepTimeout).
    return StepTimeout(message, step_name=step_name, timeout_seconds=timeout_seconds)


def _rebuild_step_timeout_of(
    cls: type[StepTimeout], message: str, attributes: dict[str, Any]
) -> StepTimeout:
    # Not cls(...): a subclass's __init__ may take other arguments.
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    vars(error).update(attributes)
    return error


class LimitKeyError(GenevaError):
    """A limit's key could not be resolved for a workflow (R-LIM-05).

    The key function or method raised (the error is chained as
    ``__cause__``), or its value is not a str, an int or a ``uuid.UUID``
    whose text is non-empty, at most 255 characters long and without a NUL
    character. The message names the limit, the step and the value or the
    error.

    Args:
        message: Human-readable description.
        limit_name: The limit's name, or None.
        step_name: The limited step's name, or None.

    .. versionadded:: 0.2
    """

    def __init__(
        self,
        message: str,
        *,
        limit_name: str | None = None,
        step_name: str | None = None,
    ) -> None:
        super().__init__(message)
        self.limit_name = limit_name
        self.step_name = step_name

    def __reduce__(self) -> Any:
        return (_rebuild_limit_key_error, (str(self), self.limit_name, self.step_name))


def _rebuild_limit_key_error(
    message: str, limit_name: str | None, step_name: str | None
) -> LimitKeyError:
    return LimitKeyError(message, limit_name=limit_name, step_name=step_name)


class StepExecutionError(GenevaError):
    """An error about one step execution.

    Args:
        message: Human-readable description.
        workflow_id: Primary key of the workflow row, or None.
        step_execution_id: Primary key of the step execution row, or None.
        step_name: Name of the step, or None.

    Attributes:
        workflow: The workflow instance when raised in-process (not pickled).
        step_execution: The step execution instance when raised in-process
            (not pickled).
    """

    def __init__(
        self,
        message: str,
        workflow_id: Any = None,
        step_execution_id: Any = None,
        step_name: str | None = None,
    ) -> None:
        super().__init__(message, workflow_id, step_execution_id, step_name)
        self.message = message
        self.workflow_id = workflow_id
        self.step_execution_id = step_execution_id
        self.step_name = step_name
        self.workflow: Any = None
        self.step_execution: Any = None

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # ORM instances must not cross a process boundary: pickle the ids only.
        return (type(self), self.args)


class ClaimFailedError(StepExecutionError):
    """The claim of a step execution lost its database connection (R-FLT-01).

    Raised by the executor when its first stage (the lock, the checks, the
    preconditions and the claim's commit) fails because the database server
    could not be reached or went away (a restart, a failover): the delivery
    did not run the step, and another delivery of the same execution may
    (R-EXE-11 keeps a claim that did commit from running twice). The Celery
    task retries it with a growing countdown (R-FLT-02); other callers
    (``Executor.execute()``, the test helpers) see it. The database error is
    its ``__cause__``. Only ``step_execution_id`` is set.

    .. versionadded:: 0.2
    """


class StepNotDefinedError(StepExecutionError):
    """A stored step name or workflow type has no definition in the code (R-EXE-14)."""


class StepFailedError(StepExecutionError):
    """Defined for parity with the gem; not raised (the original exception is)."""


class PreconditionError(StepExecutionError):
    """Defined for parity with the gem; not raised (the original exception is)."""


class FlowControlSignal(BaseException):
    """Base of the in-step flow-control signals (R-FC-02).

    Derives from :class:`BaseException` so ``except Exception`` in a step body cannot
    swallow it. Only the executor catches it.
    """

    #: The action name recorded in metadata and signal payloads.
    action: str = ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self.args)


class CancelSignal(FlowControlSignal):
    """Raised by ``cancel()`` inside a step (R-FC-10)."""

    action = "cancel"


class PauseSignal(FlowControlSignal):
    """Raised by ``pause()`` inside a step (R-FC-11)."""

    action = "pause"


class SkipSignal(FlowControlSignal):
    """Raised by ``skip()`` inside a step (R-FC-12)."""

    action = "skip"


class FinishSignal(FlowControlSignal):
    """Raised by ``finish()`` inside a step (R-FC-14)."""

    action = "finish"


class ReattemptSignal(FlowControlSignal):
    """Raised by ``reattempt(wait=, rewind=)`` inside a step (R-FC-13).

    Args:
        wait: Delay before the new execution is due, or None for at once.
        rewind: For resumable steps, restart the iteration from an empty cursor.
    """

    action = "reattempt"

    def __init__(self, wait: timedelta | None = None, rewind: bool = False) -> None:
        super().__init__(wait, rewind)
        self.wait = wait
        self.rewind = rewind


class SuspendSignal(FlowControlSignal):
    """Raised by ``suspend(wait=)`` inside a resumable step (R-FC-15).

    Args:
        wait: Delay before the successor execution is due, or None for at once.
    """

    action = "suspend"

    def __init__(self, wait: timedelta | None = None) -> None:
        super().__init__(wait)
        self.wait = wait


class StepInterrupt(BaseException):
    """Interrupts a resumable step at a checkpoint (R-IT-04, R-IT-07).

    Args:
        wait: Delay before the successor execution is due, or None for at once.
        reason: Why the step was interrupted (R-PDR-03), e.g. ``"max_iterations"``.
    """

    def __init__(
        self, wait: timedelta | None = None, reason: str | None = None
    ) -> None:
        super().__init__(wait, reason)
        self.wait = wait
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self.args)

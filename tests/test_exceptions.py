"""The error tree (SPEC §15.6): bases, messages, pickling."""

from __future__ import annotations

import pickle
from datetime import timedelta

import pytest

import flask_geneva
from flask_geneva import exceptions

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


@pytest.mark.parametrize(
    ("error_cls", "bases"),
    [
        (exceptions.StepConfigurationError, (exceptions.GenevaError, ValueError)),
        (exceptions.GenevaConfigurationError, (exceptions.GenevaError, ValueError)),
        (exceptions.HeroTypeNotFoundError, (exceptions.GenevaError, LookupError)),
        (exceptions.CursorTooLargeError, (exceptions.GenevaError, ValueError)),
        (exceptions.CursorSerializationError, (exceptions.GenevaError, TypeError)),
        (exceptions.InvalidStateError, (exceptions.GenevaError,)),
        (exceptions.InvalidStateTransition, (exceptions.GenevaError,)),
        (exceptions.DuplicateWorkflowError, (exceptions.GenevaError,)),
        (exceptions.StepNotDefinedError, (exceptions.StepExecutionError,)),
        (exceptions.ClaimFailedError, (exceptions.StepExecutionError,)),
        (exceptions.StepFailedError, (exceptions.StepExecutionError,)),
        (exceptions.PreconditionError, (exceptions.StepExecutionError,)),
    ],
)
def test_error_classes_have_the_documented_bases(error_cls, bases):
    """Every error derives from GenevaError and its documented stdlib base (§15.6)."""
    for base in bases:
        assert issubclass(error_cls, base)
    assert issubclass(error_cls, Exception)


@pytest.mark.parametrize(
    "signal_cls",
    [
        exceptions.CancelSignal,
        exceptions.PauseSignal,
        exceptions.SkipSignal,
        exceptions.FinishSignal,
        exceptions.ReattemptSignal,
        exceptions.SuspendSignal,
        exceptions.StepInterrupt,
    ],
)
def test_signals_are_not_exceptions(signal_cls):
    """Flow-control signals derive from BaseException, never Exception (R-FC-02, R-IT-07)."""
    assert issubclass(signal_cls, BaseException)
    assert not issubclass(signal_cls, Exception)
    caught = None
    try:
        try:
            raise signal_cls()
        except Exception:  # noqa: BLE001 - the point: a user handler must not see it
            caught = "exception"
    except BaseException:  # noqa: BLE001 - what the executor does
        caught = "base"
    assert caught == "base"


def test_step_execution_errors_pickle_with_ids_only():
    """StepExecutionError keeps ids through pickle and drops ORM references (STYLE §6)."""
    error = exceptions.StepNotDefinedError(
        "Step 'x' is not defined in Flow",
        workflow_id=7,
        step_execution_id=9,
        step_name="x",
    )
    error.workflow = object()
    error.step_execution = object()
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes
    assert type(copy) is exceptions.StepNotDefinedError
    assert (copy.workflow_id, copy.step_execution_id, copy.step_name) == (7, 9, "x")
    assert str(copy) == "Step 'x' is not defined in Flow"
    assert copy.workflow is None
    assert copy.step_execution is None


@pytest.mark.parametrize(
    "error",
    [
        exceptions.InvalidStateError("Cannot resume a ready workflow"),
        exceptions.DuplicateWorkflowError("duplicate"),
        exceptions.ReattemptSignal(timedelta(seconds=5), True),
        exceptions.SuspendSignal(timedelta(seconds=1)),
        exceptions.StepInterrupt(None, "max_iterations"),
        exceptions.ClaimFailedError(
            "the claim lost its connection", step_execution_id=7
        ),
    ],
)
def test_errors_and_signals_survive_pickling(error):
    """Errors and signals survive pickle with their arguments (STYLE §6)."""
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes
    assert type(copy) is type(error)
    assert copy.args == error.args


def test_public_names_are_exported():
    """Every public error and the DSL entry points are in flask_geneva.__all__ (§15)."""
    for name in (
        "Geneva",
        "step",
        "resumable_step",
        "cancel_if",
        "on_exception",
        "ExceptionPolicy",
        "Action",
        "inline_enqueue",
        "reset_column_caches",
        "DuplicateWorkflowError",
        "InvalidStateError",
        "StepNotDefinedError",
    ):
        assert name in flask_geneva.__all__
        assert hasattr(flask_geneva, name)

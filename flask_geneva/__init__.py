"""flask_geneva: durable, database-backed, multi-step workflows for Flask.

The public API is what ``__all__`` lists; everything else is internal.
"""

from __future__ import annotations

# Registers the engine the model methods call (flask_geneva.model_services).
from flask_geneva import model_engine as _model_engine  # noqa: F401
from flask_geneva.backoff import Backoff
from flask_geneva.backoff import BackoffError
from flask_geneva.column_detection import reset_column_caches
from flask_geneva.config import GenevaConfig
from flask_geneva.dsl.conditions import cancel_if
from flask_geneva.dsl.decorators import resumable_step
from flask_geneva.dsl.decorators import step
from flask_geneva.error_reporting import current_error_context
from flask_geneva.exceptions import CancelSignal
from flask_geneva.exceptions import CursorSerializationError
from flask_geneva.exceptions import CursorTooLargeError
from flask_geneva.exceptions import DuplicateWorkflowError
from flask_geneva.exceptions import FinishSignal
from flask_geneva.exceptions import FlowControlSignal
from flask_geneva.exceptions import GenevaConfigurationError
from flask_geneva.exceptions import GenevaError
from flask_geneva.exceptions import HeroTypeNotFoundError
from flask_geneva.exceptions import InstallError
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.exceptions import InvalidStateTransition
from flask_geneva.exceptions import PauseSignal
from flask_geneva.exceptions import PreconditionError
from flask_geneva.exceptions import ReattemptSignal
from flask_geneva.exceptions import SignalBufferFullError
from flask_geneva.exceptions import SignalPayloadTooLargeError
from flask_geneva.exceptions import SignalWaitTimeout
from flask_geneva.exceptions import SkipSignal
from flask_geneva.exceptions import StateConflictError
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.exceptions import StepExecutionError
from flask_geneva.exceptions import StepFailedError
from flask_geneva.exceptions import StepInterrupt
from flask_geneva.exceptions import StepNotDefinedError
from flask_geneva.exceptions import SuspendSignal
from flask_geneva.exceptions import WorkflowNotFoundError
from flask_geneva.extension import Geneva
from flask_geneva.iteration import request_exit
from flask_geneva.iteration import request_worker_exit
from flask_geneva.metrics import PrometheusMetrics
from flask_geneva.metrics import StatsdMetrics
from flask_geneva.model_states import WorkflowSignalState
from flask_geneva.models import Outcome
from flask_geneva.models import StepExecutionMixin
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowMixin
from flask_geneva.models import WorkflowState
from flask_geneva.operations import Executor
from flask_geneva.operations import run_housekeeping
from flask_geneva.policies import Action
from flask_geneva.policies import ExceptionPolicy
from flask_geneva.policies import on_exception
from flask_geneva.publishing import inline_enqueue
from flask_geneva.signal_matchers import SignalMatcher
from flask_geneva.tasks import beat_schedule
from flask_geneva.tasks import celery_defaults
from flask_geneva.workflow_signals import SignalDelivery

__version__ = "0.1.0.dev0"

__all__ = [
    "Action",
    "Backoff",
    "BackoffError",
    "CancelSignal",
    "CursorSerializationError",
    "CursorTooLargeError",
    "DuplicateWorkflowError",
    "ExceptionPolicy",
    "Executor",
    "FinishSignal",
    "FlowControlSignal",
    "Geneva",
    "GenevaConfig",
    "GenevaConfigurationError",
    "GenevaError",
    "HeroTypeNotFoundError",
    "InstallError",
    "InvalidStateError",
    "InvalidStateTransition",
    "Outcome",
    "PauseSignal",
    "PreconditionError",
    "PrometheusMetrics",
    "ReattemptSignal",
    "SignalBufferFullError",
    "SignalDelivery",
    "SignalMatcher",
    "SignalPayloadTooLargeError",
    "SignalWaitTimeout",
    "SkipSignal",
    "StateConflictError",
    "StatsdMetrics",
    "StepConfigurationError",
    "StepExecutionError",
    "StepExecutionMixin",
    "StepExecutionState",
    "StepFailedError",
    "StepInterrupt",
    "StepNotDefinedError",
    "SuspendSignal",
    "WorkflowMixin",
    "WorkflowNotFoundError",
    "WorkflowSignalState",
    "WorkflowState",
    "beat_schedule",
    "cancel_if",
    "celery_defaults",
    "current_error_context",
    "inline_enqueue",
    "on_exception",
    "request_exit",
    "request_worker_exit",
    "reset_column_caches",
    "resumable_step",
    "run_housekeeping",
    "step",
]

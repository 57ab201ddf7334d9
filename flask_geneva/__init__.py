"""flask_geneva: durable, database-backed, multi-step workflows for Flask.

The public API is what ``__all__`` lists; everything else is internal.
"""

from __future__ import annotations

from flask_geneva.core.config import GenevaConfig
from flask_geneva.core.error_reporting import current_error_context
from flask_geneva.core.moved_modules import install_moved_module_finder
from flask_geneva.core.version import installed_version
from flask_geneva.db.optional_columns import reset_column_caches
from flask_geneva.db.states import WorkflowSignalState
from flask_geneva.dsl.conditions import cancel_if
from flask_geneva.dsl.decorators import resumable_step
from flask_geneva.dsl.decorators import step
from flask_geneva.dsl.limits import Limit
from flask_geneva.dsl.signal_matchers import SignalMatcher
from flask_geneva.engine.iteration import request_exit
from flask_geneva.engine.iteration import request_worker_exit
from flask_geneva.engine.publishing import inline_enqueue
from flask_geneva.engine.workflow_signals.delivery import SignalDelivery
from flask_geneva.exceptions import CancelSignal
from flask_geneva.exceptions import ChildWorkflowFailed
from flask_geneva.exceptions import ClaimFailedError
from flask_geneva.exceptions import CursorSerializationError
from flask_geneva.exceptions import CursorTooLargeError
from flask_geneva.exceptions import DatabaseUnavailableError
from flask_geneva.exceptions import DuplicateWorkflowError
from flask_geneva.exceptions import FinishSignal
from flask_geneva.exceptions import FlowControlSignal
from flask_geneva.exceptions import GenevaConfigurationError
from flask_geneva.exceptions import GenevaError
from flask_geneva.exceptions import HeroTypeNotFoundError
from flask_geneva.exceptions import InstallError
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.exceptions import InvalidStateTransition
from flask_geneva.exceptions import LimitKeyError
from flask_geneva.exceptions import PauseSignal
from flask_geneva.exceptions import PreconditionError
from flask_geneva.exceptions import ReattemptSignal
from flask_geneva.exceptions import ResultTooLargeError
from flask_geneva.exceptions import ScheduleNotFoundError
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
from flask_geneva.exceptions import StepTimeout
from flask_geneva.exceptions import SuspendSignal
from flask_geneva.exceptions import UnawaitedSignalWarning
from flask_geneva.exceptions import WorkerLostError
from flask_geneva.exceptions import WorkflowNotFoundError

# Registers the engine the model methods call (flask_geneva.models.services).
from flask_geneva.ext import model_engine as _model_engine  # noqa: F401
from flask_geneva.ext.extension import Geneva
from flask_geneva.ext.operations import Executor
from flask_geneva.ext.operations import run_housekeeping
from flask_geneva.ext.tasks import beat_schedule
from flask_geneva.ext.tasks import celery_defaults
from flask_geneva.models import Outcome
from flask_geneva.models import StepExecutionMixin
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowMixin
from flask_geneva.models import WorkflowState
from flask_geneva.policies.backoff import Backoff
from flask_geneva.policies.backoff import BackoffError
from flask_geneva.policies.exception_policy import Action
from flask_geneva.policies.exception_policy import ExceptionPolicy
from flask_geneva.policies.exception_policy import on_exception
from flask_geneva.telemetry.meters import OpenTelemetryMetrics
from flask_geneva.telemetry.metric_adapters import PrometheusMetrics
from flask_geneva.telemetry.metric_adapters import StatsdMetrics

__version__ = installed_version()

# Old module paths (before the layer folders of 0.2) still import, with a warning.
install_moved_module_finder()

__all__ = [
    "Action",
    "Backoff",
    "BackoffError",
    "CancelSignal",
    "ChildWorkflowFailed",
    "ClaimFailedError",
    "CursorSerializationError",
    "CursorTooLargeError",
    "DatabaseUnavailableError",
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
    "Limit",
    "LimitKeyError",
    "OpenTelemetryMetrics",
    "Outcome",
    "PauseSignal",
    "PreconditionError",
    "PrometheusMetrics",
    "ReattemptSignal",
    "ResultTooLargeError",
    "ScheduleNotFoundError",
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
    "StepTimeout",
    "SuspendSignal",
    "UnawaitedSignalWarning",
    "WorkerLostError",
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

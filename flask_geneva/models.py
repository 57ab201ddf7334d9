"""The model layer's public names, re-exported from the modules that define them.

- :mod:`flask_geneva.model_states`: table names, ``WorkflowState``,
  ``StepExecutionState``, ``Outcome`` and the terminal/active sets (SPEC §3-§4);
- :mod:`flask_geneva.model_columns`: ``UTCDateTime``, ``JSONDocument``, ``InvalidJSON``;
- :mod:`flask_geneva.workflow_model` / :mod:`flask_geneva.workflow_actions`:
  ``WorkflowMixin`` (queries, hero, metadata / create and flow control);
- :mod:`flask_geneva.step_execution_model`: ``StepExecutionMixin``;
- :mod:`flask_geneva.model_factory`: ``build_models``.

The model methods reach the engine only through :mod:`flask_geneva.model_services`.
"""

from __future__ import annotations

from flask_geneva.model_columns import InvalidJSON
from flask_geneva.model_columns import JSONDocument
from flask_geneva.model_columns import UTCDateTime
from flask_geneva.model_factory import build_models
from flask_geneva.model_states import ACTIVE_EXECUTION_STATES
from flask_geneva.model_states import STEP_EXECUTIONS_TABLE
from flask_geneva.model_states import TERMINAL_WORKFLOW_STATES
from flask_geneva.model_states import WORKERS_TABLE
from flask_geneva.model_states import WORKFLOWS_TABLE
from flask_geneva.model_states import Outcome
from flask_geneva.model_states import StepExecutionState
from flask_geneva.model_states import WorkflowState
from flask_geneva.step_execution_model import StepExecutionMixin
from flask_geneva.workflow_model import WorkflowMixin

__all__ = [
    "ACTIVE_EXECUTION_STATES",
    "STEP_EXECUTIONS_TABLE",
    "TERMINAL_WORKFLOW_STATES",
    "WORKERS_TABLE",
    "WORKFLOWS_TABLE",
    "InvalidJSON",
    "JSONDocument",
    "Outcome",
    "StepExecutionMixin",
    "StepExecutionState",
    "UTCDateTime",
    "WorkflowMixin",
    "WorkflowState",
    "build_models",
]

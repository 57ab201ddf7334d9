"""The model layer's public names, re-exported from the modules that define them.

- :mod:`flask_geneva.db.states`: table names, ``WorkflowState``,
  ``StepExecutionState``, ``Outcome`` and the terminal/active sets (SPEC §3-§4);
- :mod:`flask_geneva.db.column_types`: ``UTCDateTime``, ``JSONDocument``,
  ``InvalidJSON``;
- :mod:`flask_geneva.models.workflow` / :mod:`flask_geneva.models.workflow_actions`:
  ``WorkflowMixin`` (queries, hero, metadata / create and flow control);
- :mod:`flask_geneva.models.step_execution`: ``StepExecutionMixin``;
- :mod:`flask_geneva.models.factory`: ``build_models``.

The model methods reach the engine only through :mod:`flask_geneva.models.services`.
"""

from __future__ import annotations

from flask_geneva.db.column_types import InvalidJSON
from flask_geneva.db.column_types import JSONDocument
from flask_geneva.db.column_types import UTCDateTime
from flask_geneva.db.states import ACTIVE_EXECUTION_STATES
from flask_geneva.db.states import STEP_EXECUTIONS_TABLE
from flask_geneva.db.states import TERMINAL_WORKFLOW_STATES
from flask_geneva.db.states import WORKERS_TABLE
from flask_geneva.db.states import WORKFLOWS_TABLE
from flask_geneva.db.states import Outcome
from flask_geneva.db.states import StepExecutionState
from flask_geneva.db.states import WorkflowState
from flask_geneva.models.factory import build_models
from flask_geneva.models.step_execution import StepExecutionMixin
from flask_geneva.models.workflow import WorkflowMixin

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

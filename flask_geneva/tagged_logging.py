"""Tagged logging: ``[tag] [tag] message`` via a ``logging.LoggerAdapter`` (R-LOG)."""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["TaggedLoggerAdapter", "execution_logger", "workflow_logger", "workflow_tag"]

#: Default base logger (R-LOG-04).
BASE_LOGGER_NAME = "flask_geneva"


class TaggedLoggerAdapter(logging.LoggerAdapter[logging.Logger]):
    """Prefixes each message with its tags in square brackets, in order (R-LOG-03).

    Args:
        logger: The underlying :class:`logging.Logger`.
        tags: Tags, outermost first (e.g. a task id tag injected by the Celery task).
    """

    def __init__(self, logger: logging.Logger, tags: tuple[str, ...] = ()) -> None:
        super().__init__(logger, {})
        self.tags = tuple(tags)

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        prefix = "".join(f"[{tag}] " for tag in self.tags)
        return f"{prefix}{msg}", kwargs

    def tagged(self, *tags: str) -> TaggedLoggerAdapter:
        """Return a new adapter with ``tags`` appended."""
        return TaggedLoggerAdapter(self.logger, self.tags + tuple(tags))


def as_tagged(base: Any) -> TaggedLoggerAdapter:
    """Wrap a logger or adapter as a :class:`TaggedLoggerAdapter`, keeping its tags."""
    if isinstance(base, TaggedLoggerAdapter):
        return base
    if base is None:
        return TaggedLoggerAdapter(logging.getLogger(BASE_LOGGER_NAME))
    if isinstance(base, logging.LoggerAdapter):
        inner = base.logger
        while isinstance(inner, logging.LoggerAdapter):
            inner = inner.logger
        return TaggedLoggerAdapter(inner)
    return TaggedLoggerAdapter(base)


def workflow_tag(workflow: Any) -> str:
    """``"<Type> id=<id>"`` plus hero type and id when set (R-LOG-01)."""
    tag = f"{workflow.type or type(workflow).__name__} id={workflow.id}"
    if workflow.hero_id not in (None, ""):
        tag += f" hero_type={workflow.hero_type} hero_id={workflow.hero_id}"
    return tag


def execution_tag(execution: Any) -> str:
    """``"execution_id=<id> step_name=<name>"`` (R-LOG-02)."""
    return f"execution_id={execution.id} step_name={execution.step_name}"


def workflow_logger(workflow: Any, base: Any = None) -> TaggedLoggerAdapter:
    """The workflow-tagged logger (R-LOG-05 outside executor calls)."""
    return as_tagged(base).tagged(workflow_tag(workflow))


def execution_logger(
    workflow: Any, execution: Any, base: Any = None
) -> TaggedLoggerAdapter:
    """The workflow- and execution-tagged logger (R-LOG-02/05)."""
    return workflow_logger(workflow, base).tagged(execution_tag(execution))

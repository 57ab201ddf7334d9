"""Step bodies and step lists the test workflow classes share.

Free of any app: the test apps with models of their own (``tests/apps/uuid_app.py``,
``extra_column_app.py``) use them as well as ``tests/support/common_workflows.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask_geneva import step


def adds(amount: int) -> Callable[[Any], None]:
    """A step body that adds ``amount`` to the hero's counter."""

    def add(workflow: Any) -> None:
        workflow.hero.counter += amount

    return add


def nothing(workflow: Any) -> None:
    """A step body that does nothing."""


def named_steps(**bodies: Callable[[Any], None]) -> list[Any]:
    """Immediate steps, one a keyword, in order: its name and its body."""
    return [step.anonymous(body, name=name) for name, body in bodies.items()]


def recording_steps(runs: list[str], *names: str) -> list[Any]:
    """Immediate steps ``names``, in order; each appends its name to ``runs``."""

    def records(name: str) -> Callable[[Any], None]:
        return lambda workflow: runs.append(name)

    return named_steps(**{name: records(name) for name in names})

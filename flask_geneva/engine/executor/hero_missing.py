"""A workflow whose hero is gone is canceled, saying why (R-EXE-13, R-HERO-07).

A class that does not set ``may_proceed_without_hero`` (R-HERO-05) needs its
hero. When the hero row is gone, the workflow ends the same way whatever the
moment the executor notices it: before the step is claimed (Phase 1), when a
cancel or skip condition raised, or when the body raised (it read
``self.hero`` as None because the hero was deleted after the claim). The
execution and the workflow are canceled through the transition
``cancel_for_missing_hero``, and the execution's ``error_message`` records the
reason (which the admin's timeline and ``flask geneva show`` print), followed by
the exception a condition or the body raised, whose details stay in the
execution's metadata (``"exception"``, R-SE-20). Nothing is reported or
re-raised: the engine handled it.
"""

from __future__ import annotations

from typing import Any

from flask_geneva.core.keys import format_hero
from flask_geneva.db import error_recording
from flask_geneva.engine.executor import outcomes
from flask_geneva.engine.executor.run import StepRun
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.exceptions import HeroTypeNotFoundError

__all__ = ["cancel", "hero_gone", "needs_missing_hero", "reason"]


def needs_missing_hero(workflow: Any) -> bool:
    """Whether the workflow needs its hero and it is gone (R-EXE-13).

    Raises:
        HeroTypeNotFoundError: ``hero_type`` names no mapped class (R-HERO-03):
            Phase 1 hands it to the policies (R-EXE-30).
    """
    return not type(workflow).may_proceed_without_hero and workflow.hero is None


def hero_gone(workflow: Any) -> bool:
    """:func:`needs_missing_hero` after a condition or the body raised.

    Returns:
        False as well when ``hero_type`` names no mapped class: the exception
        then goes to the policies as before.
    """
    try:
        return needs_missing_hero(workflow)
    except HeroTypeNotFoundError:
        return False


def reason(workflow: Any) -> str:
    """Why the workflow is canceled, naming the hero and the class (R-HERO-07)."""
    why = (
        f"hero {format_hero(workflow.hero_type, workflow.hero_id)} no longer exists"
        if workflow.hero_type is not None and workflow.hero_id is not None
        else "the workflow has no hero"
    )
    return (
        f"{why}: the workflow is canceled ({workflow.type} does not set "
        "may_proceed_without_hero, R-EXE-13)"
    )


def cancel(
    run: StepRun,
    workflow: Any,
    execution: Any,
    step: Any,
    now: Any,
    *,
    error: Exception | None = None,
    raised_by: str = "step",
    keep_state: bool = False,
) -> None:
    """Cancel the execution and the workflow with the reason; commit (R-HERO-07).

    Args:
        run: The run, in its locked transaction.
        workflow: The locked workflow, ``ready`` or ``performing``.
        execution: The locked execution, ``scheduled`` or ``in_progress``.
        step: Its step definition, or None (Phase 1's check comes first).
        now: The transition time.
        error: What a condition or the body raised meanwhile, if anything;
            its details go to the execution's metadata.
        raised_by: What raised ``error``, for the message (``"step"``,
            ``"cancel condition"``, ``"skip condition"``).
        keep_state: Commit keeping the loaded rows (finalize's commit,
            :func:`~flask_geneva.engine.executor.outcomes.commit_resolved`).

    Raises:
        InvalidStateTransition: A row is not in a from-state of the entry.
    """
    message = reason(workflow)
    if error is None:
        run.logger.info("%s", message)
    else:
        error_recording.record_exception_metadata(execution, error)
        message = f"{message}; the {raised_by} raised {type(error).__name__}: {error}"
        run.logger.warning("%s", message)
    execution.error_message = message
    outcomes.transition(
        run, transitions.CANCEL_FOR_MISSING_HERO, now, workflow, execution, step
    )
    outcomes.commit_resolved(run, workflow, execution, step, keep_state=keep_state)

"""Starting child workflows from a step: ``start_child`` and ``start_children``
(SPEC §25, R-CHD-11..14).

A child is inserted in the step's own transaction (the body's writes, committed
with them or with a resumable step's checkpoint), linked to the parent, to the
step execution and the step that started it, under a key unique among that
step's children. A step run again (at least once delivery) finds the children
its earlier run committed and creates no duplicate. The parent's ``started``
count grows by the children actually inserted, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from datetime import datetime
from datetime import timedelta
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core.stored_names import NAME_RULE
from flask_geneva.core.stored_names import fits_name_column
from flask_geneva.db.queries import children as child_queries
from flask_geneva.db.states import UNIQUE_CHILD_INDEX
from flask_geneva.db.states import ParentClose
from flask_geneva.dsl.job_options import fold_priority
from flask_geneva.engine import traces
from flask_geneva.engine import workflow_creation
from flask_geneva.engine.children.settle import installed
from flask_geneva.engine.children.settle import note_started
from flask_geneva.engine.deadlines.children import child_deadline_at
from flask_geneva.engine.flow_control import current_step_context
from flask_geneva.exceptions import GenevaError
from flask_geneva.exceptions import InvalidStateError

__all__ = ["NOT_INSTALLED_MESSAGE", "start_children"]

#: What starting a child says without the install unit (R-CHD-50).
NOT_INSTALLED_MESSAGE = (
    "child workflows need the add_child_workflows install unit: run `flask geneva "
    "install` and `flask db upgrade`"
)

ChildKey = str | Callable[[Any], str] | None


def start_children(
    parent: Any,
    child_cls: Any,
    heroes: Iterable[Any],
    *,
    key: ChildKey,
    single: bool,
    parent_close: str,
    allow_multiple: bool,
    step_job_options: Mapping[str, Any] | None,
    priority: int | None,
    deadline: datetime | timedelta | None = None,
) -> list[Any]:
    """Insert the children of ``parent`` that do not exist yet (R-CHD-11..14).

    Args:
        parent: The workflow whose step is running (``self`` in the step).
        child_cls: The child's workflow class.
        heroes: One hero per child (None for a class with
            ``may_proceed_without_hero``).
        key: The child's key among the step's children: a str (``single``
            only), a callable ``(hero) -> str``, or None for the default,
            ``"<child type>:<hero type>:<hero id>"`` (``"<child type>"``
            without a hero).
        single: Called as ``start_child`` (one hero).
        parent_close: ``"cancel"`` or ``"abandon"`` (R-CHD-30).
        allow_multiple: Exempt the children from the one-ongoing rule
            (R-UNQ-04); True by default for children.
        step_job_options: The children's job options (R-WF-15).
        priority: Their priority (R-PRI-01).
        deadline: Their deadline (an aware datetime after now, or a positive
            timedelta from now); None inherits the parent's, or the child
            class's if earlier (R-DL-30).

    Returns:
        The children, in the order of ``heroes``: new ones inserted (their
        first steps published after the commit), existing ones loaded.

    Raises:
        InvalidStateError: Not called in the body of a step of ``parent``.
        GenevaError: The ``add_child_workflows`` unit is missing; or another
            run of the step inserted a child with the same key at the same
            time (the step's policies decide; a re-run finds it).
        ValueError: An invalid ``key`` (not a non-empty str of at most 255
            characters without NUL), two heroes with one key, or an invalid
            ``parent_close``.
        TypeError: ``child_cls`` is no workflow class, a hero is invalid
            (R-HERO-01/06), ``allow_multiple`` is not a bool.
        DuplicateWorkflowError: ``allow_multiple=False`` and the hero has an
            ongoing workflow of the class (R-UNQ-02).
        GenevaError: A deadline applies and the ``add_workflow_deadlines``
            unit is missing (R-DL-50).
    """
    context = current_step_context()
    if (
        context is None
        or context.workflow_id != parent.id
        or context.phase != "body"
        or context.execution_id is None
    ):
        raise InvalidStateError(
            f"start_child()/start_children() run only in the body of a step of "
            f"workflow {parent.id}: a child is linked to the step execution that "
            "started it (R-CHD-11)"
        )
    session = orm.object_session(parent)
    if session is None or not installed(session):
        raise GenevaError(NOT_INSTALLED_MESSAGE)
    if "__geneva_type__" not in getattr(child_cls, "__dict__", {}):
        raise TypeError(
            f"a child must be a workflow class declared with `class "
            f"MyWorkflow(geneva.Workflow)`, got {child_cls!r}"
        )
    if not isinstance(allow_multiple, bool):
        raise TypeError(f"allow_multiple must be True or False, got {allow_multiple!r}")
    close = _parent_close(parent_close)
    if isinstance(key, str) and not single:
        raise ValueError(
            "start_children() takes key=None or a callable (hero) -> str: one str "
            "would give every child the same key"
        )
    if priority is not None:
        step_job_options = fold_priority(
            step_job_options,
            priority,
            context=f"{child_cls.__name__} child",
            keyword="priority=",
            options_name="step_job_options",
        )
    deadline_at = child_deadline_at(
        session, parent, child_cls, deadline, now=clock.now()
    )
    children: list[Any] = []
    for hero in heroes:
        if hero is None and not child_cls.may_proceed_without_hero:
            raise TypeError(
                f"a {child_cls.__name__} workflow needs a hero: pass a saved model "
                f"instance, or set may_proceed_without_hero = True on "
                f"{child_cls.__name__} (R-HERO-06)"
            )
        child = workflow_creation.new_workflow(
            child_cls, hero, allow_multiple, step_job_options, deadline_at
        )
        child.parent_workflow_id = parent.id
        child.parent_execution_id = context.execution_id
        child.parent_step_name = context.step_name
        child.child_key = _child_key(key, hero, child)
        child.parent_close = close
        children.append(child)
    _refuse_repeated_keys(children)
    if not children:
        return []
    workflow_cls = parent.__geneva__.Workflow
    step_name = str(context.step_name)
    existing = child_queries.child_ids_by_key(
        session,
        workflow_cls,
        parent.id,
        step_name,
        [child.child_key for child in children],
    )
    new = [child for child in children if child.child_key not in existing]
    if new:
        spans = traces.start_child_creates(session, new)  # R-OTEL-10
        try:
            _insert(session, parent, new, step_name)
        except BaseException as error:
            traces.end_creates(spans, new, error)
            raise
        traces.end_creates(spans, new, None)
        # Counted when the transaction commits: the counts row is the leaf of
        # the lock order (R-CHD-40).
        note_started(session, parent.id, len(new))
        parent.logger.info(
            "started %d child workflows of %s in step %r (%d existed)",
            len(new),
            child_cls.__name__,
            step_name,
            len(existing),
        )
    loaded = {
        child.id: child
        for child in child_queries.children_by_ids(
            session, workflow_cls, list(existing.values())
        )
    }
    return [
        loaded.get(existing[child.child_key], child)
        if child.child_key in existing
        else child
        for child in children
    ]


def _insert(session: orm.Session, parent: Any, new: list[Any], step_name: str) -> None:
    try:
        with session.begin_nested():
            session.add_all(new)
            session.flush()
            for child in new:
                workflow_creation.schedule_first_step(session, child)
            session.flush()
    except sa_exc.IntegrityError as error:
        if workflow_creation.is_unique_ongoing_violation(error):
            raise workflow_creation.duplicate_error(new[0], None) from error
        text = str(error.orig)
        if UNIQUE_CHILD_INDEX in text or "parent_workflow_id" in text:
            raise GenevaError(
                f"another run of step {step_name!r} of workflow {parent.id} started "
                "children with the same keys at the same time; this run's are "
                "rolled back (a re-run finds the stored ones)"
            ) from error
        raise


def _parent_close(value: object) -> str:
    allowed = [member.value for member in ParentClose]
    if isinstance(value, str) and value in allowed:
        return value
    raise ValueError(
        f"invalid parent_close {value!r}: must be one of "
        f"{', '.join(map(repr, allowed))} (what canceling the parent does to the "
        "child)"
    )


def _child_key(key: ChildKey, hero: Any, child: Any) -> str:
    if key is None:
        if child.hero_type is None:
            value: object = child.__geneva_type__
        else:
            value = f"{child.__geneva_type__}:{child.hero_type}:{child.hero_id}"
    elif callable(key):
        value = key(hero)
    else:
        value = key
    if not fits_name_column(value):
        shown = repr(value)
        if isinstance(value, str) and len(value) > 60:
            shown = f"{value[:40]!r}... ({len(value)} characters)"
        raise ValueError(f"invalid child key {shown}: a child key must be {NAME_RULE}")
    return str(value)


def _refuse_repeated_keys(children: list[Any]) -> None:
    seen: set[str] = set()
    for child in children:
        if child.child_key in seen:
            raise ValueError(
                f"two children would have the key {child.child_key!r}: keys are "
                "unique among a step's children; give key=<a callable (hero) -> "
                "str> that tells them apart"
            )
        seen.add(child.child_key)

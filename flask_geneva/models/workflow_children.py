"""The child-workflow and result methods of ``geneva.Workflow`` (SPEC §25).

Each method is the one definition of its operation and passes its arguments
to the engine operation of that name (:mod:`flask_geneva.models.services`),
so the models import no orchestration module.
:class:`flask_geneva.models.workflow.WorkflowMixin` extends this class.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from datetime import datetime
from datetime import timedelta
from typing import Any

from flask_geneva.models.services import model_engine

__all__ = ["WorkflowChildren"]


class WorkflowChildren:
    """Results, starting children and reading them (R-CHD-01..03, R-CHD-11)."""

    # -- results --------------------------------------------------------------------

    def set_result(self, value: Any) -> None:
        """Store ``value`` as this workflow's result (R-CHD-01).

        Written in the session's current transaction: in a step, with the
        body's writes (committed after the body, or by a resumable step's
        checkpoint). Setting it again replaces it; None clears it.

        Args:
            value: None or a JSON-like value of the cursor codec's types
                (dicts, lists, str, numbers, bool, dates, datetimes,
                timedeltas, Decimal, UUID), at most ``GENEVA_MAX_RESULT_SIZE``
                bytes encoded (default 131072).

        Raises:
            CursorSerializationError: The value holds a type the codec cannot
                store ("cannot store the result", with the path).
            ResultTooLargeError: Encoded, it is larger than
                ``GENEVA_MAX_RESULT_SIZE``; nothing is written.
            GenevaError: The ``add_child_workflows`` unit is not installed.
        """
        model_engine().set_result(self, value)

    @property
    def result(self) -> Any:
        """This workflow's result (R-CHD-01), decoded; None when none was set
        (or the ``add_child_workflows`` unit is not installed)."""
        return model_engine().read_result(self)

    # -- children -------------------------------------------------------------------

    def start_child(
        self,
        child_class: Any,
        *,
        hero: Any = None,
        key: str | None = None,
        parent_close: str = "cancel",
        allow_multiple: bool = True,
        step_job_options: Mapping[str, Any] | None = None,
        priority: int | None = None,
        deadline: datetime | timedelta | None = None,
    ) -> Any:
        """Create a child workflow of this one, in the running step (R-CHD-11).

        Only in the body of one of this workflow's steps. The child is
        inserted in the step's transaction (committed with the body's writes)
        and its first step published after that commit. It is unique per
        (this workflow, this step, ``key``): when the step runs again after
        its body committed (at least once delivery), the stored child is
        returned and nothing is created.

        Args:
            child_class: The child's workflow class.
            hero: The child's hero (None for a class with
                ``may_proceed_without_hero``).
            key: The child's key among this step's children (a non-empty str
                of at most 255 characters); None for
                ``"<child type>:<hero type>:<hero id>"`` (``"<child type>"``
                without a hero).
            parent_close: ``"cancel"`` (canceling this workflow cancels the
                child, R-CHD-31) or ``"abandon"`` (the child runs on).
            allow_multiple: Exempt the child from the one-ongoing-per-hero
                rule (R-UNQ-04); True for children by default (their key
                dedupes them).
            step_job_options: The child's job options (R-WF-15).
            priority: The child's priority (R-PRI-01).
            deadline: The child's deadline (R-DL-30): a timezone-aware
                datetime after now or a positive timedelta from now, earlier
                or later than this workflow's. None inherits this workflow's
                deadline, or the child class's ``__geneva_deadline__`` when
                that comes first.

        Returns:
            The child workflow (new, or the one stored earlier).

        Raises:
            InvalidStateError: Not called in the body of a step of this
                workflow.
            ValueError: An invalid ``key`` or ``parent_close``.
            TypeError: ``child_class`` is no workflow class, or the hero is
                invalid (R-HERO-01/06).
            DuplicateWorkflowError: ``allow_multiple=False`` and the hero has
                an ongoing workflow of the class (R-UNQ-02).
            GenevaError: The ``add_child_workflows`` unit is not installed, or
                a deadline applies without ``add_workflow_deadlines``.

        .. versionchanged:: 0.1
            ``deadline`` (issue 37).
        """
        [child] = model_engine().start_children(
            self,
            child_class,
            [hero],
            key=key,
            single=True,
            parent_close=parent_close,
            allow_multiple=allow_multiple,
            step_job_options=step_job_options,
            priority=priority,
            deadline=deadline,
        )
        return child

    def start_children(
        self,
        child_class: Any,
        heroes: Iterable[Any],
        *,
        key: Callable[[Any], str] | None = None,
        parent_close: str = "cancel",
        allow_multiple: bool = True,
        step_job_options: Mapping[str, Any] | None = None,
        priority: int | None = None,
        deadline: datetime | timedelta | None = None,
    ) -> list[Any]:
        """Create one child per hero, in the running step, in bulk (R-CHD-12).

        As :meth:`start_child` for each hero, in one savepoint of the step's
        transaction: the children whose keys this step stored earlier are
        returned as they are, the others inserted together. For a fan-out of
        thousands, call it from a resumable step once per batch
        (``it.iterate_over_batches``): each batch is committed with its
        checkpoint, so no transaction holds the whole fan-out and a step run
        again resumes after the last committed batch.

        Args:
            child_class: The children's workflow class.
            heroes: One hero per child.
            key: A callable ``(hero) -> str`` giving each child's key, or None
                for the default of :meth:`start_child`; keys must differ.
            parent_close, allow_multiple, step_job_options, priority,
                deadline: As for :meth:`start_child`, for every child.

        Returns:
            The children, in the order of ``heroes``.

        Raises:
            ValueError: Two heroes with one key, or an invalid key.
            Everything :meth:`start_child` raises.
        """
        children: list[Any] = model_engine().start_children(
            self,
            child_class,
            heroes,
            key=key,
            single=False,
            parent_close=parent_close,
            allow_multiple=allow_multiple,
            step_job_options=step_job_options,
            priority=priority,
            deadline=deadline,
        )
        return children

    def children(
        self, *, state: str | None = None, limit: int | None = None
    ) -> list[Any]:
        """This workflow's children, by id (R-CHD-03).

        Args:
            state: Only children in this workflow state (``"finished"``, ...).
            limit: At most this many (the lowest ids); None for all, read in
                pages of 1000.

        Raises:
            GenevaError: The ``add_child_workflows`` unit is not installed.
        """
        found: list[Any] = model_engine().children(self, state=state, limit=limit)
        return found

    def child_results(self) -> dict[Any, Any]:
        """``{child id: result}`` of every child, None for a child without one
        (R-CHD-03); read in pages of 1000, only ids and results.

        Raises:
            GenevaError: The ``add_child_workflows`` unit is not installed.
        """
        results: dict[Any, Any] = model_engine().child_results(self)
        return results

    @property
    def parent(self) -> Any:
        """The workflow that started this one (R-CHD-10), or None: a top-level
        workflow, a parent that was cleaned up, or no ``add_child_workflows``
        unit."""
        return model_engine().parent_of(self)

    @property
    def child_counts(self) -> Any:
        """This workflow's child counts (R-CHD-10): ``started``, ``settled``,
        ``failed`` and the parked execution; None before its first child."""
        return model_engine().child_counts_of(self)

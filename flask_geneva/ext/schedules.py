"""The extension's schedules: declared, validated, listed (SPEC §26, R-SCHED-01).

:class:`ScheduleRegistry` is a base of :class:`flask_geneva.Geneva`; the
declaration itself is validated by :func:`flask_geneva.dsl.schedules.define_schedule`,
the firing is :mod:`flask_geneva.engine.schedules`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from flask_geneva.dsl.schedules import DEFAULT_BATCH_SIZE
from flask_geneva.dsl.schedules import Schedule
from flask_geneva.dsl.schedules import define_schedule
from flask_geneva.exceptions import GenevaConfigurationError

__all__ = ["ScheduleRegistry"]


class ScheduleRegistry:
    """The schedules of one extension, by name (R-SCHED-01, R-SCHED-02)."""

    Workflow: Any
    _schedules: dict[str, Schedule]

    def schedule(
        self,
        name: str,
        workflow_class: type[Any],
        *,
        cron: str,
        timezone: str = "UTC",
        heroes: Any = None,
        missed: str = "skip",
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Schedule:
        """Declare a recurring start of ``workflow_class`` (R-SCHED-01..04)::

            geneva.schedule(
                "weekly-digest", Digest, cron="0 9 * * MON",
                timezone="Europe/Berlin",
                heroes=lambda: User.query.filter_by(active=True),
                missed="latest",
            )

        The dispatcher run that already runs fires it (R-SCHED-20); each fire
        creates one workflow per hero, skipping heroes with an ongoing workflow
        of the class (R-UNQ-01).

        Args:
            name: Unique among this extension's schedules (<= 255 characters).
            workflow_class: A workflow class declared on this extension.
            cron: A cron expression (cronsim; five fields).
            timezone: The IANA zone the expression is read in; default UTC.
            heroes: A callable returning one hero, an iterable of heroes or a
                SQLAlchemy ``Select``/``Query``; None (a class with
                ``may_proceed_without_hero``) creates one workflow without hero.
            missed: After downtime, ``"skip"`` (only future times), ``"latest"``
                (one catch-up fire) or ``"all"`` (every missed time, the latest
                100 at most).
            batch_size: Heroes per fan-out batch (1..10,000), each batch in a
                transaction of its own.

        Returns:
            The declared :class:`~flask_geneva.dsl.schedules.Schedule`.

        Raises:
            GenevaConfigurationError: An invalid value (named with what is
                allowed), a class not declared on this extension, or a name
                already declared.

        .. versionadded:: 0.2
        """
        declared = define_schedule(
            name,
            workflow_class,
            cron=cron,
            timezone=timezone,
            heroes=heroes,
            missed=missed,
            batch_size=batch_size,
        )
        if not (
            issubclass(workflow_class, self.Workflow)
            and "__geneva_type__" in workflow_class.__dict__
        ):
            raise GenevaConfigurationError(
                f"schedule {name!r}: {workflow_class.__name__} is not a workflow "
                "class declared on this extension (`class MyWorkflow"
                "(geneva.Workflow)`)"
            )
        if name in self._schedules:
            raise GenevaConfigurationError(
                f"schedule {name!r} is declared twice (first for "
                f"{self._schedules[name].workflow_class.__name__}, now for "
                f"{workflow_class.__name__}); give each schedule its own name"
            )
        self._schedules[name] = declared
        return declared

    def remove_schedule(self, name: str) -> None:
        """Forget a declared schedule (tests, schedules declared at run time).

        Its rows stay; a schedule declared again under the name goes on from
        them.

        Raises:
            KeyError: No schedule of that name is declared.
        """
        del self._schedules[name]

    @property
    def schedules(self) -> Mapping[str, Schedule]:
        """``{name: Schedule}`` of the declared schedules, read-only, by name."""
        return MappingProxyType(dict(sorted(self._schedules.items())))

"""Schedules: recurring starts of a workflow class (SPEC §26.1, R-SCHED-01..04).

A :class:`Schedule` is declared with ``geneva.schedule(name, WorkflowClass,
cron=..., timezone=...)`` and validated here, when declared: the cron
expression is parsed by `cronsim <https://pypi.org/project/cronsim/>`_
(maintained, typed, no dependencies; it steps over daylight-saving changes the
way Debian's cron does: a time the clock skips fires at the first minute after
the jump, a time the clock shows twice fires once), the time zone is looked up
with :mod:`zoneinfo`. This module also answers "which fire times lie between
two instants" (R-SCHED-03). Pure code: no database, no Flask.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo
from zoneinfo import ZoneInfoNotFoundError

from cronsim import CronSim
from cronsim import CronSimError

from flask_geneva.exceptions import GenevaConfigurationError

__all__ = [
    "MAX_CATCH_UP",
    "MAX_SCHEDULE_NAME_LENGTH",
    "MISSED_POLICIES",
    "Schedule",
    "define_schedule",
    "late_tolerance",
]

#: What a schedule does with fire times missed while no dispatcher ran (R-SCHED-23).
MISSED_POLICIES = ("skip", "latest", "all")
#: The most missed fire times one ``missed="all"`` catch-up fires: the latest
#: ones; older missed times are skipped and logged (R-SCHED-23).
MAX_CATCH_UP = 100
#: The longest schedule name (the primary key of its state row).
MAX_SCHEDULE_NAME_LENGTH = 255
#: The default number of heroes per fan-out batch (one transaction each).
DEFAULT_BATCH_SIZE = 100
#: The largest ``batch_size``.
MAX_BATCH_SIZE = 10_000


@dataclasses.dataclass(frozen=True, eq=False)
class Schedule:
    """One declared schedule (R-SCHED-01).

    Attributes:
        name: Unique among the extension's schedules; the key of its rows.
        workflow_class: The workflow class each fire creates.
        cron: The cron expression (five fields; cronsim's optional sixth,
            seconds, is accepted).
        timezone: The IANA time zone name the expression is read in.
        heroes: A callable returning the heroes of one fire (one hero, an
            iterable of heroes, or a SQLAlchemy ``Select``/``Query``), or None
            for one workflow without a hero (``may_proceed_without_hero``).
        missed: ``"skip"``, ``"latest"`` or ``"all"`` (R-SCHED-23).
        batch_size: Heroes per fan-out batch, each committed on its own.
    """

    name: str
    workflow_class: Any
    cron: str
    timezone: str
    heroes: Callable[[], Any] | None
    missed: str
    batch_size: int

    @property
    def zone(self) -> ZoneInfo:
        """The schedule's time zone."""
        return ZoneInfo(self.timezone)

    def fire_times_after(self, after: datetime, count: int) -> list[datetime]:
        """The next ``count`` fire times strictly after ``after`` (aware UTC).

        Args:
            after: An aware datetime.
            count: How many (>= 0).

        Returns:
            Aware UTC datetimes, ascending; one instant per fire (a wall-clock
            time that occurs twice fires once, a skipped one at the jump).
        """
        times = CronSim(self.cron, after.astimezone(self.zone))
        return [next(times).astimezone(UTC) for _ in range(count)]

    def due_times(
        self, after: datetime, until: datetime, limit: int
    ) -> tuple[list[datetime], bool]:
        """Fire times in ``(after, until]``, latest first, at most ``limit``.

        Walks backwards from ``until``, so the cost is bounded by ``limit``
        whatever the downtime was (R-SCHED-23).

        Returns:
            ``(times, more)``: aware UTC datetimes, newest first, and whether
            older ones in the range were left out.
        """
        # CronSim's reverse walk is strict: start one microsecond after `until`.
        start = (until + timedelta(microseconds=1)).astimezone(self.zone)
        times = CronSim(self.cron, start, reverse=True)
        found: list[datetime] = []
        for local in times:
            moment = local.astimezone(UTC)
            if moment <= after:
                return found, False
            if len(found) == limit:
                return found, True
            found.append(moment)
        return found, False  # pragma: no cover - cron times never run out


def define_schedule(
    name: Any,
    workflow_class: Any,
    *,
    cron: Any,
    timezone: Any = "UTC",
    heroes: Any = None,
    missed: Any = "skip",
    batch_size: Any = DEFAULT_BATCH_SIZE,
) -> Schedule:
    """Validate a schedule's declaration and return it (R-SCHED-01, R-SCHED-02).

    The workflow class itself is checked by the extension (it must be one of
    its declared classes); here only that it is a class.

    Args:
        name: A non-empty str of at most 255 characters, without control
            characters or surrounding whitespace.
        workflow_class: The workflow class to create.
        cron: A cron expression cronsim accepts.
        timezone: An IANA time zone name (``"Europe/Berlin"``); default UTC.
        heroes: A callable, or None for a class with
            ``may_proceed_without_hero``.
        missed: One of :data:`MISSED_POLICIES`.
        batch_size: Heroes per batch, an int from 1 to 10,000.

    Raises:
        GenevaConfigurationError: Any of these is invalid; the message names the
            schedule, the value and what is allowed.
    """
    label = _name_problem(name)
    if label is not None:
        raise GenevaConfigurationError(label)
    where = f"schedule {name!r}"
    if not isinstance(workflow_class, type):
        raise GenevaConfigurationError(
            f"{where}: the workflow class must be a class declared with "
            f"`class MyWorkflow(geneva.Workflow)`, got {workflow_class!r}"
        )
    if not isinstance(cron, str) or not cron.strip():
        raise GenevaConfigurationError(
            f"{where}: cron must be a cron expression such as '0 9 * * MON', "
            f"got {cron!r}"
        )
    zone = _zone(where, timezone)
    try:
        next(CronSim(cron, datetime(2000, 1, 1, tzinfo=zone)))
    except (CronSimError, ValueError, StopIteration) as error:
        raise GenevaConfigurationError(
            f"{where}: invalid cron expression {cron!r}: {error} (five fields: "
            "minute hour day-of-month month day-of-week, e.g. '0 9 * * MON')"
        ) from None
    if missed not in MISSED_POLICIES:
        raise GenevaConfigurationError(
            f"{where}: missed must be one of "
            f"{', '.join(map(repr, MISSED_POLICIES))}, got {missed!r}"
        )
    if heroes is not None and not callable(heroes):
        raise GenevaConfigurationError(
            f"{where}: heroes must be a callable returning the heroes (one hero, "
            f"an iterable or a query) or None, got {heroes!r}"
        )
    if heroes is None and not getattr(workflow_class, "may_proceed_without_hero", 0):
        raise GenevaConfigurationError(
            f"{where}: heroes is None, but {workflow_class.__name__} needs a hero: "
            "pass heroes=<a callable returning the heroes>, or set "
            f"may_proceed_without_hero = True on {workflow_class.__name__}"
        )
    if (
        not isinstance(batch_size, int)
        or isinstance(batch_size, bool)
        or not 1 <= batch_size <= MAX_BATCH_SIZE
    ):
        raise GenevaConfigurationError(
            f"{where}: batch_size must be an int from 1 to {MAX_BATCH_SIZE}, "
            f"got {batch_size!r}"
        )
    return Schedule(
        name=name,
        workflow_class=workflow_class,
        cron=cron,
        timezone=zone.key,
        heroes=heroes,
        missed=missed,
        batch_size=batch_size,
    )


def late_tolerance(dispatch_interval: timedelta) -> timedelta:
    """How late a fire time may be noticed and still count as on time (R-SCHED-23).

    Twice the dispatch interval, at least one minute.
    """
    return max(2 * dispatch_interval, timedelta(minutes=1))


def _name_problem(name: Any) -> str | None:
    if not isinstance(name, str) or not name:
        return f"a schedule name must be a non-empty str, got {name!r}"
    if len(name) > MAX_SCHEDULE_NAME_LENGTH:
        return (
            f"schedule name {name[:40]!r}... is {len(name)} characters long; at "
            f"most {MAX_SCHEDULE_NAME_LENGTH} are allowed"
        )
    if name != name.strip() or any(not ch.isprintable() for ch in name):
        return (
            f"schedule name {name!r} has surrounding whitespace or control "
            "characters; use printable text"
        )
    return None


def _zone(where: str, timezone: Any) -> ZoneInfo:
    if not isinstance(timezone, str) or not timezone:
        raise GenevaConfigurationError(
            f"{where}: timezone must be an IANA time zone name such as "
            f"'Europe/Berlin' or 'UTC', got {timezone!r}"
        )
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise GenevaConfigurationError(
            f"{where}: unknown time zone {timezone!r}: use an IANA name such as "
            "'Europe/Berlin', 'America/New_York' or 'UTC' (zoneinfo; on systems "
            "without time zone data install the tzdata package)"
        ) from None

"""Lay out a workflow's step executions as a server-rendered SVG chart (R-ADM-12).

Pure code: no Flask, no database. :func:`layout` turns the executions a detail page
has already loaded into a :class:`TimelineChart`: pixel positions and plain-text
strings. ``templates/geneva/admin/_timeline_chart.html`` draws it with Jinja, which
escapes every stored string, such as step names and error classes (R-ADM-06).
Colours come from CSS classes in ``static/geneva/geneva.css``, and no stored value
ends up in a ``style`` attribute.

This module holds the chart's parts and :func:`layout`, which assembles them; the
geometry (spans, segments, ticks, label room) is in
:mod:`~flask_geneva.admin.timeline_geometry`, the time arithmetic and time texts
in :mod:`~flask_geneva.admin.timeline_time`.

How the chart reads:

* **One lane per execution**, in the order given. The detail page passes its
  ``created_at`` order, so lane *n* is row *n* of the execution table. A workflow
  has at most one active execution at a time, so a lane per *step* would put
  reattempts and resumable-chain links side by side on one line. There, the
  minimum-width bars of short executions would cover each other. With a lane per
  execution, each one stays visible and hoverable.
* Each bar runs from ``scheduled_for`` to ``started_at`` (**waiting**, drawn pale)
  and on to the end time (**running**, drawn solid). The end time is the first
  recorded of ``finished_at``, ``completed_at``, ``failed_at``, ``canceled_at`` or
  ``skipped_at``. A ``scheduled`` or ``in_progress`` execution without an end time
  ends at :func:`flask_geneva.core.clock.now`. A ``scheduled`` execution that is not yet
  due is a minimum-width marker at ``scheduled_for``.
* **Idle gaps are compressed.** Take the union of all bars; a gap between two of its
  parts that is longer than ``max(min_idle_gap, idle_ratio * busy time)`` becomes a
  fixed-width break labelled like ``"3 d 4 h idle"``. Between breaks, time is linear:
  durations inside one segment keep their proportions. So a 3-day wait between two
  40 ms steps no longer squeezes those steps to nothing.
* Zero-length bars get :data:`MIN_BAR_WIDTH`. Axis ticks are UTC, at round UTC
  multiples (midnight for days).
* With more than :data:`LABELLED_ROWS_MAX` executions, lanes shrink and lose their
  text labels, which keeps a 1000-execution chart small. Each bar keeps its
  ``<title>`` tooltip.

Naive datetimes are read as UTC. The model's ``UTCDateTime`` columns always return
aware UTC values; stand-in objects and raw rows might not.

.. versionadded:: 0.1
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable
from collections.abc import Mapping
from datetime import datetime
from datetime import timedelta
from typing import Any

from flask_geneva.admin.timeline_geometry import BREAK_WIDTH
from flask_geneva.admin.timeline_geometry import MIN_BAR_WIDTH
from flask_geneva.admin.timeline_geometry import SEGMENT_PAD
from flask_geneva.admin.timeline_geometry import Label
from flask_geneva.admin.timeline_geometry import Span
from flask_geneva.admin.timeline_geometry import bar_parts
from flask_geneva.admin.timeline_geometry import place_labels
from flask_geneva.admin.timeline_geometry import place_segments
from flask_geneva.admin.timeline_geometry import span_of
from flask_geneva.admin.timeline_geometry import split_segments
from flask_geneva.admin.timeline_geometry import tick_marks
from flask_geneva.admin.timeline_time import D_US
from flask_geneva.admin.timeline_time import MIN_US
from flask_geneva.admin.timeline_time import ONE_US
from flask_geneva.admin.timeline_time import format_span
from flask_geneva.admin.timeline_time import from_us
from flask_geneva.admin.timeline_time import px
from flask_geneva.admin.timeline_time import stamp
from flask_geneva.admin.timeline_time import to_us
from flask_geneva.core import clock

__all__ = [
    "BREAK_WIDTH",
    "LABELLED_ROWS_MAX",
    "MIN_BAR_WIDTH",
    "Bar",
    "Break",
    "Label",
    "TimelineChart",
    "format_span",
    "layout",
]

#: Drawing width of the chart (the SVG viewBox; CSS scales it down to fit).
WIDTH = 960
#: Up to this many executions, each lane is labelled with its step name.
LABELLED_ROWS_MAX = 40
#: Below this width, breaks are drawn as one path with one tooltip (a smaller SVG).
NARROW_BREAK_WIDTH = 8.0
#: A gap is compressed when longer than this and than ``IDLE_RATIO`` * busy time.
MIN_IDLE_GAP = timedelta(seconds=1)
IDLE_RATIO = 0.25

_GUTTER_LABELLED = 160.0
_GUTTER_COMPACT = 8.0
_RIGHT_PAD = 12.0
_HEADER_BASELINE = 12.0  # segment start times
_AXIS_Y = 34.0  # the axis line; tick and idle-gap labels sit just above it
_LANE_LABELLED = 22.0
_BAR_LABELLED = 14.0
_BOTTOM_PAD = 6.0
_LABEL_CHARS = 24
_STATE_CLASSES = frozenset(
    ("scheduled", "in_progress", "completed", "failed", "canceled", "skipped")
)


def _state_class(execution: Any, error_class: str | None) -> str:
    """The bar's CSS class: its state, or what a "completed" one amounts to."""
    state = str(execution.state)
    outcome = getattr(execution, "outcome", None)
    if state == "completed" and outcome == "recovered":
        return "recovered"
    if state == "completed" and outcome == "reattempted" and error_class:
        return "reattempted"
    return state if state in _STATE_CLASSES else "other"


@dataclasses.dataclass(frozen=True)
class Bar:
    """One execution's bar: a waiting part and a running part (pixels).

    ``wait`` and ``run`` are ``(x, width)`` or None when the part is not drawn
    (not started yet: no ``run``; started on time: no ``wait``). ``state_class`` is
    the stored state when it is one of the six known states, else ``"other"``;
    a completed execution that raised and was reattempted is ``"reattempted"``
    and one recovered after a lost worker ``"recovered"``, never the
    completed colour (R-ADM-121, R-ADM-125). It is safe to use as a CSS class.
    ``title`` and ``label`` are plain text, so the template must escape them.
    """

    execution_id: Any
    y: float
    height: float
    state_class: str
    title: str
    label: str
    wait: tuple[float, float] | None
    run: tuple[float, float] | None
    is_ongoing: bool

    @property
    def x(self) -> float:
        """Left edge of the whole bar."""
        part = self.wait or self.run
        return part[0] if part is not None else 0.0

    @property
    def label_y(self) -> float:
        """Baseline of the lane label."""
        return px(self.y + self.height - 3)

    @property
    def right(self) -> float:
        """Right edge of the whole bar."""
        part = self.run or self.wait
        return part[0] + part[1] if part is not None else 0.0


@dataclasses.dataclass(frozen=True)
class Break:
    """A compressed idle gap: a fixed-width column with a label such as ``"3 d idle"``.

    ``label`` (centred at ``label_x`` on the axis row) is ``""`` when there is no
    room to print it; ``title`` (the tooltip) always names the duration and both
    ends (aware UTC ``starts_at``/``ends_at``).
    """

    x: float
    width: float
    starts_at: datetime
    ends_at: datetime
    label: str
    label_x: float

    @property
    def duration(self) -> timedelta:
        """Length of the idle gap."""
        return self.ends_at - self.starts_at

    @property
    def title(self) -> str:
        """Tooltip text: ``"3 d 4 h idle: 2024-05-01 12:00:00.045 UTC → …"``."""
        start, end = to_us(self.starts_at), to_us(self.ends_at)
        idle = format_span(self.duration)
        return f"{idle} idle: {stamp(start)} UTC → {stamp(end)} UTC"


@dataclasses.dataclass(frozen=True)
class TimelineChart:
    """The laid-out chart: everything the template needs, in SVG user units (px).

    The plot area is ``plot_left..plot_right`` by ``plot_top..plot_bottom``. The
    axis is on top, at ``axis_y``, so it stays in view above a long chart.
    ``ticks`` are its marks (``text`` is ``""`` for an unlabelled tick).
    ``segment_starts`` are the full UTC start times printed above each segment.
    ``now_x`` is the position of "now" when an execution is still running or
    waiting, else None.

    When the breaks are narrower than :data:`NARROW_BREAK_WIDTH` (very many gaps),
    ``gap_path`` is the SVG path data of all of them and ``gap_summary`` their one
    tooltip; otherwise ``gap_path`` is ``""`` and each break is drawn with its own.
    """

    width: float
    height: float
    plot_left: float
    plot_right: float
    plot_top: float
    plot_bottom: float
    axis_y: float
    is_labelled: bool
    bars: tuple[Bar, ...]
    breaks: tuple[Break, ...]
    ticks: tuple[Label, ...]
    segment_starts: tuple[Label, ...]
    now_x: float | None
    now_title: str
    summary: str
    gap_path: str = ""
    gap_summary: str = ""

    @property
    def gap_height(self) -> float:
        """Height of the idle-gap columns (from the axis to the plot bottom)."""
        return px(self.plot_bottom - self.axis_y)

    @property
    def header_y(self) -> float:
        """Baseline of the segment start times."""
        return _HEADER_BASELINE

    @property
    def label_y(self) -> float:
        """Baseline of the tick and idle-gap labels."""
        return self.axis_y - 6


# -- tooltips -----------------------------------------------------------------------


def _title(execution: Any, span: Span, now: int, error_class: str) -> str:
    """The tooltip: id, step, state (outcome), then the times, UTC."""
    head = f"#{execution.id} {execution.step_name}: {execution.state}"
    if getattr(execution, "outcome", None):
        head += f" ({execution.outcome})"
    day = span.scheduled // D_US

    def when(value: int) -> str:  # the date only when it differs from scheduled_for
        return stamp(value, date=value // D_US != day)

    lines = [head, f"scheduled for {stamp(span.scheduled)} UTC"]
    if span.is_future:
        lines.append(f"due in {format_span((span.scheduled - now) * ONE_US)}")
    elif span.started is None and span.is_ongoing:
        lines.append(f"not started, waiting {format_span((now - span.start) * ONE_US)}")
    elif span.started is None:
        lines.append(f"never started, ended {when(span.end)}")
    else:
        started = f"started {when(span.started)}"
        if span.started > span.scheduled:
            started += (
                f", waited {format_span((span.started - span.scheduled) * ONE_US)}"
            )
        lines.append(started)
        ran = format_span((span.end - span.started) * ONE_US)
        if span.is_ongoing:
            lines.append(f"running for {ran} (until now)")
        elif span.has_end:
            lines.append(f"ended {when(span.end)}, ran {ran}")
        else:
            lines.append("no end time recorded")
    if error_class:
        lines.append(f"error {error_class}")
    return "\n".join(lines)


# -- layout -------------------------------------------------------------------------


def layout(
    executions: Iterable[Any],
    *,
    now: datetime | None = None,
    error_classes: Mapping[Any, str] | None = None,
    width: float = WIDTH,
    min_idle_gap: timedelta = MIN_IDLE_GAP,
    idle_ratio: float = IDLE_RATIO,
) -> TimelineChart | None:
    """Lay out ``executions`` on a time axis with long idle gaps compressed (R-ADM-12).

    Args:
        executions: Step executions (ORM rows, or objects with the same attributes:
            ``id``, ``step_name``, ``state``, ``scheduled_for``, ``started_at``, the
            end-time columns, optional ``outcome``), drawn one lane each in this
            order. Aware or naive datetimes; naive ones are read as UTC.
        now: End of the bars of executions still waiting or running; default
            :func:`flask_geneva.core.clock.now`.
        error_classes: Error class name per execution id, added to the tooltips.
        width: Drawing width in px.
        min_idle_gap: Gaps between bars shorter than this are never compressed.
        idle_ratio: Gaps up to this fraction of the busy (non-idle) time are not
            compressed either.

    Returns:
        The chart, or None when there are no executions (nothing to draw).

    .. versionadded:: 0.1
    """
    rows = list(executions)
    if not rows:
        return None
    now_us = to_us(now if now is not None else clock.now())
    errors = error_classes or {}
    spans = [span_of(execution, now_us) for execution in rows]
    segments, gaps = split_segments(spans, min_idle_gap, idle_ratio)

    is_labelled = len(rows) <= LABELLED_ROWS_MAX
    left = _GUTTER_LABELLED if is_labelled else _GUTTER_COMPACT
    right = width - _RIGHT_PAD
    break_width = place_segments(segments, len(gaps), left, right)
    if is_labelled:
        pitch, bar_height = _LANE_LABELLED, _BAR_LABELLED
    else:
        pitch = max(2.0, min(12.0, 1200 / len(rows)))
        bar_height = pitch - 1 if pitch >= 4 else pitch
    top = _AXIS_Y + 4
    bottom = top + pitch * len(rows) + (4 if is_labelled else 2)
    starts = [segment.start for segment in segments]

    def x_of(value: int) -> float:
        return segments[bisect.bisect_right(starts, value) - 1].x_of(value)

    bars = []
    for lane, (execution, span) in enumerate(zip(rows, spans, strict=True)):
        wait, run = bar_parts(span, x_of, right)
        name = str(execution.step_name)
        label = ""
        if is_labelled:
            label = (
                name if len(name) <= _LABEL_CHARS else name[: _LABEL_CHARS - 1] + "…"
            )
        bars.append(
            Bar(
                execution_id=execution.id,
                y=px(top + lane * pitch + (pitch - bar_height) / 2),
                height=px(bar_height),
                state_class=_state_class(execution, errors.get(execution.id)),
                title=_title(execution, span, now_us, errors.get(execution.id, "")),
                label=label,
                wait=(px(wait[0]), px(wait[1])) if wait else None,
                run=(px(run[0]), px(run[1])) if run else None,
                is_ongoing=span.is_ongoing,
            )
        )

    # Idle-gap labels first, then the ticks that still fit on the same row.
    row: list[tuple[float, float]] = []
    gap_xs = [segment.x + segment.width for segment in segments[:-1]]
    gap_labels = place_labels(
        (
            (x + break_width / 2, f"{format_span((end - start) * ONE_US)} idle")
            for x, (start, end) in zip(gap_xs, gaps, strict=True)
        )
        if break_width >= NARROW_BREAK_WIDTH  # else no room: tooltips only
        else ((x, "") for x in gap_xs),
        row,
        width=width,
        centred=True,
    )
    breaks = [
        Break(
            px(x),
            px(break_width),
            from_us(start),
            from_us(end),
            label.text,
            label.text_x,
        )
        for x, (start, end), label in zip(gap_xs, gaps, gap_labels, strict=True)
    ]
    ticks = place_labels(tick_marks(segments), row, width=width, centred=True)

    headers = []
    for segment in segments:
        short = segment.end - segment.start < MIN_US
        text = (
            stamp(segment.start)
            if short
            else from_us(segment.start).strftime("%Y-%m-%d %H:%M:%S")
        )
        headers.append((segment.x + SEGMENT_PAD, f"{text} UTC"))

    gap_path = gap_summary = ""
    if breaks and break_width < NARROW_BREAK_WIDTH:
        height = px(bottom - _AXIS_Y)
        gap_path = "".join(
            f"M{item.x} {px(_AXIS_Y)}h{item.width}v{height}h-{item.width}z"
            for item in breaks
        )
        shortest = min(item.duration for item in breaks)
        longest = max(item.duration for item in breaks)
        each = format_span(shortest)
        if format_span(longest) != each:
            each += f" to {format_span(longest)}"
        gap_summary = f"{len(breaks)} idle gaps compressed, {each} each"

    ongoing = any(span.is_ongoing for span in spans)
    gap_count = len(gaps)
    summary = f"{len(rows)} execution{'s' if len(rows) != 1 else ''}"
    if gap_count:
        summary += f"; {gap_count} idle gap{'s' if gap_count != 1 else ''} compressed"
    return TimelineChart(
        width=px(width),
        height=px(bottom + _BOTTOM_PAD),
        plot_left=px(left),
        plot_right=px(right),
        plot_top=px(top),
        plot_bottom=px(bottom),
        axis_y=_AXIS_Y,
        is_labelled=is_labelled,
        bars=tuple(bars),
        breaks=tuple(breaks),
        ticks=tuple(ticks),
        segment_starts=tuple(
            label
            for label in place_labels(headers, [], width=width, centred=False)
            if label.text
        ),
        now_x=px(x_of(now_us)) if ongoing else None,
        now_title=f"now: {stamp(now_us)} UTC",
        summary=summary,
        gap_path=gap_path,
        gap_summary=gap_summary,
    )

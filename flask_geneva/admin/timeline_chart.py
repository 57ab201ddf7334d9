"""Lay out a workflow's step executions as a server-rendered SVG chart (R-ADM-12).

Pure code: no Flask, no database. :func:`layout` turns the executions a detail page
has already loaded into a :class:`TimelineChart`: pixel positions and plain-text
strings. ``templates/geneva/admin/_timeline_chart.html`` draws it with Jinja, which
escapes every stored string, such as step names and error classes (R-ADM-06).
Colours come from CSS classes in ``static/geneva/geneva.css``, and no stored value
ends up in a ``style`` attribute.

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
  ends at :func:`flask_geneva.clock.now`. A ``scheduled`` execution that is not yet
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
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

from flask_geneva import clock

__all__ = [
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
#: Narrowest drawn bar, in px: zero-length executions stay visible.
MIN_BAR_WIDTH = 3.0
#: Width of a compressed idle gap, in px (less when there are very many).
BREAK_WIDTH = 72.0
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
_SEGMENT_PAD = 4.0
_MIN_SEGMENT_WIDTH = 24.0
_TICK_SPACING = 90.0
_CHAR_WIDTH = 6.0  # rough width of one 10 px character, to keep labels apart
_LABEL_CHARS = 24

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAIVE_EPOCH = _EPOCH.replace(tzinfo=None)
_US = timedelta(microseconds=1)
_MS = 1_000
_S = 1_000_000
_MIN = 60 * _S
_H = 60 * _MIN
_D = 24 * _H
_NICE_STEPS = (
    *(n * _MS for n in (1, 2, 5, 10, 20, 50, 100, 200, 500)),
    *(n * _S for n in (1, 2, 5, 10, 15, 30)),
    *(n * _MIN for n in (1, 2, 5, 10, 15, 30)),
    *(n * _H for n in (1, 2, 3, 6, 12)),
    *(n * _D for n in (1, 2, 7)),
)
_END_COLUMNS = ("finished_at", "completed_at", "failed_at", "canceled_at", "skipped_at")
_ACTIVE_STATES = ("scheduled", "in_progress")
_STATE_CLASSES = frozenset(
    ("scheduled", "in_progress", "completed", "failed", "canceled", "skipped")
)


@dataclasses.dataclass(frozen=True)
class Bar:
    """One execution's bar: a waiting part and a running part (pixels).

    ``wait`` and ``run`` are ``(x, width)`` or None when the part is not drawn
    (not started yet: no ``run``; started on time: no ``wait``). ``state_class`` is
    the stored state when it is one of the six known states, else ``"other"``. It is
    safe to use as a CSS class. ``title`` and ``label`` are plain text, so the
    template must escape them.
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
        return _px(self.y + self.height - 3)

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
        start, end = _to_us(self.starts_at), _to_us(self.ends_at)
        idle = format_span(self.duration)
        return f"{idle} idle: {_stamp(start)} UTC → {_stamp(end)} UTC"


@dataclasses.dataclass(frozen=True)
class Label:
    """A mark at ``x`` with its text at ``text_x`` (``""``: no room for the text).

    ``text_x`` differs from ``x`` only where a centred text was nudged to stay
    inside the drawing.
    """

    x: float
    text: str
    text_x: float


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
        return _px(self.plot_bottom - self.axis_y)

    @property
    def header_y(self) -> float:
        """Baseline of the segment start times."""
        return _HEADER_BASELINE

    @property
    def label_y(self) -> float:
        """Baseline of the tick and idle-gap labels."""
        return self.axis_y - 6


# -- time helpers -------------------------------------------------------------------


def _to_us(value: datetime) -> int:
    """Microseconds since the epoch; a naive datetime is taken as UTC."""
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // _US


def _from_us(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def _optional_us(execution: Any, name: str) -> int | None:
    value = getattr(execution, name, None)
    return _to_us(value) if isinstance(value, datetime) else None


def format_span(span: timedelta) -> str:
    """Write a duration with its two largest units: ``"3 d 4 h"``, ``"40 ms"``.

    The smaller unit is rounded, and the result moves up a unit when rounding
    reaches it (23 h 59.9 min is ``"1 d"``). Below a second the unit is ms. Below
    a minute it is seconds with one decimal (``"1.5 s"``). Above that it is two
    whole units, with the smaller one left out when it is zero (``"5 min"``,
    ``"2 h 30 min"``). Negative spans are written as zero.
    """
    us = max(span // _US, 0)
    for big, big_name, small, small_name in (
        (_D, "d", _H, "h"),
        (_H, "h", _MIN, "min"),
        (_MIN, "min", _S, "s"),
    ):
        rounded = (us + small // 2) // small * small
        if rounded >= big:
            whole, rest = divmod(rounded, big)
            part = rest // small
            if part:
                return f"{whole} {big_name} {part} {small_name}"
            return f"{whole} {big_name}"
    seconds = round(us / _S, 1)
    if seconds >= 1:
        return f"{seconds:g} s"
    return f"{round(us / _MS)} ms"


def _stamp(value: int, *, date: bool = True) -> str:
    """``2024-05-01 12:00:00.123`` (``date=False``: ``12:00:00.123``), UTC."""
    # isoformat() of a naive value: several times faster than strftime() per bar.
    moment = _NAIVE_EPOCH + timedelta(microseconds=value)
    text = moment.isoformat(" ", "milliseconds")
    return text if date else text[11:]


def _tick_text(value: int, step: int) -> str:
    moment = _from_us(value)
    if step >= _D or (value % _D == 0 and step >= _MIN):
        return moment.strftime("%Y-%m-%d")
    if step >= _MIN:
        return moment.strftime("%H:%M")
    if step >= _S:
        return moment.strftime("%H:%M:%S")
    return moment.strftime("%H:%M:%S.%f")[:-3]


def _px(value: float) -> float:
    """Round to 0.1 px; whole numbers print without ``.0`` (a smaller SVG)."""
    rounded = round(float(value), 1)
    return int(rounded) if rounded.is_integer() else rounded


# -- spans --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Span:
    scheduled: int
    started: int | None
    start: int
    end: int
    is_ongoing: bool
    is_future: bool
    has_end: bool


def _span(execution: Any, now: int) -> _Span:
    started = _optional_us(execution, "started_at")
    end = None
    for name in _END_COLUMNS:
        end = _optional_us(execution, name)
        if end is not None:
            break
    scheduled = _optional_us(execution, "scheduled_for")
    if scheduled is None:  # NOT NULL in the table; a stand-in may lack it
        scheduled = (
            started if started is not None else (end if end is not None else now)
        )
    start = scheduled if started is None else min(scheduled, started)
    active = str(execution.state) in _ACTIVE_STATES
    is_ongoing = is_future = False
    has_end = end is not None
    if end is None:
        if active and start > now:
            is_future = True
            end = start
        elif active:
            is_ongoing = True
            end = now
        else:  # a finished state without any end time: show a zero-length run
            end = started if started is not None else start
    end = max(end, start, started if started is not None else start)
    return _Span(scheduled, started, start, end, is_ongoing, is_future, has_end)


def _title(execution: Any, span: _Span, now: int, error_class: str) -> str:
    """The tooltip: id, step, state (outcome), then the times, UTC."""
    head = f"#{execution.id} {execution.step_name}: {execution.state}"
    if getattr(execution, "outcome", None):
        head += f" ({execution.outcome})"
    day = span.scheduled // _D

    def when(value: int) -> str:  # the date only when it differs from scheduled_for
        return _stamp(value, date=value // _D != day)

    lines = [head, f"scheduled for {_stamp(span.scheduled)} UTC"]
    if span.is_future:
        lines.append(f"due in {format_span((span.scheduled - now) * _US)}")
    elif span.started is None and span.is_ongoing:
        lines.append(f"not started, waiting {format_span((now - span.start) * _US)}")
    elif span.started is None:
        lines.append(f"never started, ended {when(span.end)}")
    else:
        started = f"started {when(span.started)}"
        if span.started > span.scheduled:
            started += f", waited {format_span((span.started - span.scheduled) * _US)}"
        lines.append(started)
        ran = format_span((span.end - span.started) * _US)
        if span.is_ongoing:
            lines.append(f"running for {ran} (until now)")
        elif span.has_end:
            lines.append(f"ended {when(span.end)}, ran {ran}")
        else:
            lines.append("no end time recorded")
    if error_class:
        lines.append(f"error {error_class}")
    return "\n".join(lines)


# -- segments -----------------------------------------------------------------------


@dataclasses.dataclass
class _Segment:
    start: int
    end: int
    x: float = 0.0
    width: float = 0.0

    def x_of(self, value: int) -> float:
        inner = self.width - 2 * _SEGMENT_PAD
        duration = self.end - self.start
        if duration <= 0:
            return self.x + _SEGMENT_PAD
        return self.x + _SEGMENT_PAD + inner * (value - self.start) / duration


def _segments(
    spans: list[_Span], min_idle_gap: timedelta, idle_ratio: float
) -> tuple[list[_Segment], list[tuple[int, int]]]:
    """Split time into linear segments and compressed gaps ``(gap_start, gap_end)``."""
    clusters: list[list[int]] = []
    for start, end in sorted((span.start, span.end) for span in spans):
        if clusters and start <= clusters[-1][1]:
            clusters[-1][1] = max(clusters[-1][1], end)
        else:
            clusters.append([start, end])
    busy = sum(end - start for start, end in clusters)
    threshold = max(min_idle_gap // _US, idle_ratio * busy)
    segments = [_Segment(*clusters[0])]
    gaps = []
    for start, end in clusters[1:]:
        if start - segments[-1].end > threshold:
            gaps.append((segments[-1].end, start))
            segments.append(_Segment(start, end))
        else:
            segments[-1].end = end
    return segments, gaps


def _place_segments(
    segments: list[_Segment], gap_count: int, left: float, right: float
) -> float:
    """Set each segment's ``x``/``width``; return the width of one break."""
    plot = right - left
    break_width = min(BREAK_WIDTH, 0.3 * plot / gap_count) if gap_count else 0.0
    available = plot - gap_count * break_width
    minimum = min(_MIN_SEGMENT_WIDTH, 0.5 * available / len(segments))
    spare = available - minimum * len(segments)
    total = sum(segment.end - segment.start for segment in segments)
    x = left
    for segment in segments:
        share = (segment.end - segment.start) / total if total else 1 / len(segments)
        segment.x = x
        segment.width = minimum + spare * share
        x += segment.width + break_width
    return break_width


def _nice_step(duration: int, count: int) -> int:
    wanted = duration / count
    for step in _NICE_STEPS:
        if step >= wanted:
            return step
    return -(-int(wanted) // _D) * _D


def _ticks(segments: list[_Segment]) -> list[tuple[float, str]]:
    ticks: list[tuple[float, str]] = []
    for segment in segments:
        duration = segment.end - segment.start
        if duration <= 0:
            continue
        inner = segment.width - 2 * _SEGMENT_PAD
        count = int(inner // _TICK_SPACING)
        if count < 1:
            continue
        step = _nice_step(duration, count)
        value = -(-segment.start // step) * step
        while value <= segment.end:
            ticks.append((segment.x_of(value), _tick_text(value, step)))
            value += step
    return ticks


def _place(
    items: Iterable[tuple[float, str]],
    occupied: list[tuple[float, float]],
    *,
    width: float,
    centred: bool,
) -> list[Label]:
    """Give each ``(x, text)`` room on one text row, or blank its text.

    ``occupied`` holds the ``(start, end)`` spans already taken on that row (it
    grows). Centred texts are nudged to stay inside ``0..width``.
    """
    labels = []
    for x, text in items:
        size = len(text) * _CHAR_WIDTH
        middle = min(max(x, size / 2), width - size / 2) if centred else x
        start = middle - size / 2 if centred else x
        end = start + size
        fits = bool(text) and end <= width
        if fits and all(end + 6 <= a or start >= b + 6 for a, b in occupied):
            occupied.append((start, end))
            labels.append(Label(_px(x), text, _px(middle)))
        else:
            labels.append(Label(_px(x), "", _px(middle)))
    return labels


def _parts(
    span: _Span, x_of: Any, right: float
) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """``(wait, run)`` as ``(x, width)``; the last part is at least MIN_BAR_WIDTH."""
    x_start = x_of(span.start)
    x_end = x_of(span.end)
    if span.started is None:
        width = max(x_end - x_start, MIN_BAR_WIDTH)
        shift = min(right - (x_start + width), 0.0)  # keep it inside the plot
        return (x_start + shift, width), None
    x_started = x_of(span.started)
    width = max(x_end - x_started, MIN_BAR_WIDTH)
    shift = min(right - (x_started + width), 0.0)
    run = (x_started + shift, width)
    if x_started - x_start < 0.5:  # no visible wait: started on time
        return None, run
    return (x_start + shift, x_started - x_start), run


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
            :func:`flask_geneva.clock.now`.
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
    now_us = _to_us(now if now is not None else clock.now())
    errors = error_classes or {}
    spans = [_span(execution, now_us) for execution in rows]
    segments, gaps = _segments(spans, min_idle_gap, idle_ratio)

    is_labelled = len(rows) <= LABELLED_ROWS_MAX
    left = _GUTTER_LABELLED if is_labelled else _GUTTER_COMPACT
    right = width - _RIGHT_PAD
    break_width = _place_segments(segments, len(gaps), left, right)
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
        wait, run = _parts(span, x_of, right)
        state = str(execution.state)
        name = str(execution.step_name)
        label = ""
        if is_labelled:
            label = (
                name if len(name) <= _LABEL_CHARS else name[: _LABEL_CHARS - 1] + "…"
            )
        bars.append(
            Bar(
                execution_id=execution.id,
                y=_px(top + lane * pitch + (pitch - bar_height) / 2),
                height=_px(bar_height),
                state_class=state if state in _STATE_CLASSES else "other",
                title=_title(execution, span, now_us, errors.get(execution.id, "")),
                label=label,
                wait=(_px(wait[0]), _px(wait[1])) if wait else None,
                run=(_px(run[0]), _px(run[1])) if run else None,
                is_ongoing=span.is_ongoing,
            )
        )

    # Idle-gap labels first, then the ticks that still fit on the same row.
    row: list[tuple[float, float]] = []
    gap_xs = [segment.x + segment.width for segment in segments[:-1]]
    gap_labels = _place(
        (
            (x + break_width / 2, f"{format_span((end - start) * _US)} idle")
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
            _px(x),
            _px(break_width),
            _from_us(start),
            _from_us(end),
            label.text,
            label.text_x,
        )
        for x, (start, end), label in zip(gap_xs, gaps, gap_labels, strict=True)
    ]
    ticks = _place(_ticks(segments), row, width=width, centred=True)

    headers = []
    for segment in segments:
        short = segment.end - segment.start < _MIN
        text = (
            _stamp(segment.start)
            if short
            else _from_us(segment.start).strftime("%Y-%m-%d %H:%M:%S")
        )
        headers.append((segment.x + _SEGMENT_PAD, f"{text} UTC"))

    gap_path = gap_summary = ""
    if breaks and break_width < NARROW_BREAK_WIDTH:
        height = _px(bottom - _AXIS_Y)
        gap_path = "".join(
            f"M{item.x} {_px(_AXIS_Y)}h{item.width}v{height}h-{item.width}z"
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
        width=_px(width),
        height=_px(bottom + _BOTTOM_PAD),
        plot_left=_px(left),
        plot_right=_px(right),
        plot_top=_px(top),
        plot_bottom=_px(bottom),
        axis_y=_AXIS_Y,
        is_labelled=is_labelled,
        bars=tuple(bars),
        breaks=tuple(breaks),
        ticks=tuple(ticks),
        segment_starts=tuple(
            label
            for label in _place(headers, [], width=width, centred=False)
            if label.text
        ),
        now_x=_px(x_of(now_us)) if ongoing else None,
        now_title=f"now: {_stamp(now_us)} UTC",
        summary=summary,
        gap_path=gap_path,
        gap_summary=gap_summary,
    )

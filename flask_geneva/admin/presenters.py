"""Turn stored records into display values for the admin templates (R-ADM-12, R-PDR).

Pure functions: no Flask, no database. Every function accepts whatever JSON shape
is stored (or garbage) and returns plain strings/dicts; the templates escape them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from flask_geneva.core.durations import format_interval
from flask_geneva.policies.matchers import describe_matcher

__all__ = [
    "CURSOR_PREVIEW_BYTES",
    "NO_REPORTER",
    "describe_policy",
    "describe_policy_decision",
    "describe_policy_list",
    "format_duration",
    "format_interval",
    "format_time",
    "pretty_json",
    "recovery_sentence",
    "wait_in_words",
]

#: Cursor values longer than this are truncated with an expand control (R-ADM-12).
CURSOR_PREVIEW_BYTES = 2048

_SOURCES = {
    "step": "step policy",
    "step_list": "step policy",
    "class_specific": "class-level policy",
    "class_blanket": "class-level blanket policy",
    "default": "default policy",
}


def _seconds(value: Any) -> str:
    seconds = float(value)
    if seconds.is_integer():
        return f"{int(seconds)} s"
    return f"{seconds:.3g} s"


def wait_in_words(value: Any) -> str:
    """A wait in seconds as words: ``"30 s"``, ``"1 min 12 s"``, ``"2 h 5 min"``.

    Below a minute the seconds keep up to three significant digits; from a
    minute on they are rounded to whole seconds and zero parts are left out
    (R-PDR-07).
    """
    seconds = float(value)
    if seconds < 60:
        return _seconds(seconds)
    rest = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        amount, rest = divmod(rest, size)
        if amount:
            parts.append(f"{amount} {unit}")
    if rest:
        parts.append(f"{rest} s")
    return " ".join(parts)


def describe_policy_decision(decision: Any) -> str:
    """Write a policy decision record (R-PDR-01) as one sentence.

    Example: ``"reattempt 3 of 5 in 30 s — class-level policy for TimeoutError —
    not reported (terminal_only)"``; a wait computed by a backoff strategy names
    it: ``"reattempt 3 of 10 in 1 min 12 s (exponential backoff) — ..."``
    (R-PDR-07). Unknown or malformed records give a sentence
    that says so instead of raising.

    Args:
        decision: The stored ``"policy_decision"`` metadata value (any shape).

    Returns:
        The sentence (plain text, not escaped).
    """
    if not isinstance(decision, Mapping):
        return f"unreadable policy decision: {decision!r}"
    try:
        action = str(decision.get("action") or "unknown action")
        if action == "reattempt":
            count = decision.get("consecutive_reattempts")
            cap = decision.get("max_reattempts")
            head = "reattempt"
            if count is not None:
                # The count is of the reattempts before this one (R-CNT-01): the
                # reattempt this decision schedules is number count + 1.
                head += f" {int(count) + 1}"
                if cap is not None:
                    head += f" of {int(cap)}"
            wait = decision.get("wait_seconds")
            head += f" in {wait_in_words(wait)}" if wait else " at once"
            backoff = decision.get("backoff")
            if backoff:
                head += f" ({backoff})"
        else:
            head = action
        if decision.get("terminal"):
            head += " (terminal)"
        source = decision.get("source")
        where = _SOURCES.get(str(source), f"{source} policy")
        index = decision.get("index")
        if index is not None and source in ("step_list", "class_specific"):
            where += f" #{int(index) + 1}"
        matched_by = decision.get("matched_by")
        if matched_by:
            where += f" for {matched_by}"
        handler = decision.get("handler")
        if handler:
            where += f", handled by {handler}"
        report = decision.get("report")
        if decision.get("reported"):
            reported = f"reported ({report})" if report else "reported"
        elif _asked_for_report(report, decision.get("terminal")):
            # The mode asked for a report and none was made: the record's
            # ``reported`` is true iff a reporter was configured then (R-PDR-01).
            reported = f"{NO_REPORTER} (report: {report})"
        else:
            reported = f"not reported ({report})" if report else "not reported"
        if decision.get("wait_error"):
            head += f" (the reattempt wait failed: {decision['wait_error']})"
        if decision.get("report_error"):
            reported += f"; the reporter failed: {decision['report_error']}"
        return f"{head} — {where} — {reported}"
    except (TypeError, ValueError) as error:
        return f"unreadable policy decision ({error}): {dict(decision)!r}"


_REPORTS = {
    "always": "reported",
    "never": "not reported",
    "terminal_only": "reported when terminal",
}

#: What the plan and the decisions say when no ``GENEVA_ERROR_REPORTER`` is
#: set: one wording for both, so they never disagree (R-ADM-123).
NO_REPORTER = "not reported: no error reporter is configured"


def _asked_for_report(report: Any, terminal: Any) -> bool:
    """Whether a decision's report mode asked for a report (R-REP-01)."""
    return report == "always" or (report == "terminal_only" and bool(terminal))


def describe_policy(policy: Any, *, reporter_configured: bool = True) -> str:
    """Write an exception policy (R-POL-01) in words for the step plan (R-ADM-43).

    The words of :func:`describe_policy_decision`, for the rule instead of one
    decision. Example: ``"reattempt up to 2 times, 30 s apart, then pause — for
    BrowserTimeout — reported"``. Anything that is not a policy gives its text.
    Without a reporter, a policy whose mode reports says
    :data:`NO_REPORTER` and its mode, as the decisions it makes do (R-ADM-123).

    Args:
        policy: An :class:`~flask_geneva.policies.exception_policy.ExceptionPolicy`.
        reporter_configured: Whether the app has a ``GENEVA_ERROR_REPORTER``.

    Returns:
        The sentence (plain text, not escaped).
    """
    try:
        if policy.handler is not None:
            head = f"handled by {policy.handler_name}"
        else:
            head = str(policy.action.value)
            if head == "reattempt":
                cap = policy.max_reattempts
                head += f" up to {cap} time{'s' if cap != 1 else ''}" if cap else ""
                wait = policy.wait.total_seconds() if policy.wait else 0
                head += f", {_seconds(wait)} apart" if wait else ", at once"
                head += f", then {policy.terminal_action.value}"
        matchers = [describe_matcher(m) for m in policy.matchers]
        where = f"for {', '.join(matchers)}" if matchers else "for any error"
        report = str(policy.report)
        if not reporter_configured and report != "never":
            reported = f"{NO_REPORTER} (report: {report})"
        else:
            reported = _REPORTS.get(report, f"report {report}")
        return f"{head} — {where} — {reported}"
    except (AttributeError, TypeError, ValueError):
        return str(policy)


def describe_policy_list(
    policies: Any, *, reporter_configured: bool = True
) -> list[str]:
    """:func:`describe_policy` of each policy of a policy or policy list, in order."""
    return [
        describe_policy(policy, reporter_configured=reporter_configured)
        for policy in getattr(policies, "policies", ())
    ]


def format_duration(start: datetime | None, end: datetime | None) -> str:
    """Return ``end - start`` as ``"1.23 s"``, or ``""`` when either is missing."""
    if start is None or end is None:
        return ""
    return _seconds(round((end - start).total_seconds(), 3))


def format_time(value: datetime | None) -> str:
    """ISO-like UTC timestamp for tables, or ``""``."""
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else ""


def recorded_exception(meta: Any) -> Mapping[str, Any]:
    """The ``"exception"`` entry of an execution's metadata (R-SE-20/21), or ``{}``.

    Holds ``class``, ``message`` and ``backtrace`` when the executor recorded an
    error; anything else (no metadata, unparsable metadata) reads as empty.
    """
    exception = meta.get("exception") if isinstance(meta, Mapping) else None
    return exception if isinstance(exception, Mapping) else {}


_CAUSES = {
    "worker_lost": "its worker was lost",
    "stuck": "it was in progress and no worker is recorded for it (presumed lost)",
    "timeout": "it ran past its step timeout and its worker stopped",
}


def recovery_sentence(execution: Any, meta: Any) -> str:
    """Why an execution with the outcome ``recovered`` was recovered (R-ADM-125).

    Read from the metadata's ``recovery`` record (R-HK-29): who recovered it
    (housekeeping, the dispatcher, an operator with actor and via) and the
    cause. A row without the record (recovered before it was written, or a
    scheduled execution, which records nothing) is explained by its columns:
    never started means its job was lost; started means it was in progress
    when recovery found it stuck.

    Args:
        execution: The step execution (``outcome``, ``state``, ``started_at``).
        meta: Its metadata (any shape).

    Returns:
        The sentence, e.g. ``"Recovered by housekeeping: its worker was lost;
        the step's outcome was never recorded (it may have run in part or in
        full)."``, or ``""`` when the outcome is not ``recovered``.
    """
    if getattr(execution, "outcome", None) != "recovered":
        return ""
    record = meta.get("recovery") if isinstance(meta, Mapping) else None
    if isinstance(record, Mapping):
        by = str(record.get("by") or "recovery")
        if by == "dispatcher":
            by = "the dispatcher"
        elif by == "operator":
            actor = record.get("actor") or "an operator"
            via = record.get("via")
            by = f"{actor} via {via}" if via else str(actor)
        cause = record.get("cause")
        why = _CAUSES.get(str(cause), f"cause {cause!r}")
        return (
            f"Recovered by {by}: {why}; the step's outcome was never recorded "
            "(it may have run in part or in full)."
        )
    if getattr(execution, "started_at", None) is None:
        return (
            "Recovered: it was scheduled and never started (its job was lost or "
            "never sent, so housekeeping found it overdue); no reason is recorded."
        )
    return (
        "Recovered: it was in progress when recovery found it stuck (its worker "
        "presumed lost); the step's outcome was never recorded and no reason is "
        "recorded."
    )


def pretty_json(value: Any) -> str:
    """Indent a JSON value for display; non-JSON values fall back to ``repr``."""
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)

"""``GENEVA_*`` settings: defaults, validation, and the frozen config object (SPEC §13).

Settings are validated at ``init_app`` (R-CFG-02): :func:`config_from_mapping`
validates every ``GENEVA_*`` key into a frozen :class:`GenevaConfig`, which the
extension keeps on ``app.extensions["geneva"]`` and every reader uses. Invalid
values raise :class:`~flask_geneva.exceptions.GenevaConfigurationError` from
``init_app`` (R-CFG-01). A later change to ``app.config`` is validated the same
way and applied at the start of the next geneva operation (or at once by
``geneva.reload_settings(app)``); :func:`settings_snapshot` is what the change
is detected against.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from flask_geneva.core.admin_settings import AdminConfig
from flask_geneva.core.admin_settings import admin_config_from_mapping
from flask_geneva.core.priority_mappers import priority_mapper_value
from flask_geneva.core.setting_descriptions import SETTING_DESCRIPTIONS
from flask_geneva.core.setting_values import bool_value
from flask_geneva.core.setting_values import callable_or_none
from flask_geneva.core.setting_values import choice_value
from flask_geneva.core.setting_values import duration_value
from flask_geneva.core.setting_values import import_string
from flask_geneva.core.setting_values import non_negative_int
from flask_geneva.core.setting_values import positive_int
from flask_geneva.core.stored_names import QUEUE_NAME_RULE
from flask_geneva.core.stored_names import queue_name_problem
from flask_geneva.exceptions import GenevaConfigurationError

__all__ = [
    "DEFAULTS",
    "RERAISE_ALWAYS",
    "RERAISE_MODES",
    "RERAISE_UNHANDLED",
    "SETTING_DESCRIPTIONS",
    "AdminConfig",
    "GenevaConfig",
    "admin_config_from_mapping",
    "config_from_mapping",
    "import_string",
    "setting_problems",
    "settings_snapshot",
    "unknown_setting_messages",
]

#: Sentinel default of ``GENEVA_ENQUEUE_AFTER_COMMIT``: ``not app.testing`` (R-TXN-01).
NOT_TESTING = "not app.testing"

#: Every setting with its default. ``init_app`` applies them with ``setdefault``.
DEFAULTS: dict[str, Any] = {
    "GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER": timedelta(days=30),
    "GENEVA_STUCK_IN_PROGRESS_THRESHOLD": timedelta(hours=1),
    "GENEVA_STUCK_SCHEDULED_THRESHOLD": timedelta(minutes=15),
    "GENEVA_HOUSEKEEPING_BATCH_SIZE": 1000,
    "GENEVA_STUCK_RECOVERY_ACTION": "reattempt",
    "GENEVA_RECOVER_GRACE": timedelta(seconds=60),
    "GENEVA_WORKER_HEARTBEAT_INTERVAL": timedelta(seconds=15),
    "GENEVA_WORKER_DEAD_AFTER": timedelta(seconds=60),
    "GENEVA_HEARTBEAT_TIMEOUT": timedelta(seconds=5),
    "GENEVA_CONNECTION_TIMEOUT": timedelta(seconds=10),
    "GENEVA_RELEASE_SPREAD": timedelta(seconds=5),
    "GENEVA_MAX_CURSOR_SIZE": 131072,
    "GENEVA_ENQUEUE_AFTER_COMMIT": NOT_TESTING,
    "GENEVA_DEFAULT_QUEUE": None,
    "GENEVA_ERROR_REPORTER": None,
    "GENEVA_METRICS": None,
    "GENEVA_PRIORITY_MAPPER": None,
    "GENEVA_MAX_BROKER_DELAY": timedelta(minutes=10),
    "GENEVA_DISPATCH_INTERVAL": timedelta(seconds=30),
    "GENEVA_HOUSEKEEPING_INTERVAL": timedelta(minutes=30),
    "GENEVA_CLOCK_SKEW_TOLERANCE": timedelta(seconds=1),
    "GENEVA_PUBLISH_TIMEOUT": timedelta(seconds=5),
    "GENEVA_FIND_ATTEMPTS": 5,
    "GENEVA_FIND_DELAY": 0.1,
    "GENEVA_TASK_BACKEND": "celery",
    "GENEVA_ALLOW_EAGER": False,
    "GENEVA_TASK_RERAISE": "unhandled",
    "GENEVA_INLINE_CONTINUATION_BUDGET": timedelta(seconds=1),
    "GENEVA_INLINE_CONTINUATION_MAX_STEPS": 100,
    "GENEVA_SQLITE_BEGIN_IMMEDIATE": True,
    "GENEVA_MYSQL_READ_COMMITTED": True,
    "GENEVA_MAX_SIGNAL_PAYLOAD_SIZE": 131072,
    "GENEVA_MAX_RESULT_SIZE": 131072,
    "GENEVA_MAX_PENDING_SIGNALS_PER_WORKFLOW": 1000,
    "GENEVA_SIGNAL_WAIT_WARN_AFTER": timedelta(days=1),
    "GENEVA_STEP_TIMEOUT_GRACE": timedelta(seconds=30),
    "GENEVA_ADMIN_ENABLED": False,
    "GENEVA_ADMIN_URL": "/geneva",
    "GENEVA_ADMIN_ACCESS": None,
    "GENEVA_ADMIN_CAN_ACT": None,
    "GENEVA_ADMIN_ACTOR": None,
    "GENEVA_ADMIN_PAUSED_RATIO_WARN": 0.05,
    "GENEVA_ADMIN_REFRESH_SECONDS": 10,
    "GENEVA_ADMIN_CURRENT_ROLE": None,
    "GENEVA_ADMIN_AUTHORIZE": None,
}

#: Re-raise only exceptions that end in a pause, a cancel or a terminal result.
RERAISE_UNHANDLED = "unhandled"
#: Re-raise every policy-handled exception (R-EXE-50 before the amendment).
RERAISE_ALWAYS = "always"
#: The allowed values of ``GENEVA_TASK_RERAISE``, the default first.
RERAISE_MODES = (RERAISE_UNHANDLED, RERAISE_ALWAYS)


def settings_snapshot(mapping: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """Return ``(key, value)`` of every known setting present in ``mapping``.

    The extension keeps this next to the frozen settings to notice a later
    change of ``app.config`` (R-CFG-02).

    Args:
        mapping: Usually ``app.config`` after ``init_app`` applied the defaults.

    Returns:
        Pairs in :data:`DEFAULTS` order.
    """
    return tuple((key, mapping[key]) for key in DEFAULTS if key in mapping)


_TASK_BACKENDS = ("celery", "recording")
_RECOVERY_ACTIONS = ("reattempt", "cancel")


@dataclasses.dataclass(frozen=True)
class GenevaConfig:
    """Validated ``GENEVA_*`` settings, built at ``init_app`` (R-CFG-02).

    Durations are ``timedelta``; other quantities carry their unit in the field
    name (``find_delay_seconds``, ``max_cursor_size_bytes``). SPEC §13 and the
    settings reference give each meaning. Frozen: assigning a field raises
    ``dataclasses.FrozenInstanceError``. A change of ``app.config`` builds a new
    object at the next geneva operation (or at ``geneva.reload_settings(app)``),
    which replaces this one as a whole.
    """

    delete_completed_workflows_after: timedelta | None
    stuck_in_progress_threshold: timedelta
    stuck_scheduled_threshold: timedelta
    housekeeping_batch_size: int
    stuck_recovery_action: str
    #: ``workflow.recover()`` without ``force`` refuses an execution younger than
    #: this (R-HK-28).
    recover_grace: timedelta
    #: How often a registered worker heartbeats (R-WRK-03).
    worker_heartbeat_interval: timedelta
    #: Silence after which a worker is dead (R-WRK-05).
    worker_dead_after: timedelta
    #: Window over which bulk releases are spread; zero for none (R-SCH-20).
    release_spread: timedelta
    #: Largest serialized cursor in bytes, or None for no limit (R-CUR-10).
    max_cursor_size_bytes: int | None
    enqueue_after_commit: bool
    default_queue: str | None
    error_reporter: Callable[..., Any] | None
    metrics: Any
    #: The optional methods of ``metrics`` besides ``gauge``, found once here:
    #: ``"increment"`` (counters) and ``"observe"`` (histograms); a hook without
    #: one is sent none of those metrics (R-OMET-02).
    metrics_methods: frozenset[str]
    priority_mapper: Callable[[int], int] | None
    max_broker_delay: timedelta
    dispatch_interval: timedelta
    #: How often the beat entry runs housekeeping; two of them without a run
    #: is a warning (R-HK-43).
    housekeeping_interval: timedelta
    clock_skew_tolerance: timedelta
    publish_timeout: timedelta
    find_attempts: int
    find_delay_seconds: float
    task_backend: str
    allow_eager: bool
    #: When the step task re-raises a handled exception (R-EXE-50 amended):
    #: ``"unhandled"`` or ``"always"``; see :mod:`flask_geneva.policies.task_failures`.
    task_reraise: str
    #: Time after which a step task claims no further step inline; zero for
    #: none (R-EXE-72).
    inline_continuation_budget: timedelta
    #: Most steps one step task runs inline, the delivered one included (R-EXE-72).
    inline_continuation_max_steps: int
    sqlite_begin_immediate: bool
    admin: AdminConfig
    #: Make MySQL/MariaDB engines READ COMMITTED at ``init_app`` (R-CFG-04).
    mysql_read_committed: bool = True
    #: Largest encoded workflow-signal payload in bytes, or None (R-WSIG-21).
    max_signal_payload_size_bytes: int | None = 131072
    #: Largest encoded workflow result in bytes, or None (R-CHD-01).
    max_result_size_bytes: int | None = 131072
    #: Most pending (unclaimed) workflow signals per workflow (R-WSIG-23).
    max_pending_signals_per_workflow: int = 1000
    #: A parked execution waiting longer than this is counted as a long signal
    #: wait (gauge and ``flask geneva status``, R-WSIG-65).
    signal_wait_warn_after: timedelta = timedelta(days=1)
    #: Time between a step's soft time limit (its ``timeout``) and Celery's hard
    #: one, which kills the worker process (R-STO-03).
    step_timeout_grace: timedelta = timedelta(seconds=30)
    #: Longest a step's ``heartbeat()`` (or a checkpoint's) waits for its write
    #: (R-FLT-31).
    heartbeat_timeout: timedelta = timedelta(seconds=5)
    #: How long a connection of the app's engines may stay silent (connecting,
    #: or waiting for an answer) before it is given up; None leaves the engines
    #: alone. Read at ``init_app`` (R-FLT-40).
    connection_timeout: timedelta | None = timedelta(seconds=10)


def unknown_setting_messages(mapping: Mapping[str, Any]) -> list[str]:
    """Describe each ``GENEVA_*`` key of ``mapping`` that is not a known setting.

    A misspelt setting (``GENEVA_FIND_ATEMPTS``) would otherwise be ignored in
    silence while its default applies. ``init_app`` logs each message as a
    warning.

    Returns:
        One message per unknown key, naming the closest known setting when there
        is one; ``[]`` when every key is known.
    """
    messages = []
    for key in mapping:
        if not key.startswith("GENEVA_") or key in DEFAULTS:
            continue
        # Compared without the shared prefix, which alone made GENEVA_FOOBAR
        # "close" to GENEVA_ADMIN_URL.
        close = difflib.get_close_matches(
            key.removeprefix("GENEVA_"),
            [known.removeprefix("GENEVA_") for known in DEFAULTS],
            n=1,
        )
        hint = f"; did you mean GENEVA_{close[0]}?" if close else ""
        messages.append(f"unknown flask_geneva setting {key}{hint}")
    return messages


def config_from_mapping(mapping: Mapping[str, Any], *, testing: bool) -> GenevaConfig:
    """Validate the ``GENEVA_*`` keys of ``mapping`` into a :class:`GenevaConfig`.

    Every setting is checked, so one error names every invalid value at once.

    Args:
        mapping: Usually ``app.config``; missing keys take :data:`DEFAULTS`.
        testing: ``app.testing``, for the default of ``GENEVA_ENQUEUE_AFTER_COMMIT``.

    Raises:
        GenevaConfigurationError: A value is invalid; the message names the key, the
            value and what is allowed (R-CFG-01), one numbered line per invalid
            setting when there are several (R-CFG-03).
    """
    config, problems = _validated(mapping, testing=testing)
    if config is None:
        raise GenevaConfigurationError(
            problems[0]
            if len(problems) == 1
            else "\n".join(
                [f"{len(problems)} invalid flask_geneva settings:"]
                + [f"  {index}. {text}" for index, text in enumerate(problems, 1)]
            )
        )
    return config


def setting_problems(mapping: Mapping[str, Any], *, testing: bool) -> list[str]:
    """Describe every invalid ``GENEVA_*`` value of ``mapping`` (R-CFG-01, R-CFG-03).

    ``init_app`` lists these together with the workflow classes' problems in one
    ``GenevaConfigurationError``.

    Args:
        mapping: Usually ``app.config``; missing keys take :data:`DEFAULTS`.
        testing: ``app.testing``.

    Returns:
        One message per invalid setting, naming the key, the value and what is
        allowed; ``[]`` when every setting is valid.
    """
    return _validated(mapping, testing=testing)[1]


def _validated(
    mapping: Mapping[str, Any], *, testing: bool
) -> tuple[GenevaConfig | None, list[str]]:
    """Validate every setting; the config (None if any is invalid) and the problems."""
    merged = {
        **DEFAULTS,
        **{k: v for k, v in mapping.items() if k.startswith("GENEVA_")},
    }
    problems: list[str] = []

    def take(validate: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return validate(*args, **kwargs)
        except GenevaConfigurationError as exc:
            problems.append(str(exc))
            return None

    find_delay = take(_find_delay, merged)
    fields = {
        "delete_completed_workflows_after": take(
            duration_value,
            merged,
            "GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER",
            allow_none=True,
        ),
        "stuck_in_progress_threshold": take(
            duration_value,
            merged,
            "GENEVA_STUCK_IN_PROGRESS_THRESHOLD",
            allow_none=False,
            positive=True,
        ),
        "stuck_scheduled_threshold": take(
            duration_value,
            merged,
            "GENEVA_STUCK_SCHEDULED_THRESHOLD",
            allow_none=False,
            positive=True,
        ),
        "housekeeping_batch_size": take(
            positive_int, merged, "GENEVA_HOUSEKEEPING_BATCH_SIZE"
        ),
        "stuck_recovery_action": take(
            choice_value, merged, "GENEVA_STUCK_RECOVERY_ACTION", _RECOVERY_ACTIONS
        ),
        "recover_grace": take(
            duration_value, merged, "GENEVA_RECOVER_GRACE", allow_none=False
        ),
        "worker_heartbeat_interval": take(
            duration_value,
            merged,
            "GENEVA_WORKER_HEARTBEAT_INTERVAL",
            allow_none=False,
            positive=True,
        ),
        "worker_dead_after": take(
            duration_value,
            merged,
            "GENEVA_WORKER_DEAD_AFTER",
            allow_none=False,
            positive=True,
        ),
        "release_spread": take(_release_spread, merged),
        "max_cursor_size_bytes": take(_max_cursor_size, merged),
        "enqueue_after_commit": take(_enqueue_after_commit, merged, testing),
        "default_queue": take(_default_queue, merged),
        "error_reporter": take(callable_or_none, merged, "GENEVA_ERROR_REPORTER"),
        "metrics": take(_metrics, merged),
        "metrics_methods": take(_metrics_methods, merged),
        "priority_mapper": take(
            priority_mapper_value, merged, "GENEVA_PRIORITY_MAPPER"
        ),
        "max_broker_delay": take(
            duration_value, merged, "GENEVA_MAX_BROKER_DELAY", allow_none=False
        ),
        "dispatch_interval": take(
            duration_value,
            merged,
            "GENEVA_DISPATCH_INTERVAL",
            allow_none=False,
            positive=True,
        ),
        "housekeeping_interval": take(
            duration_value,
            merged,
            "GENEVA_HOUSEKEEPING_INTERVAL",
            allow_none=False,
            positive=True,
        ),
        "clock_skew_tolerance": take(
            duration_value, merged, "GENEVA_CLOCK_SKEW_TOLERANCE", allow_none=False
        ),
        "publish_timeout": take(
            duration_value,
            merged,
            "GENEVA_PUBLISH_TIMEOUT",
            allow_none=False,
            positive=True,
        ),
        "find_attempts": take(positive_int, merged, "GENEVA_FIND_ATTEMPTS"),
        "find_delay_seconds": find_delay,
        "task_backend": take(
            choice_value, merged, "GENEVA_TASK_BACKEND", _TASK_BACKENDS
        ),
        "allow_eager": take(bool_value, merged, "GENEVA_ALLOW_EAGER"),
        "task_reraise": take(
            choice_value, merged, "GENEVA_TASK_RERAISE", RERAISE_MODES
        ),
        "inline_continuation_budget": take(_inline_budget, merged),
        "inline_continuation_max_steps": take(
            non_negative_int, merged, "GENEVA_INLINE_CONTINUATION_MAX_STEPS"
        ),
        "sqlite_begin_immediate": take(
            bool_value, merged, "GENEVA_SQLITE_BEGIN_IMMEDIATE"
        ),
        "mysql_read_committed": take(bool_value, merged, "GENEVA_MYSQL_READ_COMMITTED"),
        "admin": take(admin_config_from_mapping, merged),
        "max_signal_payload_size_bytes": take(_max_signal_payload_size, merged),
        "max_result_size_bytes": take(_max_result_size, merged),
        "max_pending_signals_per_workflow": take(
            positive_int, merged, "GENEVA_MAX_PENDING_SIGNALS_PER_WORKFLOW"
        ),
        "signal_wait_warn_after": take(
            duration_value,
            merged,
            "GENEVA_SIGNAL_WAIT_WARN_AFTER",
            allow_none=False,
            positive=True,
        ),
        "step_timeout_grace": take(_step_timeout_grace, merged),
        "heartbeat_timeout": take(
            duration_value,
            merged,
            "GENEVA_HEARTBEAT_TIMEOUT",
            allow_none=False,
            positive=True,
        ),
        "connection_timeout": take(_connection_timeout, merged),
    }
    interval, dead_after = (
        fields["worker_heartbeat_interval"],
        fields["worker_dead_after"],
    )
    if interval is not None and interval < MIN_HEARTBEAT_INTERVAL:
        problems.append(
            f"GENEVA_WORKER_HEARTBEAT_INTERVAL ({interval.total_seconds():g} s) must "
            f"be at least {MIN_HEARTBEAT_INTERVAL.total_seconds():g} s: every "
            "heartbeat is a database write (default 15 s)"
        )
    if interval is not None and dead_after is not None and dead_after < 2 * interval:
        problems.append(
            f"GENEVA_WORKER_DEAD_AFTER ({dead_after.total_seconds():g} s) must be at "
            f"least twice GENEVA_WORKER_HEARTBEAT_INTERVAL "
            f"({interval.total_seconds():g} s), i.e. at least "
            f"{2 * interval.total_seconds():g} s, so that one late heartbeat does "
            "not make a live worker dead"
        )
    heartbeat_timeout = fields["heartbeat_timeout"]
    if (
        heartbeat_timeout == DEFAULTS["GENEVA_HEARTBEAT_TIMEOUT"]
        and dead_after is not None
    ):
        # The default (init_app writes it into app.config) gives way to a
        # shorter dead-after (R-FLT-31).
        heartbeat_timeout = fields["heartbeat_timeout"] = min(
            heartbeat_timeout, dead_after
        )
    if (
        heartbeat_timeout is not None
        and dead_after is not None
        and heartbeat_timeout > dead_after
    ):
        problems.append(
            f"GENEVA_HEARTBEAT_TIMEOUT ({heartbeat_timeout.total_seconds():g} s) "
            f"must be at most GENEVA_WORKER_DEAD_AFTER "
            f"({dead_after.total_seconds():g} s): a step waiting longer for its "
            "heartbeat would look dead anyway (default 5 s)"
        )
    if problems:
        return None, problems
    return GenevaConfig(**fields), []


#: Smallest ``GENEVA_WORKER_HEARTBEAT_INTERVAL``: each heartbeat is a write (R-WRK-03).
MIN_HEARTBEAT_INTERVAL = timedelta(seconds=0.1)
#: Largest ``GENEVA_RELEASE_SPREAD``: a spread is a short window (R-SCH-20).
MAX_RELEASE_SPREAD = timedelta(hours=1)


def _release_spread(merged: Mapping[str, Any]) -> timedelta:
    key = "GENEVA_RELEASE_SPREAD"
    window: timedelta = duration_value(merged, key, allow_none=False)
    if window > MAX_RELEASE_SPREAD:
        raise GenevaConfigurationError(
            f"{key} must be at most 1 hour (a timedelta or seconds from 0 to 3600; "
            f"0 releases at once), got {merged[key]!r}"
        )
    return window


#: Largest ``GENEVA_STEP_TIMEOUT_GRACE`` (R-STO-03).
MAX_STEP_TIMEOUT_GRACE = timedelta(hours=1)


def _step_timeout_grace(merged: Mapping[str, Any]) -> timedelta:
    key = "GENEVA_STEP_TIMEOUT_GRACE"
    grace: timedelta = duration_value(merged, key, allow_none=False, positive=True)
    if grace > MAX_STEP_TIMEOUT_GRACE:
        raise GenevaConfigurationError(
            f"{key} must be at most 1 hour (a timedelta or seconds above 0, up to "
            f"3600), got {merged[key]!r}"
        )
    return grace


#: Bounds of ``GENEVA_CONNECTION_TIMEOUT`` (R-FLT-40).
MIN_CONNECTION_TIMEOUT = timedelta(seconds=1)
MAX_CONNECTION_TIMEOUT = timedelta(hours=1)


def _connection_timeout(merged: Mapping[str, Any]) -> timedelta | None:
    key = "GENEVA_CONNECTION_TIMEOUT"
    timeout: timedelta | None = duration_value(merged, key, allow_none=True)
    if timeout is not None and not (
        MIN_CONNECTION_TIMEOUT <= timeout <= MAX_CONNECTION_TIMEOUT
    ):
        raise GenevaConfigurationError(
            f"{key} must be None (leave the engines' connections as they are) or "
            f"from 1 second to 1 hour (a timedelta or seconds), got {merged[key]!r}"
        )
    return timeout


def _inline_budget(merged: Mapping[str, Any]) -> timedelta:
    key = "GENEVA_INLINE_CONTINUATION_BUDGET"
    budget: timedelta = duration_value(merged, key, allow_none=False)
    if budget > timedelta(hours=1):
        raise GenevaConfigurationError(
            f"{key} must be at most 1 hour (a timedelta or seconds from 0 to 3600; "
            f"0 turns inline continuation off), got {merged[key]!r}"
        )
    return budget


def _max_cursor_size(merged: Mapping[str, Any]) -> int | None:
    if merged["GENEVA_MAX_CURSOR_SIZE"] is None:
        return None
    return positive_int(merged, "GENEVA_MAX_CURSOR_SIZE")


def _max_signal_payload_size(merged: Mapping[str, Any]) -> int | None:
    if merged["GENEVA_MAX_SIGNAL_PAYLOAD_SIZE"] is None:
        return None
    return positive_int(merged, "GENEVA_MAX_SIGNAL_PAYLOAD_SIZE")


def _max_result_size(merged: Mapping[str, Any]) -> int | None:
    if merged["GENEVA_MAX_RESULT_SIZE"] is None:
        return None
    return positive_int(merged, "GENEVA_MAX_RESULT_SIZE")


def _enqueue_after_commit(merged: Mapping[str, Any], testing: bool) -> bool:
    if merged["GENEVA_ENQUEUE_AFTER_COMMIT"] == NOT_TESTING:
        return not testing
    return bool_value(merged, "GENEVA_ENQUEUE_AFTER_COMMIT")


def _default_queue(merged: Mapping[str, Any]) -> str | None:
    default_queue = merged["GENEVA_DEFAULT_QUEUE"]
    if default_queue is None:
        return None
    problem = queue_name_problem(default_queue)
    if problem is not None:
        raise GenevaConfigurationError(
            f"GENEVA_DEFAULT_QUEUE must be {QUEUE_NAME_RULE}, or None, got "
            f"{default_queue!r} ({type(default_queue).__name__}){problem}"
        )
    return str(default_queue)


def _metrics(merged: Mapping[str, Any]) -> Any:
    metrics = import_string(merged["GENEVA_METRICS"], setting="GENEVA_METRICS")
    if metrics is not None and not callable(getattr(metrics, "gauge", None)):
        raise GenevaConfigurationError(
            "GENEVA_METRICS must be None or an object with a "
            f"gauge(name, value, tags) method, got {metrics!r}"
        )
    return metrics


#: The hook's optional methods (R-OMET-02): counters and histograms.
METRICS_OPTIONAL_METHODS = ("increment", "observe")


def _metrics_methods(merged: Mapping[str, Any]) -> frozenset[str]:
    """The optional methods the ``GENEVA_METRICS`` hook has (R-OMET-02).

    Found once, at validation: a hook with ``gauge`` only (written before the
    counters existed) is sent gauges only, and no step pays an attribute lookup
    that fails. An attribute of that name that is not callable is refused.
    """
    try:
        metrics = _metrics(merged)
    except GenevaConfigurationError:
        return frozenset()  # reported once, by "metrics"
    if metrics is None:
        return frozenset()
    found = []
    for name in METRICS_OPTIONAL_METHODS:
        method = getattr(metrics, name, None)
        if method is None:
            continue
        if not callable(method):
            raise GenevaConfigurationError(
                f"GENEVA_METRICS.{name} must be a method {name}(name, value, tags) "
                f"or absent, got {method!r} ({type(method).__name__})"
            )
        found.append(name)
    return frozenset(found)


def _find_delay(merged: Mapping[str, Any]) -> float:
    find_delay = merged["GENEVA_FIND_DELAY"]
    if (
        isinstance(find_delay, bool)
        or not isinstance(find_delay, int | float)
        or find_delay < 0
    ):
        raise GenevaConfigurationError(
            "GENEVA_FIND_DELAY must be a non-negative number of seconds, "
            f"got {find_delay!r}"
        )
    return float(find_delay)

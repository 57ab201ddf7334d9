"""What each ``GENEVA_*`` setting means (R-CFG-01).

One sentence or two per setting, with its spec rule, for the generated settings
reference (``docs/reference/settings.md``) and ``flask geneva``'s help.
:mod:`flask_geneva.core.config` re-exports :data:`SETTING_DESCRIPTIONS` next to the
defaults; every key of :data:`flask_geneva.core.config.DEFAULTS` has an entry here
(``tests/test_reference_docs.py`` checks).
"""

from __future__ import annotations

__all__ = ["SETTING_DESCRIPTIONS"]

#: What each setting means, for the generated settings reference (docs) and
#: ``flask geneva``'s help. Every key of :data:`DEFAULTS` has one (a test checks).
SETTING_DESCRIPTIONS: dict[str, str] = {
    "GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER": (
        "Housekeeping deletes finished and canceled workflows (and their step "
        "executions) older than this; None keeps them (R-HK-10)."
    ),
    "GENEVA_STUCK_IN_PROGRESS_THRESHOLD": (
        "An `in_progress` step execution started longer ago than this is stuck; "
        "housekeeping recovers it (R-HK-20)."
    ),
    "GENEVA_STUCK_SCHEDULED_THRESHOLD": (
        "A `scheduled` step execution overdue by more than this is stuck; "
        "housekeeping publishes it again (R-HK-20)."
    ),
    "GENEVA_HOUSEKEEPING_BATCH_SIZE": (
        "Rows per batch for cleanup, recovery, dispatch and the admin's bulk actions."
    ),
    "GENEVA_STUCK_RECOVERY_ACTION": (
        'What recovery does with a stuck `in_progress` execution: `"reattempt"` '
        'or `"cancel"`. With `"cancel"`, a worker wrongly judged dead (a step '
        "holding the GIL longer than GENEVA_WORKER_DEAD_AFTER, a frozen "
        "process) gets its running workflow canceled: raise "
        "GENEVA_WORKER_DEAD_AFTER for such steps (R-HK-25, R-WRK-14)."
    ),
    "GENEVA_RECOVER_GRACE": (
        "`workflow.recover()` and `flask geneva recover` refuse, without force, "
        "a step execution that started less than this ago: its worker may "
        "still be running it (R-HK-28)."
    ),
    "GENEVA_RELEASE_SPREAD": (
        "Housekeeping's recovery and bulk resumes (admin, CLI with several ids) "
        "spread the executions they release over this window, each workflow at "
        "a deterministic offset, instead of releasing them all at once; 0 "
        "releases them at once; at most 1 hour (R-SCH-20)."
    ),
    "GENEVA_MAX_CURSOR_SIZE": (
        "Largest serialized cursor of a resumable step, in bytes; None disables "
        "the check (R-CUR-01)."
    ),
    "GENEVA_ENQUEUE_AFTER_COMMIT": (
        "Publish step tasks only after the outermost transaction commits "
        "(R-TXN-01); the default is on except in testing mode."
    ),
    "GENEVA_DEFAULT_QUEUE": (
        "Celery queue for step tasks without a `queue` job option; None uses "
        "Celery's default queue."
    ),
    "GENEVA_ERROR_REPORTER": (
        "Callable (or import path) that receives step errors, e.g. "
        "`flask_geneva.reporters.sentry:sentry_reporter`; None only logs them "
        "(R-REP-03)."
    ),
    "GENEVA_METRICS": (
        "Object (or import path) with a `gauge(name, value, tags)` method for the "
        "housekeeping gauges and, optionally, `increment(name, value, tags)` and "
        "`observe(name, value, tags)` for the counters and histograms per workflow "
        "class and step; None sends none (R-MET-06, R-OMET-01/02)."
    ),
    "GENEVA_PRIORITY_MAPPER": (
        "Turns the merged `priority` (an int, higher runs first) into the "
        'broker\'s before publication: `"rabbitmq"` clamps it to 0..9, '
        '`"redis"` sends `9 - clamp(priority, 0, 9)` (the Redis transport runs '
        "lower numbers sooner), or a callable `int -> int` (or its import path); "
        "None passes it unchanged (R-JOB-08, R-PRI-03)."
    ),
    "GENEVA_MAX_BROKER_DELAY": (
        "A step due further ahead than this is not sent to the broker; the "
        "dispatcher sends it when it comes due (R-DSP-01)."
    ),
    "GENEVA_WORKER_HEARTBEAT_INTERVAL": (
        "How often each registered worker process records that it is alive (R-WRK-03)."
    ),
    "GENEVA_WORKER_DEAD_AFTER": (
        "A worker without a heartbeat for this long, while another worker "
        "heartbeats, is dead: its in_progress executions are recovered whatever "
        "their age, at the next dispatcher run (R-WRK-06, R-WRK-12, R-WRK-14); "
        "at least twice GENEVA_WORKER_HEARTBEAT_INTERVAL. The default, four "
        "heartbeats, lets three in a row fail or come late. A step holding the "
        "GIL in one C call for longer looks dead: raise it for such steps. Also "
        "how long a database outage is waited out: a claim's retries by Celery "
        "and a finished body's finalize (R-FLT-02, R-FLT-10)."
    ),
    "GENEVA_HEARTBEAT_TIMEOUT": (
        "Longest a step's `self.heartbeat()` (or a checkpoint's heartbeat) waits "
        "for its write: the write runs on a connection of its own and, when the "
        "database does not answer in time (a network cut), the call logs a "
        "warning and returns False and the step goes on (R-FLT-31). At most "
        "GENEVA_WORKER_DEAD_AFTER; left at its default (5 s), it is "
        "GENEVA_WORKER_DEAD_AFTER when that is shorter."
    ),
    "GENEVA_CONNECTION_TIMEOUT": (
        "How long a connection of the app's engines may stay silent before it is "
        "given up: `init_app` gives each PostgreSQL engine (psycopg, psycopg2) "
        "these defaults for connect_timeout, tcp_user_timeout and TCP keepalives, "
        "and each MySQL/MariaDB engine its connect_timeout; values the engine "
        "sets itself win. So `create()`, a step's session and the heartbeat fail "
        "within seconds of a network cut instead of hanging (R-FLT-40..43). "
        "None leaves the engines alone. Read at `init_app`; 1 second to 1 hour."
    ),
    "GENEVA_DISPATCH_INTERVAL": (
        "How often the beat entry of `beat_schedule()` runs the dispatcher, which "
        "also recovers the executions of dead workers (R-DSP-02, R-WRK-12); with "
        "GENEVA_WORKER_DEAD_AFTER it bounds how late a killed worker's step runs "
        "again. A scheduled step due and unwritten for this long is published "
        "again, its message taken for lost (R-FLT-20). Two intervals without a "
        "recorded run is a warning (R-HK-43)."
    ),
    "GENEVA_HOUSEKEEPING_INTERVAL": (
        "How often the beat entry of `beat_schedule()` runs housekeeping (cleanup, "
        "recovery by age, gauges); two intervals without a recorded run is a "
        "warning (R-HK-43)."
    ),
    "GENEVA_CLOCK_SKEW_TOLERANCE": (
        "A step delivered earlier than this before its time does not run yet: "
        "it is published again for its time (R-EXE-18)."
    ),
    "GENEVA_PUBLISH_TIMEOUT": (
        "Upper bound on one publication to the broker after a commit; a failed or "
        "timed-out publication never raises: the row goes back to the dispatcher, "
        "and the process leaves the broker alone for this long (R-DSP-07)."
    ),
    "GENEVA_FIND_ATTEMPTS": (
        "How many times a worker looks for a step execution row that is not "
        "visible yet before giving up (R-JOB-20)."
    ),
    "GENEVA_FIND_DELAY": ("Seconds between those attempts (R-JOB-20)."),
    "GENEVA_TASK_BACKEND": (
        '`"celery"` sends step tasks to Celery; `"recording"` records them for '
        "tests (`geneva_jobs`, R-TH-20)."
    ),
    "GENEVA_ALLOW_EAGER": (
        "Allow Celery's `task_always_eager`; publications then run after the "
        "outermost commit, one at a time (R-TH-21)."
    ),
    "GENEVA_TASK_RERAISE": (
        'When the Celery task re-raises a step\'s exception: `"unhandled"` when '
        'the policy paused, canceled or gave up (or none handled it), `"always"` '
        "for every policy-handled exception (R-EXE-50)."
    ),
    "GENEVA_INLINE_CONTINUATION_BUDGET": (
        "A step task that completes its step may claim and run the next one "
        "itself when it is due now on the same queue and priority, until this "
        "much time has passed since the task began; 0 turns inline "
        "continuation off; at most 1 hour (R-EXE-70, R-EXE-72)."
    ),
    "GENEVA_INLINE_CONTINUATION_MAX_STEPS": (
        "Most steps one step task runs through inline continuation, the "
        "delivered one included; 0 (or 1) turns it off (R-EXE-72)."
    ),
    "GENEVA_SQLITE_BEGIN_IMMEDIATE": (
        "On SQLite engines, install WAL journaling, a busy timeout, foreign keys "
        "and `BEGIN IMMEDIATE` for geneva's writes; False leaves the engine alone."
    ),
    "GENEVA_MYSQL_READ_COMMITTED": (
        "On MySQL/MariaDB engines, make every connection READ COMMITTED (once per "
        "connection), so that an operator's locks on one workflow never block or "
        "deadlock another workflow's steps (InnoDB's REPEATABLE READ locks index "
        "gaps); an `isolation_level` the app chose is kept. False leaves the "
        "engine alone. An engine left REPEATABLE READ or SERIALIZABLE is logged "
        "as a warning at its first connection (R-CFG-04)."
    ),
    "GENEVA_MAX_SIGNAL_PAYLOAD_SIZE": (
        "Largest workflow-signal payload in bytes (compact UTF-8 JSON of the "
        "encoded payload); a larger one raises `SignalPayloadTooLargeError` "
        "before anything is written; None disables the check (R-WSIG-21)."
    ),
    "GENEVA_MAX_RESULT_SIZE": (
        "Largest workflow result in bytes (compact UTF-8 JSON of the encoded "
        "value); a larger one raises `ResultTooLargeError` before anything is "
        "written; None disables the check (R-CHD-01)."
    ),
    "GENEVA_MAX_PENDING_SIGNALS_PER_WORKFLOW": (
        "Most pending (unclaimed) workflow signals one workflow buffers; one "
        "more raises `SignalBufferFullError` (R-WSIG-23)."
    ),
    "GENEVA_SIGNAL_WAIT_WARN_AFTER": (
        "A step execution parked for a workflow signal longer than this counts "
        "as a long wait: the gauge `geneva_drive.signal_waits_long` and "
        "`flask geneva status` (R-WSIG-65)."
    ),
    "GENEVA_STEP_TIMEOUT_GRACE": (
        "Time between a step's `timeout` (Celery's soft time limit, which "
        "raises `StepTimeout` in the body) and Celery's hard time limit, which "
        "kills the worker process still running it; above 0, at most 1 hour "
        "(R-STO-03)."
    ),
    "GENEVA_ADMIN_ENABLED": (
        "Mount a dedicated Flask-Admin with the workflow views at "
        "`GENEVA_ADMIN_URL` from `init_app` (R-ADM-01)."
    ),
    "GENEVA_ADMIN_URL": (
        "URL prefix of that dedicated admin; starts with `/` (R-ADM-01)."
    ),
    "GENEVA_ADMIN_ACCESS": (
        "Callable `() -> bool` (or import path) deciding access per request; "
        "None denies every admin URL outside debug and testing mode (R-ADM-02)."
    ),
    "GENEVA_ADMIN_CAN_ACT": (
        "Callable `() -> bool` (or import path) deciding whether the buttons "
        "act; None follows `GENEVA_ADMIN_ACCESS` (R-ADM-03)."
    ),
    "GENEVA_ADMIN_ACTOR": (
        "Callable `() -> str | None` (or import path) naming the operator in the "
        "action log; None tries Flask-Login, then HTTP basic auth (R-ADM-04)."
    ),
    "GENEVA_ADMIN_PAUSED_RATIO_WARN": (
        "Share of paused workflows (0 to 1) above which the admin overview warns "
        "(R-ADM-10)."
    ),
    "GENEVA_ADMIN_REFRESH_SECONDS": (
        "Seconds between the admin's automatic refreshes of the overview, the lists "
        "and the workflow page; 0 turns auto-refresh off (R-ADM-49)."
    ),
    "GENEVA_ADMIN_CURRENT_ROLE": (
        "Callable `() -> str | None` (or import path) naming the current user's "
        "admin role, `viewer`, `operator` or `admin`; the role map decides every "
        "page and button, and None (no role) gets 403 (R-ADM-210, R-ADM-212)."
    ),
    "GENEVA_ADMIN_AUTHORIZE": (
        "Callable `(user, action, target) -> bool` (or import path) deciding "
        "each admin action, viewing included; instead of "
        "`GENEVA_ADMIN_CURRENT_ROLE` (R-ADM-211)."
    ),
}

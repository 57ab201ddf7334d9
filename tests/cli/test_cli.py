"""The operator CLI: ``flask geneva ...`` on ``tests.apps.cli_app``, in-process (one subprocess run).

Covers R-CLI-01/02, R-MIG-10 and the operator action record of R-PDR-05.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from datetime import timedelta
from pathlib import Path

import pytest

from flask_geneva.core import clock
from flask_geneva.testing import speedrun_workflow
from tests import conftest
from tests.apps.basic import db
from tests.apps.cli_app import CliOnboarding
from tests.apps.cli_app import create_app as create_cli_app
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row

REPO_ROOT = Path(__file__).resolve().parents[2]
COMMANDS = (
    "housekeeping",
    "status",
    "list",
    "show",
    "pause",
    "resume",
    "cancel",
    "skip",
    "recover",
    "signal",
    "limits",
)


@dataclass(frozen=True)
class CliResult:
    """What one ``flask geneva`` invocation printed and returned."""

    returncode: int
    stdout: str
    stderr: str


def _database_url(tmp_path: Path) -> str:
    return conftest.DATABASE_URL or f"sqlite:///{tmp_path / 'test.sqlite3'}"


@pytest.fixture
def geneva_cli(app, tmp_path):
    """Run ``flask geneva ARGS`` in-process against the test's database.

    Each call builds a fresh app with ``tests.apps.cli_app.create_app`` (as the
    ``flask --app tests.apps.cli_app`` command does) and invokes it through
    Flask's CLI runner, so the command has its own app context, session and
    settings. An exception the command did not turn into an exit status is
    re-raised: a traceback is never a passing "exit status 1".
    ``test_the_flask_command_runs_geneva_in_a_subprocess`` runs the real
    ``flask`` executable once.
    """

    def run(*args, actor="alice"):
        # The command's own session must see the test's rows (and, on SQLite,
        # find the write lock free).
        db.session.commit()
        environment = {
            "GENEVA_TEST_CLI_DATABASE_URL": _database_url(tmp_path),
            "GENEVA_ACTOR": actor,
        }
        with pytest.MonkeyPatch.context() as patch:
            for name, value in environment.items():
                patch.setenv(name, value)
            cli_app = create_cli_app()
        # Pushed here: with the test's own context current, Flask would run the
        # command in it instead of the command's app.
        with cli_app.app_context():
            try:
                result = cli_app.test_cli_runner().invoke(
                    args=["geneva", *args], env=environment
                )
            finally:
                db.session.remove()
                for engine in db.engines.values():
                    engine.dispose()
        if result.exception is not None and not isinstance(
            result.exception, SystemExit
        ):
            raise result.exception
        return CliResult(result.exit_code, result.stdout, result.stderr)

    return run


def assert_one_line_error(result, fragment):
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert fragment in lines[0]


def test_the_flask_command_runs_geneva_in_a_subprocess(app, tmp_path):
    """The installed ``flask`` executable finds the ``geneva`` group and runs a
    command against the database (R-CLI-01); the other tests run in-process.
    """
    CliOnboarding.create(hero=make_user("subprocess@example.com"))
    db.session.commit()
    environment = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "GENEVA_TEST_CLI_DATABASE_URL": _database_url(tmp_path),
        "PYTHONWARNINGS": "ignore",
    }
    environment.pop("FLASK_APP", None)
    result = subprocess.run(
        [
            *(sys.executable, "-m", "flask", "--app", "tests.apps.cli_app"),
            *("geneva", "status", "--json"),
        ],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["workflows"]["CliOnboarding"]["ready"] == 1


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(geneva_cli, command):
    """Every operator command documents itself under --help (R-CLI-01)."""
    result = geneva_cli(command, "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout
    assert len(result.stdout.splitlines()) > 3
    if command == "resume":
        assert "--rewind" in result.stdout


def test_housekeeping_prints_the_summary(geneva_cli, user):
    """`flask geneva housekeeping` runs a pass and prints every summary key (R-MIG-10)."""
    workflow = CliOnboarding.create(hero=user)
    execution_id = workflow.current_execution.id
    update_execution(execution_id, scheduled_for=clock.now() - timedelta(hours=2))
    result = geneva_cli("housekeeping")
    assert result.returncode == 0, result.stderr
    assert "stuck_scheduled_recovered: 1" in result.stdout
    assert "workflows_cleaned_up: 0" in result.stdout
    assert [r["outcome"] for r in execution_rows(workflow.id)] == ["recovered", None]


def test_status_json_counts_per_class_and_state(geneva_cli):
    """`status --json` gives per-class state counts, paused ratio and stuck counts
    (R-CLI-01, R-MET-01).
    """
    CliOnboarding.create(hero=make_user("a@example.com"))
    paused = CliOnboarding.create(hero=make_user("b@example.com"))
    paused.pause()
    result = geneva_cli("status", "--json")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["workflows"]["CliOnboarding"] == {
        "ready": 1,
        "performing": 0,
        "paused": 1,
        "finished": 0,
        "canceled": 0,
    }
    assert status["paused_ratio"]["CliOnboarding"] == 0.5
    assert status["totals"]["ready"] == 1
    assert status["stuck_in_progress"] == 0
    assert status["overdue_scheduled"] == 0
    # The worker registry (R-WRK-09): nothing registered in this test.
    assert status["workers"] == {
        "alive": 0,
        "dead": 0,
        "abandoned_executions": 0,
        "newest_heartbeat_age_seconds": None,
        "warning": None,
        "dead_after_warnings": [],
        "workers": [],
    }
    table = geneva_cli("status")
    assert table.returncode == 0
    assert "CliOnboarding" in table.stdout
    assert "0.500" in table.stdout
    assert "workers: 0 alive, 0 dead" in table.stdout


def test_status_table_shows_a_state_the_code_does_not_know(geneva_cli):
    """A row in a state outside the enum gets its own column; totals add up (R-CLI-01)."""
    from tests.support.workflow import update_workflow

    CliOnboarding.create(hero=make_user("a@example.com"))
    odd = CliOnboarding.create(hero=make_user("b@example.com"))
    update_workflow(odd.id, state="archived")
    table = geneva_cli("status")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    columns = header.split()
    assert columns[-2:] == ["archived", "paused_ratio"]
    total = next(row.split() for row in rows if row.startswith("(all)"))
    assert total[columns.index("archived")] == "1"
    assert total[columns.index("ready")] == "1"


def test_list_filters_by_state_class_and_hero(geneva_cli):
    """`list` filters by --state, --class and --hero TYPE#ID, the notation it prints (R-CLI-01, R-ADM-11)."""
    first_hero = make_user("one@example.com")
    first = CliOnboarding.create(hero=first_hero)
    second = CliOnboarding.create(hero=make_user("two@example.com"))
    second.pause()
    paused = geneva_cli("list", "--state", "paused")
    assert paused.returncode == 0, paused.stderr
    lines = paused.stdout.splitlines()
    assert len(lines) == 2
    assert lines[1].split()[0] == str(second.id)
    by_hero = geneva_cli(
        "list", "--class", "CliOnboarding", "--hero", f"User#{first_hero.id}"
    )
    listed = [line.split() for line in by_hero.stdout.splitlines()[1:]]
    assert [row[0] for row in listed] == [str(first.id)]
    printed_hero = listed[0][2]
    assert printed_hero == f"User#{first_hero.id}"
    again = geneva_cli("list", "--hero", printed_hero)
    assert [line.split()[0] for line in again.stdout.splitlines()[1:]] == [
        str(first.id)
    ]
    # The hero type in any case, as in the admin's search (R-ADM-50).
    lower = geneva_cli("list", "--hero", f"user#{first_hero.id}")
    assert [line.split()[0] for line in lower.stdout.splitlines()[1:]] == [
        str(first.id)
    ]
    assert_one_line_error(geneva_cli("list", "--state", "sleeping"), "unknown state")
    assert_one_line_error(geneva_cli("list", "--hero", "User"), "TYPE#ID")
    assert_one_line_error(
        geneva_cli("list", "--hero", f"User:{first_hero.id}"), "(e.g. User#7)"
    )


def test_show_prints_plan_and_timeline(geneva_cli, user, geneva_jobs):
    """`show ID` prints the header, the step plan and the execution timeline (R-CLI-01)."""
    workflow = CliOnboarding.create(hero=user)
    speedrun_workflow(workflow)
    result = geneva_cli("show", str(workflow.id))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"Workflow {workflow.id} (CliOnboarding)" in out
    assert "1. welcome: done" in out
    # The wait in words, as the admin's step plan prints it, not str(timedelta).
    assert "2. follow_up: done  (wait 1 h)" in out
    assert "1:00:00" not in out
    assert "3. sweep: done  (resumable)" in out
    assert "Timeline:" in out
    assert out.count("completed/success") == 3


def test_show_refuses_bad_and_unknown_ids_in_one_line(geneva_cli):
    """Bad or unknown ids give a one-line error and exit status 1 (R-CLI-01)."""
    assert_one_line_error(geneva_cli("show", "abc"), "invalid workflow id 'abc'")
    assert_one_line_error(geneva_cli("show", "987654"), "workflow 987654 not found")


def test_ids_beyond_64_bits_are_refused_and_the_rest_processed(geneva_cli):
    """Ids past 2**63 - 1 are invalid ids, not a crash; later ids still run (R-CLI-01/02)."""
    huge = str(2**63)
    assert_one_line_error(
        geneva_cli("show", "99999999999999999999999"),
        "invalid workflow id '99999999999999999999999': expected an integer from 1",
    )
    assert_one_line_error(
        geneva_cli("list", "--hero", f"User#{huge}"), f"invalid hero id '{huge}'"
    )
    workflow = CliOnboarding.create(hero=make_user("h@example.com"))
    result = geneva_cli("pause", huge, str(workflow.id))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"workflow {huge}: pause refused: invalid workflow id" in result.stderr
    assert workflow_row(workflow.id)["state"] == "paused"
    too_many = geneva_cli("list", "--limit", "99999999999999999999")
    assert too_many.returncode == 2
    assert "Traceback" not in too_many.stderr
    assert "1<=x<=100000" in too_many.stderr


def test_pause_records_the_operator_and_refuses_per_id(geneva_cli):
    """Each id is handled on its own: refused ids print the InvalidStateError message,
    the others are paused with an operator record via "cli"; exit status 1
    (R-CLI-02, R-PDR-05).
    """
    ready = CliOnboarding.create(hero=make_user("r@example.com"))
    finished = CliOnboarding.create(hero=make_user("f@example.com"))
    finished.cancel()
    result = geneva_cli("pause", str(finished.id), "nope", str(ready.id), "987654")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    errors = result.stderr.splitlines()
    assert len(errors) == 3
    assert "Cannot pause a canceled workflow" in errors[0]
    assert "invalid workflow id 'nope'" in errors[1]
    assert "workflow 987654 not found" in errors[2]
    row = workflow_row(ready.id)
    assert row["state"] == "paused"
    [record] = row["metadata"]["operator_actions"]
    assert record["action"] == "pause"
    assert record["via"] == "cli"
    assert record["actor"] == "alice"
    assert (record["from_state"], record["to_state"]) == ("ready", "paused")
    assert workflow_row(finished.id)["state"] == "canceled"
    # `show` prints the action's time to the second, like its other times, not
    # the stored ISO text with microseconds and offset (R-CLI-01, R-ADM-24).
    shown = geneva_cli("show", str(ready.id)).stdout
    stored = datetime.fromisoformat(record["at"])
    stamp = stored.isoformat(sep=" ", timespec="seconds")
    assert f"  {stamp} pause via cli by alice (ready -> paused)" in shown
    assert record["at"] not in shown


def test_resume_cancel_and_skip_succeed_with_exit_status_zero(geneva_cli):
    """resume [--rewind], cancel and skip apply the R-EXT operations and exit 0
    (R-CLI-01/02).
    """
    to_resume = CliOnboarding.create(hero=make_user("res@example.com"))
    to_resume.pause()
    to_cancel = CliOnboarding.create(hero=make_user("can@example.com"))
    to_skip = CliOnboarding.create(hero=make_user("skip@example.com"))
    resumed = geneva_cli("resume", "--rewind", str(to_resume.id), actor="bob")
    assert resumed.returncode == 0, resumed.stderr
    assert "state is ready" in resumed.stdout
    row = workflow_row(to_resume.id)
    assert row["state"] == "ready"
    actions = row["metadata"]["operator_actions"]
    assert [(a["action"], a["actor"]) for a in actions] == [
        ("pause", None),
        ("resume_rewind", "bob"),
    ]
    assert geneva_cli("cancel", str(to_cancel.id)).returncode == 0
    assert workflow_row(to_cancel.id)["state"] == "canceled"
    assert geneva_cli("skip", str(to_skip.id)).returncode == 0
    assert [(r["step_name"], r["state"]) for r in execution_rows(to_skip.id)] == [
        ("welcome", "skipped"),
        ("follow_up", "scheduled"),
    ]
    refused = geneva_cli("resume", str(to_cancel.id))
    assert_one_line_error(refused, "Cannot resume a canceled workflow")


def _drop_workflow_metadata_column():
    """Drop the optional workflows.metadata column (R-DM-30) for this test."""
    import sqlalchemy as sa

    from flask_geneva import reset_column_caches

    db.session.remove()
    quote = db.engine.dialect.identifier_preparer.quote
    with db.engine.begin() as connection:
        connection.execute(
            sa.text(
                f"ALTER TABLE {quote('geneva_drive_workflows')} "
                f"DROP COLUMN {quote('metadata')}"
            )
        )
    reset_column_caches()


def test_commands_work_without_the_workflow_metadata_column(geneva_cli):
    """list, show, status and pause work when the optional workflows.metadata column is missing (R-DM-30..34, R-CLI-01/02)."""
    import sqlalchemy as sa

    from flask_geneva import reset_column_caches

    kept = CliOnboarding.create(hero=make_user("kept@example.com")).id
    paused = CliOnboarding.create(hero=make_user("paused@example.com")).id
    db.session.commit()
    _drop_workflow_metadata_column()
    try:
        listed = geneva_cli("list")
        assert listed.returncode == 0, listed.stderr
        assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == [
            str(paused),
            str(kept),
        ]
        assert "ready" in listed.stdout
        shown = geneva_cli("show", str(kept))
        assert shown.returncode == 0, shown.stderr
        assert f"Workflow {kept} (CliOnboarding)" in shown.stdout
        status = geneva_cli("status")
        assert status.returncode == 0, status.stderr
        assert "CliOnboarding" in status.stdout
        result = geneva_cli("pause", str(paused))
        assert result.returncode == 0, result.stderr
        state = db.session.execute(
            sa.text("SELECT state FROM geneva_drive_workflows WHERE id = :id"),
            {"id": paused},
        ).scalar_one()
        assert state == "paused"
    finally:
        db.session.remove()
        conftest._server_schema_ready = False
        reset_column_caches()


def test_list_of_an_unknown_class_says_which_classes_are_registered(geneva_cli):
    """`list --class Onbording` printed only "no workflows", as if the class had
    none; the note now names the registered types. A type no class defines is
    still listed when rows carry it (a renamed class), so it is no error
    (R-CLI-01, R-EVO-07)."""
    CliOnboarding.create(hero=make_user("known@example.com"))
    result = geneva_cli("list", "--class", "CliOnbording")
    assert result.returncode == 0, result.stderr
    [line] = result.stdout.splitlines()
    assert line.startswith(
        "no workflows (no workflow class is registered for type 'CliOnbording'; "
        "registered: "
    )
    assert "CliOnboarding" in line
    known_but_empty = geneva_cli(
        "list", "--class", "CliOnboarding", "--state", "paused"
    )
    assert known_but_empty.stdout.splitlines() == ["no workflows"]
    update_workflow(
        CliOnboarding.create(hero=make_user("gone@example.com")).id, type="Gone"
    )
    gone = geneva_cli("list", "--class", "Gone")
    assert gone.stdout.splitlines()[1].split()[1] == "Gone"


def test_stored_control_characters_are_escaped_in_every_listing(geneva_cli, user):
    """Escape sequences in stored types, step names and error messages are printed as visible escapes by list, status and show, never sent to the terminal (R-CLI-01)."""
    from tests.support.workflow import update_workflow

    workflow = CliOnboarding.create(hero=user)
    execution_id = workflow.current_execution.id
    clear_screen = "\x1b[2J\x1b[Hall good\x07"
    update_execution(execution_id, error_message=f"boom {clear_screen}")
    update_workflow(workflow.id, next_step_name="welcome\x1b]0;retitled\x07")
    odd = CliOnboarding.create(hero=make_user("odd@example.com"))
    update_workflow(odd.id, type="Odd\x1b[31mRed\u202eTxt")

    listed = geneva_cli("list")
    status = geneva_cli("status")
    shown = geneva_cli("show", str(workflow.id))
    as_json = geneva_cli("status", "--json")
    for result in (listed, status, shown, as_json):
        assert result.returncode == 0, result.stderr
        assert "\x1b" not in result.stdout
        assert "\x07" not in result.stdout
        assert "\u202e" not in result.stdout
    assert "Odd\\x1b[31mRed\\u202eTxt" in listed.stdout
    assert "welcome\\x1b]0;retitled\\x07" in listed.stdout
    assert "Odd\\x1b[31mRed\\u202eTxt" in status.stdout
    assert "error: boom \\x1b[2J\\x1b[Hall good\\x07" in shown.stdout
    assert "Odd\x1b[31mRed\u202eTxt" in json.loads(as_json.stdout)["workflows"]
    assert "next step:    welcome\\x1b]0;retitled\\x07" in shown.stdout
    # Columns stay aligned: the escaped type is measured as printed.
    header, *rows = listed.stdout.splitlines()
    starts = {row.index(row.split()[1]) for row in rows}
    assert starts == {header.index("class")}


# -- operators and a running step (R-EXT-26, R-HK-28) -----------------------------------


def _dead_worker_workflow(email, *, started_minutes_ago=5):
    """A CliOnboarding whose first execution stays in_progress, as after a SIGKILL."""
    from tests.support.housekeeping import make_in_progress

    workflow = CliOnboarding.create(hero=make_user(email))
    started_at = clock.now() - timedelta(minutes=started_minutes_ago)
    return workflow, make_in_progress(workflow, started_at)


def test_skip_of_a_running_step_is_refused_in_one_line_and_resume_withdraws_the_pause(
    geneva_cli,
):
    """flask geneva skip/resume --rewind print the refusal naming the running execution
    (no traceback, no unique-index violation); resume makes the workflow performing
    again (R-EXT-26, R-CLI-02).
    """
    workflow, execution_id = _dead_worker_workflow("run@example.com")
    workflow.pause()
    skipped = geneva_cli("skip", str(workflow.id))
    assert_one_line_error(
        skipped, f"step execution {execution_id} (step 'welcome') is still in progress"
    )
    assert "IntegrityError" not in skipped.stderr
    rewound = geneva_cli("resume", "--rewind", str(workflow.id))
    assert_one_line_error(rewound, "Cannot resume from the beginning workflow")
    resumed = geneva_cli("resume", str(workflow.id))
    assert resumed.returncode == 0, resumed.stderr
    assert "state is performing" in resumed.stdout
    assert [r["state"] for r in execution_rows(workflow.id)] == ["in_progress"]


def test_recover_refuses_a_young_execution_and_recovers_it_with_force(geneva_cli):
    """flask geneva recover refuses an execution within GENEVA_RECOVER_GRACE in one
    line; with --force it recovers it, reschedules the step and records the operator
    via "cli" (R-HK-28, R-CLI-02, R-PDR-05).
    """
    workflow, execution_id = _dead_worker_workflow(
        "young@example.com", started_minutes_ago=0
    )
    refused = geneva_cli("recover", str(workflow.id))
    assert_one_line_error(
        refused, f"Cannot recover step execution {execution_id} of workflow"
    )
    assert "GENEVA_RECOVER_GRACE" in refused.stderr
    forced = geneva_cli("recover", "--force", str(workflow.id), actor="carol")
    assert forced.returncode == 0, forced.stderr
    assert f"workflow {workflow.id}: recover done, state is ready" in forced.stdout
    assert [(r["state"], r["outcome"]) for r in execution_rows(workflow.id)] == [
        ("completed", "recovered"),
        ("scheduled", None),
    ]
    [record] = workflow_row(workflow.id)["metadata"]["operator_actions"]
    assert (record["action"], record["actor"], record["via"]) == (
        "recover_forced",
        "carol",
        "cli",
    )


def test_show_says_an_execution_was_recovered_from_a_dead_worker(geneva_cli):
    """``show`` prints the recovered execution's WorkerLostError with the
    worker's name and last heartbeat (R-HK-29, R-CLI-06)."""
    from flask_geneva import run_housekeeping
    from flask_geneva.db import workers as worker_rows
    from tests.support.workers import insert_worker
    from tests.support.workers import running_on
    from tests.support.workers import workers_table

    insert_worker(timedelta(0))
    dead = insert_worker(timedelta(hours=1))
    workflow = running_on(CliOnboarding, dead)
    db.session.rollback()  # on SQLite a read holds the write lock
    with db.engine.connect() as connection:
        heartbeat = worker_rows.last_heartbeat(connection, workers_table(), dead)
    assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    shown = geneva_cli("show", str(workflow.id))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("      error: "))
    assert lines[at].startswith(
        f"      error: worker {dead} (celery@host, host host, pid 4242) was lost, "
        f"last heartbeat {heartbeat:%Y-%m-%d %H:%M:%S} UTC"
    )
    assert lines[at + 1] == "      error class: flask_geneva.exceptions.WorkerLostError"

"""Bad input thrown at every ``flask geneva`` command, in-process (R-CLI-01/02, R-WSIG-60/61).

Each invocation goes through Flask's CLI runner (the ``geneva_cli`` fixture of
tests/cli/test_cli.py), which re-raises any exception that is not an exit status: a
``DataError``, ``RecursionError`` or ``KeyError`` fails the test with its
traceback. What is expected instead is a one-line refusal naming the wrong value
and what is allowed, and rows that are unchanged. Generated inputs use hypothesis
with a fixed seed (``derandomize``) and a few dozen examples, so the module runs in
seconds.
"""

from __future__ import annotations

import errno
import itertools
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from flask_geneva.testing import perform_next_step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import db
from tests.apps.cli_app import CliAwaiting
from tests.apps.cli_app import CliOnboarding
from tests.cli.test_cli import _dead_worker_workflow
from tests.cli.test_cli import geneva_cli  # noqa: F401 - the fixture
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import signal_rows
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row

_EMAILS = itertools.count()
ALLOWED_IDS = "expected an integer from 1 to 9223372036854775807"
FLOW_COMMANDS = ("pause", "resume", "cancel", "skip", "recover")
FUZZ = settings(
    max_examples=25,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def _hero():
    """A new hero for each workflow (hypothesis runs a test body many times)."""
    return make_user(f"attack{next(_EMAILS)}@example.com")


def _error_lines(result):
    assert "Traceback" not in result.stderr, result.stderr
    return [line for line in result.stderr.splitlines() if line.strip()]


def _usage_error(result):
    """The ``Error:`` line of a usage error (exit status 2)."""
    assert result.returncode == 2, result
    [error] = [line for line in _error_lines(result) if line.startswith("Error:")]
    return error


def _snapshot(workflow_id):
    row = workflow_row(workflow_id)
    return (
        row["state"],
        row["current_step_name"],
        row["next_step_name"],
        [(r["id"], r["state"], r["outcome"]) for r in execution_rows(workflow_id)],
    )


# -- workflow ids ------------------------------------------------------------------


@pytest.mark.parametrize("command", [*FLOW_COMMANDS, "show"])
@pytest.mark.parametrize("raw", ["-1", "-9223372036854775808", "-0"])
def test_a_negative_id_names_the_allowed_ids_not_an_unknown_option(
    geneva_cli,  # noqa: F811
    command,
    raw,
):
    """``-1`` is a workflow id that is not allowed, not "No such option '-1'": a usage
    error naming the value and the allowed ids, before any id is processed
    (R-CLI-01/02).
    """
    workflow = CliOnboarding.create(hero=_hero())
    before = _snapshot(workflow.id)
    args = [command, str(workflow.id), raw] if command != "show" else [command, raw]
    error = _usage_error(geneva_cli(*args))
    assert f"invalid workflow id {raw!r}: {ALLOWED_IDS}" in error
    assert _snapshot(workflow.id) == before


def test_a_mistyped_option_is_still_no_such_option(geneva_cli):  # noqa: F811
    """Only a dash and a digit is read as an id; ``--rewnd`` stays Click's "No such
    option", with its suggestion (R-CLI-01).
    """
    typo = _usage_error(geneva_cli("resume", "--rewnd", "1"))
    assert "No such option '--rewnd'" in typo


@pytest.mark.parametrize(
    "raw",
    [
        "0",
        "",
        "   ",
        "1.5",
        "1e3",
        "0x10",
        "abc",
        "\x00",
        "1\x00",
        "\u0663",  # ARABIC-INDIC DIGIT THREE: isdigit(), not an ASCII id
        "\u202e1",
        str(2**63),
        str(2**64),
        "9" * 400,
    ],
)
def test_invalid_ids_are_refused_one_line_each_and_the_rest_processed(
    geneva_cli,  # noqa: F811
    raw,
):
    """A bad id prints one line naming it and the allowed ids; the valid id after it
    is still paused; exit status 1 (R-CLI-02).
    """
    workflow = CliOnboarding.create(hero=_hero())
    result = geneva_cli("pause", raw, str(workflow.id))
    assert result.returncode == 1, result
    [line] = _error_lines(result)
    assert "pause refused: invalid workflow id" in line
    assert ALLOWED_IDS in line
    assert "\x00" not in line
    assert workflow_row(workflow.id)["state"] == "paused"
    shown = geneva_cli("show", raw)
    assert shown.returncode == 1, shown
    [line] = _error_lines(shown)
    assert ALLOWED_IDS in line


def test_an_id_given_twice_is_processed_once(geneva_cli):  # noqa: F811
    """``skip 5 5`` (or ``5 05``, `` 5``) skips one step, not two, and says the
    repetition was ignored; exit status 0 (R-CLI-02).
    """
    workflow = CliOnboarding.create(hero=_hero())
    raw = str(workflow.id)
    result = geneva_cli("skip", raw, raw, f"0{raw}", f" {raw}")
    assert result.returncode == 0, result
    assert [(r["step_name"], r["state"]) for r in execution_rows(workflow.id)] == [
        ("welcome", "skipped"),
        ("follow_up", "scheduled"),
    ]
    assert result.stdout.count("skip done") == 1
    assert f"workflow {raw}: given more than once, processed once" in result.stdout
    paused = geneva_cli("pause", raw, raw)
    assert paused.returncode == 0, paused
    assert workflow_row(workflow.id)["state"] == "paused"
    [record] = [
        a
        for a in workflow_row(workflow.id)["metadata"]["operator_actions"]
        if a["action"] == "pause"
    ]
    assert record["via"] == "cli"


@FUZZ
@given(raw=st.text(max_size=30))
def test_fuzzed_ids_never_raise_and_change_nothing(geneva_cli, raw):  # noqa: F811
    """Any text as an id: a refusal (exit status 1 or 2) or, for a real id, the
    action; never a traceback (R-CLI-01/02).
    """
    result = geneva_cli("cancel", "--", raw)
    assert result.returncode in (0, 1), result
    assert "Traceback" not in result.stderr
    if result.returncode == 1:
        assert len(_error_lines(result)) == 1, result.stderr


@FUZZ
@given(
    picks=st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from(["{}", "0{}", " {} ", "x{}"])),
        min_size=1,
        max_size=6,
    )
)
def test_fuzzed_id_lists_pause_each_valid_workflow_once(geneva_cli, picks):  # noqa: F811
    """Any mix of valid, repeated (``5``, ``05``, `` 5 ``) and invalid ids: each
    named workflow is paused exactly once, each invalid id refused on its own
    line, exit status 1 exactly when something was refused (R-CLI-02).
    """
    workflows = [CliOnboarding.create(hero=_hero()).id for _ in range(3)]
    args = [shape.format(workflows[index]) for index, shape in picks]
    result = geneva_cli("pause", *args)
    named = {workflows[index] for index, shape in picks if not shape.startswith("x")}
    invalid = sum(shape.startswith("x") for _, shape in picks)
    assert result.returncode == (1 if invalid else 0), result
    assert len(_error_lines(result)) == invalid, result.stderr
    assert result.stdout.count("pause done") == len(named), result.stdout
    for workflow_id in workflows:
        row = workflow_row(workflow_id)
        actions = (row["metadata"] or {}).get("operator_actions", [])
        assert len(actions) == (1 if workflow_id in named else 0), (args, actions)


# -- every command on every state, including a class whose code is gone --------------


def _workflow_in(state):
    """A workflow in ``state``; ``gone_*`` rows carry a type no class defines."""
    if state in ("running", "gone_running"):
        workflow, _ = _dead_worker_workflow(f"attack{next(_EMAILS)}@example.com")
    elif state == "awaiting":
        workflow = CliAwaiting.create(hero=_hero())
        perform_next_step(workflow)
    else:
        workflow = CliOnboarding.create(hero=_hero())
    if state in ("paused", "gone_paused"):
        workflow.pause()
    elif state == "canceled":
        workflow.cancel()
    elif state == "finished":
        speedrun_workflow(workflow)
    workflow_id = workflow.id
    db.session.commit()
    if state.startswith("gone_"):
        update_workflow(workflow_id, type="RemovedWorkflowClass")
    return workflow_id


COMMAND_LINES = (
    ("pause",),
    ("resume",),
    ("resume", "--rewind"),
    ("resume", "--at", "follow_up"),
    ("cancel",),
    ("skip",),
    ("recover", "--force"),
    ("show",),
)


@pytest.mark.parametrize(
    "state",
    [
        "paused",
        "running",
        "finished",
        "canceled",
        "awaiting",
        "gone_paused",
        "gone_running",
    ],
)
def test_every_command_on_every_state_is_done_or_refused_in_one_line(
    geneva_cli,  # noqa: F811
    geneva_jobs,
    state,
):
    """Each command either succeeds (exit 0) or prints one refusal line and leaves
    the workflow and its executions as they were; a workflow whose class is gone
    is refused with the class named, never a KeyError (R-CLI-02, R-EXT-26,
    R-EVO-06/07).
    """
    for command in COMMAND_LINES:
        workflow_id = _workflow_in(state)
        before = _snapshot(workflow_id)
        result = geneva_cli(*command, str(workflow_id))
        if result.returncode == 0:
            continue
        assert result.returncode == 1, (command, result)
        [line] = _error_lines(result)
        assert line.startswith(f"workflow {workflow_id}: {command[0]} refused: ")
        assert _snapshot(workflow_id) == before, (command, line)
        if state == "gone_paused" and command[0] in ("resume", "skip"):
            assert "RemovedWorkflowClass" in line, line


def test_resume_at_on_a_workflow_whose_class_is_gone_says_so(geneva_cli):  # noqa: F811
    """``resume --at`` of a row whose class is no longer defined says no class is
    registered for its type, not merely that the type "defines no such step"
    (R-EVO-06).
    """
    workflow_id = _workflow_in("gone_paused")
    result = geneva_cli("resume", "--at", "welcome", str(workflow_id))
    assert result.returncode == 1, result
    [line] = _error_lines(result)
    assert "no workflow class is registered for type 'RemovedWorkflowClass'" in line
    assert workflow_row(workflow_id)["state"] == "paused"


@FUZZ
@given(step=st.text(min_size=1, max_size=40))
def test_fuzzed_resume_at_steps_are_refused_naming_the_allowed_steps(
    geneva_cli,  # noqa: F811
    step,
):
    """Any text that is not a defined step: refused naming it and the allowed
    steps; the workflow stays paused (R-EVO-06, R-CLI-02).
    """
    if step in ("welcome", "follow_up", "sweep"):
        return
    workflow = CliOnboarding.create(hero=_hero())
    workflow.pause()
    result = geneva_cli("resume", "--at", step, str(workflow.id))
    assert result.returncode in (1, 2), result
    lines = _error_lines(result)
    if result.returncode == 1:
        [line] = lines
        assert "allowed steps: 'welcome', 'follow_up', 'sweep'" in line
    assert workflow_row(workflow.id)["state"] == "paused"


def test_show_prints_operator_actions_edited_by_hand(geneva_cli):  # noqa: F811
    """Operator actions whose time is not an ISO text (a number, a nested object)
    or that are not objects, as a hand edit or another version may leave them:
    ``show`` prints them as stored, never an AttributeError (R-CLI-01, R-PDR-05).
    """
    workflow = CliOnboarding.create(hero=_hero())
    actions = [{"at": 5, "action": "pause"}, {"at": {"x": 1}}, None, "text"]
    update_workflow(workflow.id, metadata={"operator_actions": actions})
    result = geneva_cli("show", str(workflow.id))
    assert result.returncode == 0, result
    assert "  5 pause via None by - (None -> None)" in result.stdout
    assert "  {'x': 1} None via" in result.stdout


# -- list ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--class", "Cli\x00Onboarding"), "--class must not contain a NUL character"),
        (("--hero", "Us\x00er#1"), "--hero must not contain a NUL character"),
        (("--class", "x" * 256), "--class is longer than 255 characters"),
        (("--hero", "U" * 256 + "#1"), "--hero's type is longer than 255 characters"),
    ],
)
def test_list_refuses_text_no_row_can_hold(geneva_cli, args, fragment):  # noqa: F811
    """A NUL byte (PostgreSQL text cannot hold one) or more than the column's 255
    characters in --class or --hero is an error naming the value, on every
    database, not a DataError or a silent "no workflows" (R-CLI-01).
    """
    CliOnboarding.create(hero=_hero())
    result = geneva_cli("list", *args)
    assert result.returncode == 1, result
    [error] = _error_lines(result)
    assert error.startswith("Error: ")
    assert fragment in error
    assert "\x00" not in error


# -- signal --------------------------------------------------------------------------


def test_a_negative_id_for_signal_names_the_allowed_ids(geneva_cli):  # noqa: F811
    """``signal -7 NAME`` names the allowed ids; a name like ``-5`` after the id is
    not called a workflow id (Click's option error; after ``--`` it is the name)
    (R-WSIG-61, R-CLI-01).
    """
    error = _usage_error(geneva_cli("signal", "-7", "paid"))
    assert f"invalid workflow id '-7': {ALLOWED_IDS}" in error
    workflow = CliOnboarding.create(hero=_hero())
    assert "workflow id" not in _usage_error(
        geneva_cli("signal", str(workflow.id), "-5")
    )
    stored = geneva_cli("signal", str(workflow.id), "--", "-5")
    assert stored.returncode == 0, stored
    assert [row["name"] for row in signal_rows(workflow.id)] == ["-5"]


def _awaiting():
    workflow = CliAwaiting.create(hero=_hero())
    perform_next_step(workflow)
    return workflow.id


@pytest.mark.parametrize("depth", [500, 100_000])
def test_a_payload_nested_too_deeply_is_a_usage_error(geneva_cli, depth):  # noqa: F811
    """Thousands of nested brackets exhaust json's parser, hundreds the payload's
    encoder (the cursor codec): a usage error saying so, as the admin's form does
    (R-WSIG-21, R-WSIG-61, R-WSIG-68), not a RecursionError.
    """
    workflow_id = _awaiting()
    deep = "[" * depth + "]" * depth
    error = _usage_error(
        geneva_cli("signal", str(workflow_id), "paid", "--payload", deep)
    )
    assert "nested too deeply" in error
    assert signal_rows(workflow_id) == []


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (
            ("pa\x00id",),
            "signal name must be a non-empty str of at most 255 characters",
        ),
        (("paid", "--idempotency-key", "k\x00"), "idempotency_key must be"),
        (("paid", "--payload", '"\\u0000"'), "NUL character at payload"),
        (("paid", "--payload", '{"k\\u0000": 1}'), "NUL character at payload"),
        (("paid", "--payload", '{"a": [1, "x\\u0000"]}'), 'at payload["a"][1]'),
    ],
)
def test_a_nul_character_in_a_signal_is_refused_on_every_database(
    geneva_cli,  # noqa: F811
    args,
    fragment,
):
    """PostgreSQL cannot store a NUL character in text or JSON; the signal is refused
    before anything is written, on every database alike (R-WSIG-20/21/61), never a
    DataError.
    """
    workflow_id = _awaiting()
    error = _usage_error(geneva_cli("signal", str(workflow_id), *args))
    assert fragment in error
    assert "NUL" in error
    assert signal_rows(workflow_id) == []
    assert execution_rows(workflow_id)[-1]["state"] == "waiting"


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_non_finite_payload_is_refused_as_a_payload_not_a_cursor(
    geneva_cli,  # noqa: F811
    constant,
):
    """``--payload NaN`` is refused naming the payload, not "the cursor" (R-WSIG-21)."""
    workflow_id = _awaiting()
    error = _usage_error(
        geneva_cli("signal", str(workflow_id), "paid", "--payload", constant)
    )
    assert "cannot store the payload: float" in error
    assert "cursor" not in error
    assert signal_rows(workflow_id) == []


@FUZZ
@given(
    name=st.text(min_size=0, max_size=20),
    payload=st.one_of(st.none(), st.text(max_size=20)),
    key=st.one_of(st.none(), st.text(max_size=20)),
)
def test_fuzzed_signals_are_stored_or_refused(geneva_cli, name, payload, key):  # noqa: F811
    """Any name, payload text and key: stored (exit 0, one row more) or refused as a
    usage error with nothing stored (R-WSIG-60/61); never a traceback.
    """
    workflow = CliOnboarding.create(hero=_hero())
    args = ["signal", str(workflow.id), "--", name]
    if payload is not None:
        args[2:2] = ["--payload", payload]
    if key is not None:
        args[2:2] = ["--idempotency-key", key]
    result = geneva_cli(*args)
    rows = signal_rows(workflow.id)
    if result.returncode == 0:
        [row] = rows
        assert row["name"] == name
        stored = row["payload"]
        if isinstance(stored, str):
            stored = json.loads(stored)
        assert "Traceback" not in result.stderr
    else:
        _usage_error(result)
        assert rows == []


# -- install -----------------------------------------------------------------------


def _migrations(tmp_path):
    """A bare Alembic directory, as ``flask db init`` leaves one (no revisions)."""
    directory = tmp_path / "migrations"
    (directory / "versions").mkdir(parents=True)
    (directory / "alembic.ini").write_text("[alembic]\n")
    (directory / "env.py").write_text("")
    return directory


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("x" * 5000, "cannot use migrations directory"),
        ("a-file", "is not a directory"),
        ("missing", "does not exist"),
    ],
)
def test_install_into_a_path_that_cannot_be_one_is_refused_in_one_line(
    geneva_cli,  # noqa: F811
    tmp_path,
    name,
    fragment,
):
    """A name too long for the file system (an OSError), a file, or a missing
    folder: one line naming the path, never a traceback (R-MIG-01, R-CLI-01).
    """
    (tmp_path / "a-file").write_text("")
    result = geneva_cli("install", "--directory", str(tmp_path / name))
    assert result.returncode == 1, result
    [line] = _error_lines(result)
    assert fragment in line


def test_install_that_cannot_write_every_revision_writes_none(
    geneva_cli,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """The disk fills up after two revision files: the command says nothing was
    written and removes the two, so a later install does not chain after a head
    that lacks units (R-MIG-01/03).
    """
    directory = _migrations(tmp_path)
    original = Path.write_text
    calls = []

    def fill_up(self, *args, **kwargs):
        if self.parent.name == "versions":
            calls.append(self)
            if len(calls) > 2:
                raise OSError(errno.ENOSPC, "No space left on device")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", fill_up)
    result = geneva_cli("install", "--directory", str(directory))
    monkeypatch.undo()
    assert result.returncode == 1, result
    [line] = _error_lines(result)
    assert "No space left on device" in line
    assert "nothing was written" in line
    assert len(calls) == 3
    assert list((directory / "versions").iterdir()) == []


# -- worker ------------------------------------------------------------------------


def test_worker_schedule_without_beat_is_a_usage_error(geneva_cli):  # noqa: F811
    """``--schedule`` names beat's schedule file: without ``--beat`` it would be
    ignored silently, so the contradiction is a usage error before anything starts
    (R-CLI-03).
    """
    error = _usage_error(geneva_cli("worker", "--schedule", "beat.db"))
    assert "--schedule needs --beat" in error
    assert "'beat.db'" in error


@pytest.mark.parametrize("queues", ["", ",,", "critical,", " , mail"])
def test_worker_queues_with_an_empty_name_are_a_usage_error(geneva_cli, queues):  # noqa: F811
    """``--queues ",,"`` started a worker on a queue named ``,,`` and ``--queues ""``
    one on the default queue: a worker consuming nothing it was meant to. An empty
    name is a usage error before anything starts (R-CLI-03).
    """
    error = _usage_error(geneva_cli("worker", "--queues", queues))
    assert "Invalid value for '-Q' / '--queues'" in error
    assert f"got {queues!r} (an empty name)" in error


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("--pool", "bogus", "'prefork'"),
        ("--loglevel", "NOPE", "'debug'"),
    ],
)
def test_worker_pool_and_loglevel_are_checked_by_flask_geneva(
    geneva_cli,  # noqa: F811
    option,
    value,
    allowed,
):
    """A wrong ``--pool`` or ``--loglevel`` was refused by Celery after
    "starting Celery worker", with a usage line for a ``flask worker`` command that
    does not exist; it is now a usage error of ``flask geneva worker`` naming the
    allowed values, before anything starts (R-CLI-03).
    """
    result = geneva_cli("worker", option, value)
    error = _usage_error(result)
    assert f"{value!r} is not one of" in error
    assert allowed in error.lower()
    assert "starting Celery worker" not in result.stdout
    assert "geneva worker [OPTIONS]" in result.stderr


# -- a database without geneva's tables -----------------------------------------------


@pytest.mark.backends("sqlite")  # its own empty SQLite file
@pytest.mark.parametrize(
    "args",
    [
        ("status",),
        ("list",),
        ("show", "1"),
        ("pause", "1"),
        ("dispatch",),
        ("housekeeping",),
        ("check-steps",),
        ("signal", "1", "approved"),
    ],
)
def test_commands_before_the_tables_exist_say_to_run_the_migrations(tmp_path, args):
    """Before `flask geneva install` and `flask db upgrade` every command ended in
    the driver's "no such table" with a traceback of some thirty frames; it is now
    one line naming the missing tables and the commands to run (R-CLI-04)."""
    from tests.apps.basic import create_app

    empty = create_app(f"sqlite:///{tmp_path / 'empty.sqlite3'}")
    result = empty.test_cli_runner().invoke(args=["geneva", *args])
    assert result.exit_code in (1, 2), result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert re.fullmatch(
        r"Error: the flask_geneva table geneva_drive_\w+ does not exist in "
        + re.escape(f"sqlite:///{tmp_path / 'empty.sqlite3'}")
        + re.escape(
            ": run `flask geneva install` (once, to write the migrations) and "
            "then `flask db upgrade`"
        ),
        lines[-1],
    ), lines

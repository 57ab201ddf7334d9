"""Two ``flask geneva`` invocations racing on one workflow (R-CLI-02, R-EXT-26).

Each invocation runs in its own thread with its own app (so its own engine,
session and app context), as two operators' terminals would. Both start at a
barrier and both have read what they pin (the step ``skip`` skips, the
execution ``recover`` recovers) before either writes, so the second always
acts on what the first left behind. The second barrier is met through
SQLAlchemy's public session events, with the command's code unchanged: a
command that pins waits after the rollback that ends its pin read
(``after_soft_rollback``), one that pins nothing before its first read
(``do_orm_execute``); neither holds a transaction there (a barrier inside the
workflow lock would deadlock on SQLite, where every transaction takes the write
lock). Every invocation must end done (exit 0) or with one refusal line (exit
1), never a traceback; and the workflow's operator actions must list exactly
the invocations that said "done", none lost or overwritten.

The commands run through ``app.cli.main`` with Flask's ``ScriptInfo`` as the
CLI runner does, not through ``CliRunner.invoke``: the runner swaps the
process-wide ``sys.stdout`` for the duration of a call, so two concurrent calls
would write into each other's buffers. Here ``sys.stdout``/``sys.stderr`` are
replaced once by a stream that writes to the calling thread's own buffer.
"""

from __future__ import annotations

import io
import sys
import threading

import pytest
from flask.cli import ScriptInfo
from sqlalchemy import event
from sqlalchemy import orm

from tests.apps.basic import db
from tests.apps.cli_app import CliOnboarding
from tests.apps.cli_app import create_app as create_cli_app
from tests.cli.test_cli import _database_url
from tests.cli.test_cli import _dead_worker_workflow
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import workflow_row


class _ThreadStreams(io.TextIOBase):
    """A text stream writing to a buffer of the calling thread (else ``fallback``)."""

    encoding = "utf-8"
    errors = "strict"

    def __init__(self, fallback):
        super().__init__()
        self._local = threading.local()
        self._fallback = fallback

    def start(self):
        self._local.buffer = io.StringIO()

    def text(self):
        return self._local.buffer.getvalue()

    def write(self, text):
        buffer = getattr(self._local, "buffer", None)
        (buffer if buffer is not None else self._fallback).write(text)
        return len(text)

    def isatty(self):
        return False


def _race(monkeypatch, tmp_path, workflow_id, commands):
    """Run the two command lines at once; return (exit status, stdout, stderr) each."""
    db.session.commit()
    monkeypatch.setenv("GENEVA_TEST_CLI_DATABASE_URL", _database_url(tmp_path))
    monkeypatch.setenv("GENEVA_ACTOR", "racer")
    apps = [create_cli_app() for _ in commands]
    read_together = threading.Barrier(len(commands))
    racer = threading.local()

    def wait_for_the_others(session):
        # No racer holds a transaction here, so no lock (SQLite's BEGIN
        # IMMEDIATE included): waiting cannot deadlock.
        assert not session.in_transaction(), "a racer waits holding a transaction"
        racer.waits = None
        read_together.wait(timeout=30)

    def after_rollback(session, previous_transaction):
        # A command that pins (skip, recover) reads what it pins in a transaction
        # of its own and rolls it back, before it writes anything.
        if getattr(racer, "waits", None) == "after its pin read":
            wait_for_the_others(session)

    def before_query(execute_state):
        # pause, cancel and resume pin nothing: they wait before their first read.
        if getattr(racer, "waits", None) == "before its first read":
            wait_for_the_others(execute_state.session)

    listeners = [
        (orm.Session, "after_soft_rollback", after_rollback),
        (orm.Session, "do_orm_execute", before_query),
    ]
    for listener in listeners:
        event.listen(*listener)
    stdout, stderr = _ThreadStreams(sys.__stdout__), _ThreadStreams(sys.__stderr__)
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", stderr)
    start = threading.Barrier(len(commands))
    results = [None] * len(commands)
    errors = []

    def run(index, command):
        stdout.start()
        stderr.start()
        pins = command.split()[0] in ("skip", "recover")
        racer.waits = "after its pin read" if pins else "before its first read"
        app = apps[index]
        args = ["geneva", *command.split(), str(workflow_id)]
        status = 0
        with app.app_context():
            start.wait(timeout=30)
            try:
                app.cli.main(
                    args=args,
                    prog_name="flask",
                    obj=ScriptInfo(create_app=lambda: app),
                    standalone_mode=True,
                )
            except SystemExit as exit_:
                status = exit_.code or 0
            except BaseException as error:  # noqa: BLE001 - asserted below
                errors.append(error)
            finally:
                db.session.remove()
        results[index] = (status, stdout.text(), stderr.text())

    threads = [
        threading.Thread(target=run, args=(index, command))
        for index, command in enumerate(commands)
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join(timeout=60)
    finally:
        for listener in listeners:
            event.remove(*listener)
    for app in apps:
        with app.app_context():
            for engine in db.engines.values():
                engine.dispose()
    monkeypatch.undo()
    if errors:
        raise errors[0]
    return results


def _operator_actions(workflow_id):
    metadata = workflow_row(workflow_id)["metadata"] or {}
    return [entry["action"] for entry in metadata.get("operator_actions", [])]


def _assert_done_or_refused(workflow_id, commands, results, earlier_actions):
    """Each result is "done" (exit 0) or one refusal line (exit 1); the actions
    recorded after ``earlier_actions`` are those of the "done" ones."""
    done = []
    for command, (status, out, err) in zip(commands, results, strict=True):
        assert "Traceback" not in err, err
        if status == 0:
            assert f"workflow {workflow_id}: {command.split()[0]}" in out, out
            assert " done, state is " in out, out
            done.append(command)
        else:
            assert status == 1, (command, status, out, err)
            [line] = err.splitlines()
            assert line.startswith(
                f"workflow {workflow_id}: {command.split()[0]} refused: "
            )
    recorded = _operator_actions(workflow_id)[earlier_actions:]
    assert len(recorded) == len(done), (recorded, results)
    return done


def test_two_skips_at_once_skip_one_step_and_refuse_the_other(
    app, tmp_path, monkeypatch
):
    """Two operators skipping the same workflow at once skip its current step once;
    the later one is refused naming the step it meant and the step now current,
    not a second step skipped (R-CLI-02, the ``expected_step`` guard of skip).
    """
    workflow = CliOnboarding.create(hero=make_user("skip2@example.com"))
    commands = ["skip", "skip"]
    results = _race(monkeypatch, tmp_path, workflow.id, commands)
    done = _assert_done_or_refused(workflow.id, commands, results, 0)
    assert done == ["skip"]
    [refusal] = [err for status, _, err in results if status == 1]
    assert "Cannot skip step 'welcome'" in refusal
    assert "is now 'follow_up'" in refusal
    assert [(r["step_name"], r["state"]) for r in execution_rows(workflow.id)] == [
        ("welcome", "skipped"),
        ("follow_up", "scheduled"),
    ]


@pytest.mark.parametrize(
    ("setup", "commands"),
    [
        ("ready", ["pause", "cancel"]),
        ("ready", ["pause", "pause"]),
        ("ready", ["cancel", "cancel"]),
        ("ready", ["skip", "cancel"]),
        ("paused", ["resume", "skip"]),
        ("paused", ["resume", "resume --rewind"]),
        ("paused", ["resume --at sweep", "resume --at follow_up"]),
        ("paused", ["resume --at follow_up", "skip"]),
        ("running", ["recover --force", "recover --force"]),
        ("running", ["recover --force", "cancel"]),
    ],
    ids=lambda value: value if isinstance(value, str) else "+".join(value),
)
def test_conflicting_commands_at_once_are_each_done_or_refused(
    app, tmp_path, monkeypatch, setup, commands
):
    """Conflicting flow control from two terminals: each is done or refused in one
    line, no traceback, and every "done" is in the operator actions (R-CLI-02,
    R-PDR-05, R-EXT-26).
    """
    if setup == "running":
        workflow, _ = _dead_worker_workflow("race@example.com")
    else:
        workflow = CliOnboarding.create(hero=make_user("race@example.com"))
    if setup == "paused":
        workflow.pause()
    earlier = len(_operator_actions(workflow.id))
    results = _race(monkeypatch, tmp_path, workflow.id, commands)
    done = _assert_done_or_refused(workflow.id, commands, results, earlier)
    assert done, results
    if commands[0] == commands[1]:
        assert len(done) == 1, results

"""The README's first command: the example app settles every workflow (R-APP-02),
its newsletter campaign a fan-out to batch children whose results it sums
(R-CHD-70)."""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import subprocess
import threading
import urllib.parse
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.support.worker_harness import processes_fixture  # noqa: F401 - "processes"
from tests.support.worker_harness import python_code
from tests.support.worker_harness import python_module
from tests.support.worker_harness import run
from tests.support.worker_harness import stop
from tests.support.worker_harness import wait_for

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.backends("sqlite")  # reads the SQLite database the demo brought
def test_demo_settles_every_workflow_and_prints_a_summary(tmp_path):
    """`python -m example_app demo --exit-when-settled` runs migrations, an embedded
    worker and beat, serves the admin (on a free port when the one asked for is
    busy), settles all workflows and exits 0 after the summary."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy_port = taken.getsockname()[1]
        result = _run_busy_port_demo(tmp_path, busy_port)
    output = result.stdout
    assert result.returncode == 0, output + result.stderr
    assert "every workflow settled" in output
    assert f"port {busy_port} is busy" in output
    [admin_url] = re.findall(
        r"^admin UI: (http://127\.0\.0\.1:(\d+)/geneva/)", output, re.M
    )
    assert admin_url[1] != str(busy_port)
    assert "Press Ctrl-C" not in output
    assert "Traceback" not in result.stderr
    counts = {
        (kind, state): int(count)
        for kind, state, count in re.findall(
            r"^\s+(\w+)\s+(finished|canceled|paused)\s+(\d+)$", output, re.M
        )
    }
    onboarding = counts.get(("Onboarding", "finished"), 0) + counts.get(
        ("Onboarding", "canceled"), 0
    )
    payments = counts.get(("Payment", "finished"), 0) + counts.get(
        ("Payment", "canceled"), 0
    )
    assert onboarding == 20
    assert payments == 20
    assert counts.get(("ExportReview", "finished")) == 1
    # The campaign: 20,000 subscribers (the default) in 40 batch children of 500.
    assert counts.get(("NewsletterCampaign", "finished")) == 1
    assert counts.get(("SendBatch", "finished")) == 40
    assert re.search(
        r"^newsletter campaign \d+ \(finished\): 40 batch children \(40 finished\), "
        r"result \{'batches': 40, 'sent': 19600, 'skipped': 400\}$",
        output,
        re.M,
    ), output
    assert "19600 of 20000 subscribers mailed once, rate-limited 2 times" in output
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'demo.sqlite3'}")
    try:
        with engine.connect() as connection:
            # A warm worker shutdown: flask_geneva deleted the worker's row
            # (R-WRK-04).
            workers = connection.execute(
                sa.text("SELECT id FROM geneva_drive_workers")
            ).all()
            campaign = _campaign_rows(connection)
    finally:
        engine.dispose()
    assert workers == []
    _assert_the_campaign_sums_its_children(campaign, subscribers=20_000)


def _campaign_rows(connection):
    """The campaign workflow's and its children's rows, results decoded."""
    rows = connection.execute(
        sa.text(
            "SELECT id, type, state, parent_workflow_id, child_key, child_settled, "
            "result FROM geneva_drive_workflows "
            "WHERE type IN ('NewsletterCampaign', 'SendBatch') ORDER BY id"
        )
    ).all()
    [parent] = [row for row in rows if row.type == "NewsletterCampaign"]
    children = [row for row in rows if row.type == "SendBatch"]
    reached = connection.execute(
        sa.text("SELECT count(*) FROM example_subscribers WHERE issues_received = 1")
    ).scalar_one()
    return {
        "parent": {"id": parent.id, "state": parent.state},
        "result": json.loads(parent.result),
        "children": [
            {
                "parent": row.parent_workflow_id,
                "key": row.child_key,
                "settled": row.child_settled,
                "result": json.loads(row.result),
            }
            for row in children
        ],
        "reached": reached,
    }


def _assert_the_campaign_sums_its_children(campaign, *, subscribers):
    """One batch child per 500 subscribers, each finished with its own sent and
    skipped counts (every 50th subscriber unsubscribed); the campaign's result is
    their sum (R-CHD-70)."""
    batches = -(-subscribers // 500)
    children = campaign["children"]
    assert campaign["parent"]["state"] == "finished"
    assert len(children) == batches
    assert {child["parent"] for child in children} == {campaign["parent"]["id"]}
    assert {child["settled"] for child in children} == {"finished"}
    assert len({child["key"] for child in children}) == batches
    assert [
        child["result"]["sent"] + child["result"]["skipped"] for child in children
    ] == [500] * (subscribers // 500) + (
        [subscribers % 500] if subscribers % 500 else []
    )
    skipped = subscribers // 50
    assert campaign["result"] == {
        "batches": batches,
        "sent": sum(child["result"]["sent"] for child in children),
        "skipped": sum(child["result"]["skipped"] for child in children),
    }
    assert campaign["result"]["sent"] == subscribers - skipped
    assert campaign["result"]["skipped"] == skipped
    assert campaign["reached"] == subscribers - skipped


def _run_busy_port_demo(tmp_path, busy_port):
    return run(
        [
            *python_module("example_app", "demo", "--users", "20"),
            *("--database-url", f"sqlite:///{tmp_path / 'demo.sqlite3'}"),
            *("--timeout", "120", "--exit-when-settled", "--port", str(busy_port)),
        ],
        timeout=180,
    )


@pytest.mark.database_independent
def test_demo_deletes_its_own_sqlite_folder_unless_kept(tmp_path):
    """Without --database-url the demo's new SQLite folder is deleted when it
    ends; --keep-database keeps it and says where (R-APP-02)."""

    def demo(*extra):
        result = run(
            [
                *python_module("example_app", "demo", "--users", "2"),
                *("--subscribers", "5", "--timeout", "120", "--port", "0"),
                *("--exit-when-settled", *extra),
            ],
            env={"TMPDIR": str(tmp_path)},
            timeout=180,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "every workflow settled" in result.stdout
        return result.stdout

    output = demo()
    assert list(tmp_path.glob("geneva-example-*")) == []
    assert "deleted " in output
    output = demo("--keep-database")
    [kept] = tmp_path.glob("geneva-example-*")
    assert (kept / "example.sqlite3").is_file()
    assert f"the database is kept: sqlite:///{kept / 'example.sqlite3'}" in output


@pytest.mark.backends("sqlite")  # reads the SQLite database the demo brought
def test_demo_serves_the_admin_with_beat_until_ctrl_c(tmp_path, processes):
    """Without --exit-when-settled the demo serves the admin at the printed URL
    behind its demo login (the printed operator, and a viewer whose pages have no
    button, R-ADM-212), runs the dispatcher and housekeeping in its own
    process, keeps its SQLite file while serving and, on Ctrl-C (SIGINT), stops
    the server, beat and the worker, deletes the file and exits 0 (R-APP-02);
    once settled it leaves workflows paused and waiting for a signal to try
    the buttons on (R-APP-04)."""
    process = processes.start(
        [
            *python_module("example_app", "demo", "--users", "5"),
            *("--subscribers", "50", "--timeout", "120", "--port", "0"),
        ],
        name="demo",  # its stderr: demo.log
        # The demo makes a password up and prints it.
        env={"TMPDIR": str(tmp_path), "EXAMPLE_ADMIN_PASSWORD": None},
        stdout=subprocess.PIPE,
        text=True,
        # Ctrl-C must reach the demo even when the test runs in a shell's
        # background job, where SIGINT is ignored and children inherit that.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True
    )
    reader.start()
    try:
        printed = _wait_for(
            lambda: _search(
                lines, r"^admin UI: (\S+) \(log in as '(\w+)' / '([^']+)';"
            ),
            process,
            lines,
        )
        url, user, password = printed.groups()
        [database] = _search(lines, r"^database: (sqlite:///\S+)").groups()
        workdir = Path(database.removeprefix("sqlite:///")).parent
        assert workdir.parent == tmp_path

        assert user == "operator"
        cookie = _wait_for(lambda: _login(url, user, password), process, lines)
        assert _get(url, None)[0] == 302  # to the login page
        assert _login(url, user, "wrong") is None
        _wait_for(lambda: _search(lines, r"^serving the admin UI at "), process, lines)
        status, workflows = _get(url + "workflows/", cookie)
        assert status == 200
        assert "Onboarding" in workflows
        assert "Payment" in workflows
        assert "Start a workflow" in workflows
        # The start page offers the example's classes but a campaign's batch
        # child, marked admin_startable = False (R-ADM-200).
        status, start = _get(url + "workflows/start", cookie)
        assert status == 200
        assert '<option value="Payment"' in start
        assert '<option value="SendBatch"' not in start
        status, signals_page = _get(url + "signals/", cookie)
        assert status == 200
        assert "Workflow signals are not installed" not in signals_page
        status, read_only = _get(url + "workflows/", _login(url, "viewer", password))
        assert status == 200
        assert "Start a workflow" not in read_only
        assert "data-geneva-bulk" not in read_only
        # It left something to try: paused exports and onboardings, refunds
        # waiting for a signal, each named (R-APP-04).
        left = {
            kind: found.group(1).split(", ")
            for kind in ("ExportReview", "Onboarding", "RefundRequest")
            if (found := _search(lines, rf"^  {kind} (#\d+, #\d+): "))
        }
        assert sorted(left) == ["ExportReview", "Onboarding", "RefundRequest"], lines
        status, paused = _get(url + "workflows/?state=paused", cookie)
        for ident in left["ExportReview"] + left["Onboarding"]:
            assert f'data-workflow-id="{ident[1:]}"' in paused, ident
        status, onboarding = _get(
            url + f"workflows/{left['Onboarding'][0][1:]}", cookie
        )
        assert "waits for Resume" in onboarding  # R-ADM-120
        for ident in left["RefundRequest"]:
            status, refund = _get(url + f"workflows/{ident[1:]}", cookie)
            assert 'is waiting for <code class="geneva-awaited">refund_approved' in (
                refund
            ), ident

        # Beat ran both periodic jobs in the demo's own process and the library
        # recorded them (housekeeping every 5 s at the default time scale).
        engine = sa.create_engine(database)
        try:
            runs = _wait_for(lambda: _maintenance_runs(engine), process, lines, 30)
        finally:
            engine.dispose()
        assert set(runs) == {"dispatcher", "housekeeping"}
        for name, (outcome, pid, succeeded_at) in runs.items():
            assert pid == process.pid, name
            assert succeeded_at is not None, (name, outcome)
        assert (workdir / "example.sqlite3").is_file()

        process.send_signal(signal.SIGINT)
        returncode = process.wait(timeout=60)
    finally:
        stop(process)
    reader.join(10)
    process.stdout.close()
    output = "".join(lines)
    errors = processes.log(process)
    assert returncode == 0, output + errors
    assert "Ctrl-C: stopping the admin server, beat and the worker" in output
    assert "Traceback" not in errors, errors
    assert f"deleted {workdir}" in output
    assert not workdir.exists()
    with pytest.raises(ConnectionRefusedError):
        _get(url, cookie)


def _search(lines, pattern):
    for line in list(lines):
        found = re.search(pattern, line)
        if found:
            return found
    return None


def _wait_for(check, process, lines, seconds=90):
    return wait_for(
        check,
        timeout=seconds,
        running=[process],
        describe=lambda: "demo output so far:\n" + "".join(lines),
    )


def _get(url, cookie):
    """``(status, body)`` of a GET of ``url``, with the session cookie if given."""
    parts = urllib.parse.urlsplit(url)
    headers = {"Cookie": cookie} if cookie is not None else {}
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request("GET", target, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def _login(url, user, password):
    """Log in on the example's demo login page; the session cookie, or None
    when refused or the server does not answer yet."""
    parts = urllib.parse.urlsplit(url)
    body = urllib.parse.urlencode({"user": user, "password": password})
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.request(
            "POST",
            "/login",
            body=body,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        response = connection.getresponse()
        response.read()
    except OSError:
        return None
    finally:
        connection.close()
    if response.status != 303:
        return None
    return response.getheader("Set-Cookie").split(";", 1)[0]


def _maintenance_runs(engine):
    with engine.connect() as connection:
        rows = connection.execute(
            sa.text(
                "SELECT name, outcome, pid, last_succeeded_at "
                "FROM geneva_drive_maintenance_runs"
            )
        ).all()
    runs = {name: (outcome, pid, last) for name, outcome, pid, last in rows}
    done = len(runs) == 2 and all(last is not None for _, _, last in runs.values())
    return runs if done else None


@pytest.mark.database_independent  # argument parsing only: no database
@pytest.mark.parametrize(
    ("argument", "message"),
    [
        (["--port", "70000"], "--port: must be from 0 (any free port) to 65535"),
        (["--port=-1"], "--port: must be from 0 (any free port) to 65535"),
        (["--time-scale=-1"], "--time-scale: must be a finite number of 0 or more"),
        (["--time-scale", "nan"], "--time-scale: must be a finite number"),
        (["--time-scale", "inf"], "--time-scale: must be a finite number"),
        (["--users=-5"], "--users: must be 0 or more, got -5"),
        (["--subscribers=-1"], "--subscribers: must be 0 or more"),
        (["--timeout", "0"], "--timeout: must be a finite number of seconds above 0"),
        (["--database-url", "bogus://x"], "--database-url: not a usable SQLAlchemy"),
        (["--database-url", "notaurl"], "--database-url: not a usable SQLAlchemy"),
    ],
)
def test_demo_refuses_bad_arguments_with_a_usage_error(capsys, argument, message):
    """A port out of range, a negative, infinite or NaN time scale and a URL of no
    installed dialect ended in a traceback (OverflowError from bind(), a
    StepConfigurationError of a negative wait, ValueError from timedelta * nan,
    NoSuchModuleError); a negative --users was accepted. Each is now argparse's
    one-line usage error, before anything starts (R-APP-02)."""
    from example_app.__main__ import main

    with pytest.raises(SystemExit) as exited:
        main(["demo", *argument])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert message in error
    assert "Traceback" not in error


CAMPAIGN_DRIVER = r"""
import json
import sys

import sqlalchemy as sa
from flask_migrate import upgrade

from example_app import create_app, db, geneva
from flask_geneva.testing import RecordingJobs

app = create_app(sys.argv[1], broker_url="memory://")
app.config["GENEVA_TASK_BACKEND"] = "recording"
geneva.reload_settings(app)
jobs = RecordingJobs(app.extensions["geneva"].recording_backend)
with app.app_context():
    upgrade()
    from example_app.models import Campaign, CampaignBatch, Subscriber
    from example_app.seeding import seed_campaign
    from example_app.workflows import NewsletterCampaign, SendBatch

    campaign_id = seed_campaign(int(sys.argv[2]))
    workflow_id = NewsletterCampaign.create(
        hero=db.session.get(Campaign, campaign_id)
    ).id
    jobs.drain()
    db.session.remove()
    workflow = NewsletterCampaign.get(workflow_id)
    chain = [
        [e.outcome, (e.read_metadata("interrupt") or {}).get("reason")]
        for e in workflow.execution_history
        if e.step_name == "fan_out"
    ]
    counts = workflow.child_counts
    first = db.session.scalars(sa.select(CampaignBatch).order_by(CampaignBatch.id)).first()
    [first_child] = [
        child for child in workflow.children() if str(child.hero_id) == str(first.id)
    ]
    found = {
        "state": workflow.state,
        "result": workflow.result,
        "counts": [counts.started, counts.settled, counts.failed],
        "chain": chain,
        "throttled": db.session.get(Campaign, campaign_id).throttled,
        "first_child_result": first_child.result,
    }
    # The batch's step run again, as after a worker died between its commit and
    # finalize: nobody is mailed twice and the result still counts every mail.
    again_id = SendBatch.create(hero=first).id
    jobs.drain()
    db.session.remove()
    again = SendBatch.get(again_id)
    found["again"] = [again.state, again.result]
    received = db.session.execute(
        sa.select(Subscriber.issues_received, sa.func.count()).group_by(
            Subscriber.issues_received
        )
    ).all()
    found["received"] = {str(issues): count for issues, count in received}
    print(json.dumps(found))
"""


@pytest.mark.database_independent  # the driver brings its own SQLite database
def test_the_campaign_fans_out_from_a_resumable_step_and_sums_its_batches(tmp_path):
    """R-CHD-70: 8,100 subscribers: 17 batch children (the last one of 100),
    started five per checkpoint of a resumable ``fan_out`` whose chain ends once
    for ``max_iterations`` and once for the provider's window (a suspend); the
    report step runs once every child settled and its result is their sum. A
    batch run again mails nobody twice."""
    result = run(
        [
            *python_code(CAMPAIGN_DRIVER),
            f"sqlite:///{tmp_path / 'campaign.sqlite3'}",
            "8100",
        ],
        env={"EXAMPLE_TIME_SCALE": "0"},
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["state"] == "finished"
    assert found["result"] == {"batches": 17, "sent": 7938, "skipped": 162}
    assert found["counts"] == [17, 17, 0]
    assert found["chain"] == [
        ["continued", "max_iterations"],
        ["continued", "suspend"],
        ["success", None],
    ]
    assert found["throttled"] == 1
    assert found["first_child_result"] == {"sent": 490, "skipped": 10}
    assert found["again"] == ["finished", {"sent": 490, "skipped": 10}]
    assert found["received"] == {"0": 162, "1": 7938}

"""Real workers, beat and brokers: long waits, queue routing, RabbitMQ (SPEC §6, BTR-01).

Each test starts ``celery worker`` (and ``celery beat``) subprocesses on
``tests.worker.geneva_worker_app`` and reads the stored rows to judge them. Redis
tests use ``GENEVA_TEST_BROKER_URL``; the RabbitMQ test uses
``GENEVA_TEST_AMQP_URL`` (skipped locally when unset, an error under ``CI=true``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from tests.worker.conftest import REPO_ROOT
from tests.worker.conftest import prepare_database
from tests.worker.conftest import wait_for

APP_SPEC = "tests.worker.geneva_worker_app:celery"
AMQP_URL = os.environ.get("GENEVA_TEST_AMQP_URL", "")
VISIBILITY_TIMEOUT = 5
MAX_BROKER_DELAY = 3.0


@pytest.fixture
def amqp_url() -> str:
    """The RabbitMQ URL; skip (locally) or fail (CI) when unset."""
    if not AMQP_URL:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("GENEVA_TEST_AMQP_URL must be set in CI for RabbitMQ tests")
        pytest.skip("GENEVA_TEST_AMQP_URL is not set")
    return AMQP_URL


@pytest.fixture
def amqp_queue(amqp_url: str) -> Iterator[str]:
    """A unique queue name on the shared vhost, deleted after the processes stop."""
    queue = f"geneva-test-{uuid.uuid4().hex[:12]}"
    yield queue
    from kombu import Connection

    with Connection(amqp_url, connect_timeout=5) as connection:
        channel = connection.default_channel
        channel.queue_delete(queue)
        channel.exchange_delete(queue)


@pytest.fixture
def celery_process(
    worker_database_url: str, tmp_path: Path
) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``celery worker``/``celery beat`` subprocesses; all stop after the test."""
    processes: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(
        command: str, broker: str, *extra: str, **settings: Any
    ) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO_ROOT),
            "GENEVA_TEST_WORKER_DATABASE_URL": worker_database_url,
            "GENEVA_TEST_WORKER_BROKER": broker,
            "GENEVA_TEST_WORKER_QUEUE": settings.get("queue") or "",
            "GENEVA_TEST_VISIBILITY_TIMEOUT": str(
                settings.get("visibility_timeout", 3600)
            ),
            "GENEVA_TEST_MAX_BROKER_DELAY": str(settings.get("max_broker_delay", 600)),
        }
        app_spec = settings.get("app_spec", APP_SPEC)
        arguments = [sys.executable, "-m", "celery", "-A", app_spec, command]
        if command == "flask-worker":
            flask_app = app_spec.replace(":celery", ":app")
            arguments = [sys.executable, "-m", "flask", "--app", flask_app]
            arguments += ["geneva", "worker", "--pool=solo"]
            arguments += [f"--schedule={tmp_path / f'beat-{len(processes)}'}"]
        elif command == "worker":
            arguments += [
                "--pool=solo",
                "--concurrency=1",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                f"--hostname=geneva-{uuid.uuid4().hex[:8]}@%h",
            ]
        else:
            arguments += [
                f"--schedule={tmp_path / f'beat-{len(processes)}'}",
                "--max-interval=1",
            ]
        log_path = tmp_path / f"{command}-{len(processes)}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [*arguments, "--loglevel=INFO", *extra],
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        processes.append((process, log_path))
        return process

    yield start
    for process, _ in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process, _ in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for _, log_path in processes:
        text = log_path.read_text(errors="replace")[-3000:]
        sys.stderr.write(f"--- {log_path.name}\n{text}\n")


@pytest.fixture
def build(worker_database_url: str) -> Iterator[Callable[..., Any]]:
    """Build the test process's app on the subprocesses' database and broker.

    Its engines are disposed after the test.
    """
    from tests.apps import basic
    from tests.worker import geneva_worker_app

    apps = []

    def make(broker: str, **settings: Any) -> Any:
        app, _ = geneva_worker_app.build_app(worker_database_url, broker, **settings)
        prepare_database(app)
        apps.append(app)
        return app

    yield make
    for app in apps:
        with app.app_context():
            basic.db.session.remove()
            for engine in basic.db.engines.values():
                engine.dispose()


def create_workflow(app: Any, workflow_cls: Any, email: str) -> tuple[Any, Any]:
    """Insert a hero and its workflow (published after commit); return both ids."""
    from tests.apps import basic

    with app.app_context():
        hero = basic.User(email=email)
        basic.db.session.add(hero)
        basic.db.session.commit()
        workflow = workflow_cls.create(hero=hero)
        ids = workflow.id, hero.id
        basic.db.session.remove()
    return ids


def _reader() -> sa.Connection:
    """A connection that reads the latest commits without taking any lock.

    The app's SQLite engine begins every transaction with ``BEGIN IMMEDIATE``
    (BTR-13), so a transactional read would queue behind a worker whose step body
    holds the write lock (its session's transaction, begun by the body's first
    query, lasts until the body ends) and would see the step only once it ended.
    In autocommit each statement reads the last committed state (WAL readers do not
    wait for the writer); on PostgreSQL and MariaDB it reads what it read before.
    """
    from tests.apps import basic

    return basic.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")


def executions(app: Any, workflow_id: Any) -> list[Any]:
    """The workflow's stored executions, oldest first."""
    from tests.apps import basic

    table = basic.geneva.StepExecution.__table__
    with app.app_context(), _reader() as connection:
        return list(
            connection.execute(
                sa.select(table)
                .where(table.c.workflow_id == workflow_id)
                .order_by(table.c.created_at, table.c.id)
            ).mappings()
        )


def workflow_state(app: Any, workflow_id: Any) -> Any:
    """The stored state of a workflow."""
    from tests.apps import basic

    table = basic.geneva.Workflow.__table__
    with app.app_context(), _reader() as connection:
        return connection.scalar(
            sa.select(table.c.state).where(table.c.id == workflow_id)
        )


def hero_counter(app: Any, hero_id: Any) -> int:
    """The stored counter of a hero."""
    from tests.apps import basic

    table = basic.User.__table__
    with app.app_context(), _reader() as connection:
        return int(
            connection.scalar(sa.select(table.c.counter).where(table.c.id == hero_id))
        )


def perform_step_messages(client: redis.Redis) -> list[tuple[bytes, bytes]]:
    """Every perform_step message in the Redis db: queued or held unacked."""
    found = []
    for key in client.scan_iter():
        kind = client.type(key)
        if kind == b"list":
            items = client.lrange(key, 0, -1)
        elif kind == b"hash":
            items = client.hvals(key)
        elif kind == b"zset":
            items = client.zrange(key, 0, -1)
        else:
            continue
        found += [(key, item) for item in items if b"flask_geneva.perform_step" in item]
    return found


def test_long_wait_lives_in_the_database_and_runs_once_when_due(
    build, celery_process, broker_url
):
    """A 20 s wait over a 5 s visibility timeout stays out of Redis until the dispatcher sends it; the body runs once, not early (R-DSP-01, R-DSP-02, R-DSP-06, BTR-01)."""
    client = redis.Redis.from_url(broker_url)
    client.flushdb()
    settings = {
        "visibility_timeout": VISIBILITY_TIMEOUT,
        "max_broker_delay": MAX_BROKER_DELAY,
    }
    app = build(broker_url, **settings)
    from tests.worker.geneva_worker_app import BrokerLongWait

    workflow_id, hero_id = create_workflow(app, BrokerLongWait, "wait@example.com")
    celery_process("worker", broker_url, **settings)
    celery_process("beat", broker_url, **settings)

    def waiting_execution():
        rows = executions(app, workflow_id)
        if [r["step_name"] for r in rows] == ["begin", "after_wait"]:
            return rows[1]
        return None

    waiting = wait_for(waiting_execution, timeout=40)
    assert waiting["job_id"] == "geneva:deferred"
    # Until the dispatcher's horizon reaches it, nothing for it is in Redis.
    quiet_until = waiting["scheduled_for"] - timedelta(seconds=MAX_BROKER_DELAY + 1)
    checks = 0
    while datetime.now(UTC) < quiet_until:
        assert perform_step_messages(client) == []
        row = executions(app, workflow_id)[1]
        assert (row["state"], row["job_id"]) == ("scheduled", "geneva:deferred")
        checks += 1
        time.sleep(0.25)
    assert checks >= 10

    wait_for(lambda: workflow_state(app, workflow_id) == "finished", timeout=40)
    rows = executions(app, workflow_id)
    assert [(r["step_name"], r["state"], r["outcome"]) for r in rows] == [
        ("begin", "completed", "success"),
        ("after_wait", "completed", "success"),
    ]
    after_wait = rows[1]
    assert after_wait["job_id"] not in (None, "geneva:deferred")
    assert after_wait["started_at"] >= after_wait["scheduled_for"]
    assert hero_counter(app, hero_id) == 11


def test_step_routed_to_critical_runs_only_on_a_critical_worker(
    build, celery_process, broker_url
):
    """A step with job_options queue "critical" waits in that queue until a -Q critical worker takes it (R-JOB-08, R-JOB-02)."""
    client = redis.Redis.from_url(broker_url)
    client.flushdb()
    app = build(broker_url)
    from tests.worker.geneva_worker_app import BrokerCritical
    from tests.worker.geneva_worker_app import BrokerOrdinary

    critical_id, critical_hero = create_workflow(
        app, BrokerCritical, "critical@example.com"
    )
    ordinary_id, _ = create_workflow(app, BrokerOrdinary, "ordinary@example.com")
    celery_process("worker", broker_url, "--queues=celery")

    # The default-queue worker is alive: it finished the ordinary workflow.
    wait_for(lambda: workflow_state(app, ordinary_id) == "finished", timeout=40)
    [waiting] = executions(app, critical_id)
    assert (waiting["state"], waiting["started_at"]) == ("scheduled", None)
    assert workflow_state(app, critical_id) == "ready"
    assert client.llen("critical") == 1

    celery_process("worker", broker_url, "--queues=critical")
    wait_for(lambda: workflow_state(app, critical_id) == "finished", timeout=40)
    [done] = executions(app, critical_id)
    assert (done["step_name"], done["state"], done["outcome"]) == (
        "urgent",
        "completed",
        "success",
    )
    assert done["id"] == waiting["id"]
    assert hero_counter(app, critical_hero) == 1
    assert client.llen("critical") == 0


def test_rabbitmq_worker_runs_three_step_workflow_to_finished(
    amqp_queue, build, celery_process, amqp_url
):
    """On RabbitMQ a worker runs every step once, the waiting one no earlier than due (R-JOB-20, R-SCH-01, R-JOB-23)."""
    app = build(amqp_url, queue=amqp_queue)
    from tests.worker.geneva_worker_app import BrokerThreeSteps

    workflow_id, hero_id = create_workflow(app, BrokerThreeSteps, "rabbit@example.com")
    celery_process("worker", amqp_url, f"--queues={amqp_queue}", queue=amqp_queue)
    wait_for(lambda: workflow_state(app, workflow_id) == "finished", timeout=40)
    rows = executions(app, workflow_id)
    assert [(r["step_name"], r["state"], r["outcome"]) for r in rows] == [
        ("first", "completed", "success"),
        ("second", "completed", "success"),
        ("third", "completed", "success"),
    ]
    assert rows[1]["started_at"] >= rows[1]["scheduled_for"]
    assert all(r["job_id"] not in (None, "geneva:deferred") for r in rows)
    assert hero_counter(app, hero_id) == 111


def test_factory_built_celery_app_runs_steps_with_the_task_logger(
    build, celery_process, broker_url, worker_database_url, tmp_path
):
    """A Celery app made in the Flask factory, stored in app.extensions before init_app, runs steps; log lines name the task once (Celery's task format), then the workflow and execution tags (R-JOB-21, R-LOG-03, R-LOG-04)."""
    redis.Redis.from_url(broker_url).flushdb()
    build(broker_url)  # schema and empty tables
    from tests.worker import factory_app

    app = factory_app.create_app(worker_database_url, broker_url)
    try:
        workflow_id, hero_id = create_workflow(
            app, factory_app.FactoryTwoSteps, "factory@example.com"
        )
        celery_process(
            "worker", broker_url, app_spec="tests.worker.factory_app:celery_app"
        )
        wait_for(lambda: workflow_state(app, workflow_id) == "finished", timeout=40)
        rows = executions(app, workflow_id)
        counter = hero_counter(app, hero_id)
    finally:
        _dispose(app)
    assert [(r["step_name"], r["state"]) for r in rows] == [
        ("first", "completed"),
        ("second", "completed"),
    ]
    assert counter == 11
    log = (tmp_path / "worker-0.log").read_text(errors="replace")
    # The first step runs in the task its job id names; the second may run in
    # the same task, continued inline (R-EXE-70): its lines name that task.
    first_task = rows[0]["job_id"]
    for row in rows:
        tags = (
            f"[FactoryTwoSteps id={workflow_id} hero_type=User hero_id={hero_id}] "
            f"[execution_id={row['id']} step_name={row['step_name']}] "
            "Finished step with outcome"
        )
        named = [
            f"flask_geneva.perform_step[{task_id}]: {tags}"
            for task_id in (row["job_id"], first_task)
        ]
        assert any(line in log for line in named), tags
    assert "task_id=" not in log


def test_worker_warm_shutdown_requests_exit_from_running_steps(
    build, celery_process, broker_url, worker_database_url
):
    """SIGTERM's warm shutdown sets the process-wide exit request a running step sees; the step completes and the worker exits (R-INT-03)."""
    redis.Redis.from_url(broker_url).flushdb()
    build(broker_url)
    from tests.worker import factory_app

    app = factory_app.create_app(worker_database_url, broker_url)
    try:
        workflow_id, hero_id = create_workflow(
            app, factory_app.FactoryAwaitsShutdown, "shutdown@example.com"
        )
        worker = celery_process(
            "worker", broker_url, app_spec="tests.worker.factory_app:celery_app"
        )
        wait_for(
            lambda: (
                [r["state"] for r in executions(app, workflow_id)] == ["in_progress"]
            ),
            timeout=40,
        )
        worker.send_signal(signal.SIGTERM)
        wait_for(lambda: worker.poll() is not None, timeout=40)
        rows = executions(app, workflow_id)
        counter = hero_counter(app, hero_id)
    finally:
        _dispose(app)
    assert worker.returncode == 0
    assert [(r["step_name"], r["state"], r["outcome"]) for r in rows] == [
        ("linger", "completed", "success"),
    ]
    assert counter == 2


def _dispose(app: Any) -> None:
    from tests.apps import basic

    with app.app_context():
        basic.db.session.remove()
        for engine in basic.db.engines.values():
            engine.dispose()


def test_flask_geneva_worker_consumes_geneva_queues_and_embeds_beat(
    build, celery_process, broker_url
):
    """`flask geneva worker --beat` consumes the job-option queues and dispatches deferred waits (R-CLI-03, R-DSP-02, R-JOB-08)."""
    client = redis.Redis.from_url(broker_url)
    client.flushdb()
    settings = {"max_broker_delay": MAX_BROKER_DELAY}
    app = build(broker_url, **settings)
    from tests.worker.geneva_worker_app import BrokerCritical
    from tests.worker.geneva_worker_app import BrokerShortDeferred

    critical_id, _ = create_workflow(app, BrokerCritical, "cli-critical@example.com")
    deferred_id, deferred_hero = create_workflow(
        app, BrokerShortDeferred, "cli-deferred@example.com"
    )
    celery_process("flask-worker", broker_url, "--beat", **settings)

    wait_for(lambda: workflow_state(app, critical_id) == "finished", timeout=40)
    wait_for(lambda: workflow_state(app, deferred_id) == "finished", timeout=40)
    rows = executions(app, deferred_id)
    assert [(r["step_name"], r["state"]) for r in rows] == [
        ("begin", "completed"),
        ("after_wait", "completed"),
    ]
    assert rows[1]["job_id"] not in (None, "geneva:deferred")
    assert rows[1]["started_at"] >= rows[1]["scheduled_for"]
    assert hero_counter(app, deferred_hero) == 11

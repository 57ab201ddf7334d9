"""Real workers, beat and brokers: long waits, queue routing, RabbitMQ (SPEC §6, BTR-01).

Each test starts ``celery worker`` (and ``celery beat``) subprocesses on
``tests.worker.geneva_worker_app`` and reads the stored rows to judge them. Redis
tests use ``GENEVA_TEST_BROKER_URL``; the RabbitMQ test uses
``GENEVA_TEST_AMQP_URL`` (skipped locally when unset, an error under ``CI=true``).
"""

from __future__ import annotations

import base64
import json
import signal
import time
import uuid
from collections.abc import Iterator
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from tests.support.common_workflows import CountingTwoSteps
from tests.support.common_workflows import WaitingThreeSteps
from tests.support.worker_harness import create_workflow
from tests.support.worker_harness import dispose
from tests.support.worker_harness import execution_rows
from tests.support.worker_harness import reader
from tests.support.worker_harness import required_url
from tests.support.worker_harness import wait_for
from tests.support.worker_harness import wait_for_state
from tests.support.worker_harness import workflow_state

VISIBILITY_TIMEOUT = 5
MAX_BROKER_DELAY = 3.0


@pytest.fixture
def amqp_url() -> str:
    """The RabbitMQ URL; skip (locally) or fail (CI) when unset."""
    return required_url("GENEVA_TEST_AMQP_URL")


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


def hero_counter(app: Any, hero_id: Any) -> int:
    """The stored counter of a hero."""
    from tests.apps import basic

    table = basic.User.__table__
    with reader(app) as connection:
        return int(
            connection.scalar(sa.select(table.c.counter).where(table.c.id == hero_id))
        )


def perform_step_messages(
    client: redis.Redis, execution_id: int
) -> list[tuple[bytes, bytes]]:
    """The perform_step messages for one step execution in the Redis db: queued or held unacked.

    Other executions' messages are left out: the step before a wait commits its
    row before the worker acks its own message (``acks_late``), so that message
    may still sit in ``unacked`` for a moment after the wait is written.
    """
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
        found += [
            (key, item)
            for item in items
            if b"flask_geneva.perform_step" in item
            and message_execution_id(item) == execution_id
        ]
    return found


def message_execution_id(raw: bytes) -> int | None:
    """The execution id a stored kombu message carries (its first task argument)."""
    document = json.loads(raw)
    if isinstance(
        document, list
    ):  # the unacked hash holds [message, exchange, routing_key]
        document = document[0]
    body = document["body"]
    if document.get("properties", {}).get("body_encoding") == "base64":
        body = base64.b64decode(body)
    args = json.loads(body)[0]
    return int(args[0]) if args else None


def test_long_wait_lives_in_the_database_and_runs_once_when_due(
    geneva_worker_apps, geneva_process, broker_url
):
    """A 20 s wait over a 5 s visibility timeout stays out of Redis until the dispatcher sends it; the body runs once, not early (R-DSP-01, R-DSP-02, R-DSP-06, BTR-01)."""
    client = redis.Redis.from_url(broker_url)
    client.flushdb()
    settings = {
        "visibility_timeout": VISIBILITY_TIMEOUT,
        "max_broker_delay": MAX_BROKER_DELAY,
    }
    app = geneva_worker_apps(broker_url, **settings)
    from tests.worker.geneva_worker_app import BrokerLongWait

    workflow_id, hero_id = create_workflow(app, BrokerLongWait, "wait@example.com")
    geneva_process("worker", broker_url, **settings)
    geneva_process("beat", broker_url, **settings)

    def waiting_execution():
        rows = execution_rows(app, workflow_id)
        if [r["step_name"] for r in rows] == ["begin", "after_wait"]:
            return rows[1]
        return None

    waiting = wait_for(waiting_execution, timeout=40)
    assert waiting["job_id"] == "geneva:deferred"
    # Until the dispatcher's horizon reaches it, nothing for it is in Redis.
    quiet_until = waiting["scheduled_for"] - timedelta(seconds=MAX_BROKER_DELAY + 1)
    checks = 0
    while datetime.now(UTC) < quiet_until:
        assert perform_step_messages(client, waiting["id"]) == []
        row = execution_rows(app, workflow_id)[1]
        assert (row["state"], row["job_id"]) == ("scheduled", "geneva:deferred")
        checks += 1
        time.sleep(0.25)
    assert checks >= 10

    wait_for_state(app, workflow_id, "finished", timeout=40)
    rows = execution_rows(app, workflow_id)
    assert [(r["step_name"], r["state"], r["outcome"]) for r in rows] == [
        ("begin", "completed", "success"),
        ("after_wait", "completed", "success"),
    ]
    after_wait = rows[1]
    assert after_wait["job_id"] not in (None, "geneva:deferred")
    assert after_wait["started_at"] >= after_wait["scheduled_for"]
    assert hero_counter(app, hero_id) == 11


def test_step_routed_to_critical_runs_only_on_a_critical_worker(
    geneva_worker_apps, geneva_process, broker_url
):
    """A step with job_options queue "critical" waits in that queue until a -Q critical worker takes it (R-JOB-08, R-JOB-02)."""
    client = redis.Redis.from_url(broker_url)
    client.flushdb()
    app = geneva_worker_apps(broker_url)
    from tests.worker.geneva_worker_app import BrokerCritical
    from tests.worker.geneva_worker_app import BrokerOrdinary

    critical_id, critical_hero = create_workflow(
        app, BrokerCritical, "critical@example.com"
    )
    ordinary_id, _ = create_workflow(app, BrokerOrdinary, "ordinary@example.com")
    geneva_process("worker", broker_url, "--queues=celery")

    # The default-queue worker is alive: it finished the ordinary workflow.
    wait_for_state(app, ordinary_id, "finished", timeout=40)
    [waiting] = execution_rows(app, critical_id)
    assert (waiting["state"], waiting["started_at"]) == ("scheduled", None)
    assert workflow_state(app, critical_id) == "ready"
    assert client.llen("critical") == 1

    geneva_process("worker", broker_url, "--queues=critical")
    wait_for_state(app, critical_id, "finished", timeout=40)
    [done] = execution_rows(app, critical_id)
    assert (done["step_name"], done["state"], done["outcome"]) == (
        "urgent",
        "completed",
        "success",
    )
    assert done["id"] == waiting["id"]
    assert hero_counter(app, critical_hero) == 1
    assert client.llen("critical") == 0


def test_rabbitmq_worker_runs_three_step_workflow_to_finished(
    amqp_queue, geneva_worker_apps, geneva_process, amqp_url
):
    """On RabbitMQ a worker runs every step once, the waiting one no earlier than due (R-JOB-20, R-SCH-01, R-JOB-23)."""
    app = geneva_worker_apps(amqp_url, queue=amqp_queue)

    workflow_id, hero_id = create_workflow(app, WaitingThreeSteps, "rabbit@example.com")
    geneva_process("worker", amqp_url, f"--queues={amqp_queue}", queue=amqp_queue)
    wait_for_state(app, workflow_id, "finished", timeout=40)
    rows = execution_rows(app, workflow_id)
    assert [(r["step_name"], r["state"], r["outcome"]) for r in rows] == [
        ("first", "completed", "success"),
        ("second", "completed", "success"),
        ("third", "completed", "success"),
    ]
    assert rows[1]["started_at"] >= rows[1]["scheduled_for"]
    assert all(r["job_id"] not in (None, "geneva:deferred") for r in rows)
    assert hero_counter(app, hero_id) == 111


def test_factory_built_celery_app_runs_steps_with_the_task_logger(
    geneva_worker_apps, geneva_process, broker_url, worker_database_url, tmp_path
):
    """A Celery app made in the Flask factory, stored in app.extensions before init_app, runs steps; log lines name the task once (Celery's task format), then the workflow and execution tags (R-JOB-21, R-LOG-03, R-LOG-04)."""
    redis.Redis.from_url(broker_url).flushdb()
    geneva_worker_apps(broker_url)  # schema and empty tables
    from tests.worker import factory_app

    app = factory_app.create_app(worker_database_url, broker_url)
    try:
        workflow_id, hero_id = create_workflow(
            app, CountingTwoSteps, "factory@example.com"
        )
        geneva_process(
            "worker", broker_url, app_spec="tests.worker.factory_app:celery_app"
        )
        wait_for_state(app, workflow_id, "finished", timeout=40)
        rows = execution_rows(app, workflow_id)
        counter = hero_counter(app, hero_id)
    finally:
        dispose(app)
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
            f"[CountingTwoSteps id={workflow_id} hero_type=User hero_id={hero_id}] "
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
    geneva_worker_apps, geneva_process, broker_url, worker_database_url
):
    """SIGTERM's warm shutdown sets the process-wide exit request a running step sees; the step completes and the worker exits (R-INT-03)."""
    redis.Redis.from_url(broker_url).flushdb()
    geneva_worker_apps(broker_url)
    from tests.worker import factory_app

    app = factory_app.create_app(worker_database_url, broker_url)
    try:
        workflow_id, hero_id = create_workflow(
            app, factory_app.FactoryAwaitsShutdown, "shutdown@example.com"
        )
        worker = geneva_process(
            "worker", broker_url, app_spec="tests.worker.factory_app:celery_app"
        )
        wait_for(
            lambda: (
                [r["state"] for r in execution_rows(app, workflow_id)]
                == ["in_progress"]
            ),
            timeout=40,
        )
        worker.send_signal(signal.SIGTERM)
        wait_for(lambda: worker.poll() is not None, timeout=40)
        rows = execution_rows(app, workflow_id)
        counter = hero_counter(app, hero_id)
    finally:
        dispose(app)
    assert worker.returncode == 0
    assert [(r["step_name"], r["state"], r["outcome"]) for r in rows] == [
        ("linger", "completed", "success"),
    ]
    assert counter == 2


def test_flask_geneva_worker_consumes_geneva_queues_and_embeds_beat(
    geneva_worker_apps, geneva_process, broker_url
):
    """`flask geneva worker --beat` consumes the job-option queues and dispatches deferred waits (R-CLI-03, R-DSP-02, R-JOB-08)."""
    client = redis.Redis.from_url(broker_url)
    client.flushdb()
    settings = {"max_broker_delay": MAX_BROKER_DELAY}
    app = geneva_worker_apps(broker_url, **settings)
    from tests.worker.geneva_worker_app import BrokerCritical
    from tests.worker.geneva_worker_app import BrokerShortDeferred

    critical_id, _ = create_workflow(app, BrokerCritical, "cli-critical@example.com")
    deferred_id, deferred_hero = create_workflow(
        app, BrokerShortDeferred, "cli-deferred@example.com"
    )
    geneva_process("flask-worker", broker_url, "--beat", **settings)

    wait_for_state(app, critical_id, "finished", timeout=40)
    wait_for_state(app, deferred_id, "finished", timeout=40)
    rows = execution_rows(app, deferred_id)
    assert [(r["step_name"], r["state"]) for r in rows] == [
        ("begin", "completed"),
        ("after_wait", "completed"),
    ]
    assert rows[1]["job_id"] not in (None, "geneva:deferred")
    assert rows[1]["started_at"] >= rows[1]["scheduled_for"]
    assert hero_counter(app, deferred_hero) == 11

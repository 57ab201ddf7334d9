"""A worker killed between an inline claim and the claimed step's body (R-EXE-70).

The worker imports this module (``--include``). A ``precondition`` receiver, sent
for a step claimed inline right before its body would start (R-EXE-74), SIGKILLs
the worker once at ``s04``: the execution was claimed by ``s03``'s finalize
(committed ``in_progress`` with the worker's id) and its body never ran. Each
step adds its own bit to the hero's counter, so a step that ran twice or never
shows in the sum.
"""

from __future__ import annotations

import os
import signal as os_signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from flask_geneva import signals
from flask_geneva import step
from tests.apps import basic
from tests.apps.basic import geneva
from tests.support.worker_harness import create_workflow
from tests.support.worker_harness import wait_for
from tests.support.worker_harness import wait_for_state
from tests.worker import heartbeat_worker

FLAG_DIR_VARIABLE = "GENEVA_TEST_INLINE_KILL_FLAGS"
STEPS = 8
KILL_AT = "s04"


def _add_bit(workflow: Any, bit: int) -> None:
    basic.db.session.execute(
        sa.update(basic.User)
        .where(basic.User.id == workflow.hero_id)
        .values(counter=basic.User.counter + bit)
    )


def _steps() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__module__": __name__}
    for index in range(STEPS):

        def body(self: Any, _bit: int = 1 << index) -> None:
            _add_bit(self, _bit)

        body.__name__ = f"s{index:02d}"
        namespace[body.__name__] = step(body)
    return namespace


InlineKilledChain = type("InlineKilledChain", (geneva.Workflow,), _steps())


def _kill_before_the_body(sender: Any, payload: dict[str, Any]) -> None:
    """In the worker: SIGKILL it once, before ``s04``'s body (armed by the test)."""
    flags = os.environ.get(FLAG_DIR_VARIABLE)
    if not flags or payload.get("step_name") != KILL_AT:
        return
    armed, killed = Path(flags) / "armed", Path(flags) / "killed"
    if armed.exists() and not killed.exists():
        killed.write_text(str(payload["execution_id"]))
        os.kill(os.getpid(), os_signal.SIGKILL)


signals.precondition.connect(
    _kill_before_the_body, sender=InlineKilledChain, weak=False
)


def test_a_claimed_step_whose_worker_died_before_its_body_runs_once(
    start_worker, broker_url, worker_database_url, tmp_path, monkeypatch
):
    """The execution claimed inline and left ``in_progress`` by the killed worker
    is recovered (dead worker, R-WRK-06; housekeeping, R-HK-20/24) and its step
    then runs exactly once; every other step ran once too (R-EXE-70, R-WRK-18)."""
    app = heartbeat_worker.build_app(
        broker_url, worker_database_url, tmp_path, monkeypatch, FLAG_DIR_VARIABLE
    )
    app.config["GENEVA_STUCK_IN_PROGRESS_THRESHOLD"] = timedelta(minutes=10)
    app.config["GENEVA_WORKER_HEARTBEAT_INTERVAL"] = heartbeat_worker.HEARTBEAT
    app.config["GENEVA_WORKER_DEAD_AFTER"] = heartbeat_worker.DEAD_AFTER
    geneva.reload_settings(app)
    (tmp_path / "armed").touch()
    workflow_id, hero_id = create_workflow(
        app, InlineKilledChain, "inline-killed@example.com"
    )
    include = ("--include", "tests.worker.test_inline_claim_killed")
    start_worker(*include).wait(timeout=60)
    killed_id = (tmp_path / "killed").read_text()
    log = (tmp_path / "worker-0.log").read_text(errors="replace")
    assert f"continuing inline with step '{KILL_AT}'" in log, log[-3000:]
    [claimed] = [
        row
        for row in heartbeat_worker.executions(app, workflow_id)
        if str(row.id) == killed_id
    ]
    assert claimed.state == "in_progress"
    assert claimed.worker_id is not None  # the dead worker's (R-WRK-05)

    start_worker(*include)  # its heartbeats make the killed one judged dead

    def recovered() -> int:
        return heartbeat_worker.run_housekeeping(app)["stuck_in_progress_recovered"]

    assert wait_for(recovered, timeout=60, interval=0.5) == 1
    wait_for_state(app, workflow_id, "finished")
    rows = heartbeat_worker.executions(app, workflow_id)
    assert [(r.state, r.outcome) for r in rows if r.step_name == KILL_AT] == [
        ("completed", "recovered"),
        ("completed", "success"),
    ]
    assert str(rows[[r.step_name for r in rows].index(KILL_AT)].id) == killed_id
    with app.app_context():
        counter = basic.db.session.get(basic.User, hero_id).counter
        basic.db.session.remove()
    assert counter == (1 << STEPS) - 1, rows

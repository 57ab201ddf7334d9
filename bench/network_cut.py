"""How long a step's heartbeat and create() block during a network cut, with the
default settings (issue 41, R-FLT-31, R-FLT-53).

Starts a PostgreSQL server of its own inside a network namespace of its own
(``tests/support/private_database_servers.py``, ``tests/support/network_namespaces.py``;
needs root), builds an app with flask_geneva's defaults
(``GENEVA_HEARTBEAT_TIMEOUT`` 5 s, ``GENEVA_CONNECTION_TIMEOUT`` 10 s) and, for
each round, cuts the network and measures:

- ``heartbeat``: a registered worker's step heartbeat (``heartbeat_now``);
- ``create (pooled)``: ``create()`` whose session takes the pool's open
  connection (its first statement is sent into the cut);
- ``create (new)``: ``create()`` that must open a new connection;
- ``create (pre-ping)``: ``create()`` on an engine with ``pool_pre_ping``.

Prints each measure's min/median/max in seconds. Usage::

    python bench/network_cut.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flask_geneva import DatabaseUnavailableError
from flask_geneva import reset_column_caches
from flask_geneva import step
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.engine.workers import step_heartbeats
from flask_geneva.ext.app_state import current_context
from tests.apps import basic
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.network_namespaces import NetworkNamespace
from tests.support.network_namespaces import namespaces_unavailable
from tests.support.network_namespaces import network_namespace
from tests.support.private_database_servers import PrivatePostgres
from tests.support.schema_setup import install_schema


class BenchCut(geneva.Workflow):
    may_proceed_without_hero = True

    @step
    def first(self) -> None:
        pass


def _timed_in_cut(namespace: NetworkNamespace, action: Callable[[], Any]) -> float:
    namespace.cut()
    try:
        started = time.monotonic()
        action()
        return time.monotonic() - started
    finally:
        namespace.restore()


def _create_refused() -> None:
    try:
        BenchCut.create(hero=None)
    except DatabaseUnavailableError:
        return
    raise AssertionError("create() succeeded during the cut")


def _warm_pool() -> None:
    # Idle connections that gave up during an earlier cut (keepalives) go.
    db.session.remove()
    db.engine.dispose()
    db.session.execute(db.text("SELECT 1"))
    db.session.commit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    reason = namespaces_unavailable()
    if reason is not None:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    measures: dict[str, list[float]] = {}
    with network_namespace() as namespace, PrivatePostgres(namespace) as server:
        url = server.url
        app = basic.create_app(url)
        pinging = basic.create_app(
            url, SQLALCHEMY_ENGINE_OPTIONS={"pool_pre_ping": True}
        )
        with app.app_context():
            install_schema(app)
            db.session.remove()
        reset_column_caches()
        with app.app_context():
            registration = worker_registry.register_worker(current_context())
            try:
                for _ in range(rounds):
                    measures.setdefault("heartbeat", []).append(
                        _timed_in_cut(
                            namespace, lambda: step_heartbeats.heartbeat_now(db.session)
                        )
                    )
                    time.sleep(12)  # the late write ends (or gives up)
            finally:
                worker_registry.deregister_workers()
            assert registration is not None
            for _ in range(rounds):
                _warm_pool()
                measures.setdefault("create (pooled)", []).append(
                    _timed_in_cut(namespace, _create_refused)
                )
                db.engine.dispose()
                measures.setdefault("create (new)", []).append(
                    _timed_in_cut(namespace, _create_refused)
                )
            db.session.remove()
            db.engine.dispose()
        with pinging.app_context():
            for _ in range(rounds):
                _warm_pool()
                measures.setdefault("create (pre-ping)", []).append(
                    _timed_in_cut(namespace, _create_refused)
                )
            db.session.remove()
            db.engine.dispose()
    for name, values in measures.items():
        print(
            f"{name:18} min {min(values):6.2f} s  median "
            f"{statistics.median(values):6.2f} s  max {max(values):6.2f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Celery prefork children open their own database connections.

A prefork worker forks its pool children from the Celery parent. If the parent
used the database before forking (the worker module ran a query at import time,
say), each child inherits the parent's connection pool with its open sockets,
and several processes then talk over one connection: tasks fail with protocol
errors or ``ResourceClosedError`` and workflows stay ``performing``.

SQLAlchemy's documentation ("Using Connection Pools with Multiprocessing or
os.fork()") prescribes calling ``Engine.dispose(close=False)`` in the child
before it uses the engine: the child gets a fresh, empty pool, and the
inherited connections are left alone for the parent to use and close. This
module does that for every engine of the registered Flask apps, on Celery's
``worker_process_init`` signal, which Celery sends in each pool child when it
starts. :func:`flask_geneva.ext.tasks.register_tasks` connects it.

The same signals register the processes that execute steps in the worker
registry (:mod:`flask_geneva.engine.workers.registry`, R-WRK-02/04): each prefork child
on ``worker_process_init``; the worker's main process on ``worker_init`` when
its pool runs tasks in that process (``solo``, ``threads``, ``eventlet``,
``gevent``); ``worker_process_shutdown`` and ``worker_shutdown`` deregister.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from flask import Flask

from flask_geneva.core.tagged_logging import module_logger

__all__ = ["dispose_engines_in_child", "register_app_workers", "watch_app"]

_log = module_logger("flask_geneva")
_UID = "flask_geneva.dispose_engines_in_child"
_REGISTRY_UID = "flask_geneva.worker_registry"
#: The Celery worker this process belongs to, recorded on ``worker_init`` in the
#: main process and inherited by the prefork children.
_worker_node: dict[str, Any] = {"node_name": None, "queues": ()}
_lock = threading.Lock()
_apps: weakref.WeakSet[Flask] = weakref.WeakSet()
_connected = False


def watch_app(app: Flask) -> None:
    """Dispose ``app``'s engine pools in every Celery pool child started later.

    Connects a receiver to Celery's ``worker_process_init`` once per process;
    every app passed here is handled by it (the apps are held weakly).

    Args:
        app: A Flask app with flask_geneva registered (``init_app``).
    """
    global _connected
    with _lock:
        _apps.add(app)
        if _connected:
            return
        from celery.signals import worker_init
        from celery.signals import worker_process_init
        from celery.signals import worker_process_shutdown
        from celery.signals import worker_shutdown

        worker_process_init.connect(
            _on_worker_process_init, weak=False, dispatch_uid=_UID
        )
        worker_init.connect(
            _on_worker_init, weak=False, dispatch_uid=f"{_REGISTRY_UID}.init"
        )
        worker_process_shutdown.connect(
            _on_shutdown, weak=False, dispatch_uid=f"{_REGISTRY_UID}.process_shutdown"
        )
        worker_shutdown.connect(
            _on_shutdown, weak=False, dispatch_uid=f"{_REGISTRY_UID}.shutdown"
        )
        _connected = True


def dispose_engines_in_child(app: Flask) -> int:
    """Give ``app``'s engines fresh pools in a forked child process.

    Calls ``Engine.dispose(close=False)`` on every engine of the app's
    Flask-SQLAlchemy instance (all binds): the pools the child inherited are
    dropped without closing their connections, which still belong to the parent
    process; the next checkout opens a new connection. Call it at the start of a
    child process you fork yourself; Celery pool children get it through
    :func:`watch_app`.

    Args:
        app: A Flask app with flask_geneva registered.

    Returns:
        The number of engines disposed (0 when flask_geneva is not registered).
    """
    state = app.extensions.get("geneva")
    if state is None:
        return 0
    with app.app_context():
        engines = list(state.geneva.db.engines.values())
    for engine in engines:
        engine.dispose(close=False)
    return len(engines)


def _on_worker_process_init(*args: Any, **kwargs: Any) -> None:
    with _lock:
        apps = list(_apps)
    disposed = sum(dispose_engines_in_child(app) for app in apps)
    _log.debug("worker process started: disposed %d inherited engine pools", disposed)
    # A prefork child executes steps: it registers as a worker of its own.
    for app in apps:
        register_app_workers(app)


def register_app_workers(app: Flask) -> bool:
    """Register this process in ``app``'s worker registry (R-WRK-02).

    Called by the Celery signal receivers; an error is logged, never raised:
    a worker without a registration still runs steps, its claims just name no
    worker (recovery then falls back to age, R-WRK-06).

    Args:
        app: A Flask app with flask_geneva registered.

    Returns:
        True if this process is now registered for the app's database.
    """
    from flask_geneva.engine.workers import registry as worker_registry
    from flask_geneva.ext.app_state import current_context

    if app.extensions.get("geneva") is None:
        return False
    try:
        with app.app_context():
            registration = worker_registry.register_worker(
                current_context(),
                node_name=_worker_node["node_name"],
                queues=_worker_node["queues"],
            )
            app.extensions["geneva"].geneva.db.session.remove()
    except Exception as error:  # noqa: BLE001 - never stop a worker from starting
        _log.warning(
            "could not register worker process %d: %s: %s",
            os.getpid(),
            type(error).__name__,
            error,
        )
        return False
    return registration is not None


def _on_worker_init(sender: Any = None, **kwargs: Any) -> None:
    """Record the node name and queues; register if the pool runs tasks here."""
    from celery.concurrency import get_implementation
    from celery.concurrency.prefork import TaskPool as PreforkPool

    if sender is None:
        return
    queues = sender.app.amqp.queues
    selected = queues.consume_from or queues
    _worker_node["node_name"] = getattr(sender, "hostname", None)
    _worker_node["queues"] = tuple(sorted(str(name) for name in selected))
    pool_cls = get_implementation(sender.pool_cls)
    if isinstance(pool_cls, type) and issubclass(pool_cls, PreforkPool):
        return  # the children register on worker_process_init
    with _lock:
        apps = list(_apps)
    for app in apps:
        register_app_workers(app)
        _warn_unenforced_timeouts(app, pool_cls)


def _warn_unenforced_timeouts(app: Flask, pool_cls: Any) -> None:
    """Log that this pool cannot interrupt steps with a timeout (R-STO-05)."""
    from flask_geneva.ext import timeout_checks

    state = app.extensions.get("geneva")
    if state is None:
        return
    name = getattr(pool_cls, "__module__", str(pool_cls)).rpartition(".")[2]
    timeout_checks.warn_if_timeouts_unenforced(
        name, state.geneva.workflow_classes.values()
    )


def _on_shutdown(*args: Any, **kwargs: Any) -> None:
    """Deregister this process's workers on a clean shutdown (R-WRK-04)."""
    from flask_geneva.engine.workers import registry as worker_registry

    deleted = worker_registry.deregister_workers()
    _log.debug("worker process %d deregistered %d worker rows", os.getpid(), deleted)

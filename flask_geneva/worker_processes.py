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
starts. :func:`flask_geneva.tasks.register_tasks` connects it.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

from flask import Flask

__all__ = ["dispose_engines_in_child", "watch_app"]

_log = logging.getLogger("flask_geneva")
_UID = "flask_geneva.dispose_engines_in_child"
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
        from celery.signals import worker_process_init

        worker_process_init.connect(
            _on_worker_process_init, weak=False, dispatch_uid=_UID
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

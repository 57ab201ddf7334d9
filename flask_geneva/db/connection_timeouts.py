"""Connections that give up on a silent database (R-FLT-40..43).

A network cut between a process and its database sends no error: a connect
waits for an answer to its SYN, a statement or a COMMIT for its reply, until
TCP itself gives up (about 15 minutes on Linux; psycopg waits 130 s for a
connect). ``create()`` and a step's session would hang that long. The drivers
can bound it per connection, and only at connect time: libpq (psycopg,
psycopg2) with ``connect_timeout``, ``tcp_user_timeout`` (data sent and not
acknowledged) and TCP keepalives (a reply that never comes); PyMySQL and
mysqlclient with ``connect_timeout`` (their ``read_timeout`` would also end a
long query, so it stays the app's choice).

:func:`set_up_engines` gives each engine of the app these parameters as
defaults, through a ``do_connect`` listener (SQLAlchemy's public hook for
changing the arguments of ``connect()``): a parameter the app set itself, in
the URL, in ``connect_args`` or in a connection string, is kept. The
registration's own heartbeat pool (a copy of the engine's pool) connects
through the same listener. ``Geneva.init_app`` calls it with
``GENEVA_CONNECTION_TIMEOUT``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from typing import Final

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import exc as sa_exc

from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db.mysql import configured_engine_options

__all__ = [
    "LIBPQ_DRIVERS",
    "MYSQL_DRIVERS",
    "bounded_parameters",
    "connection_failure",
    "describe_failure",
    "install_connection_timeouts",
    "set_up_engines",
    "unbounded_reads_of",
    "unbounded_reads_warning",
]

_log = module_logger("flask_geneva")

#: The PostgreSQL drivers built on libpq, which takes the parameters below.
LIBPQ_DRIVERS: Final = ("psycopg", "psycopg2", "psycopg2cffi")
#: The MySQL/MariaDB drivers that take ``connect_timeout`` and ``read_timeout``.
MYSQL_DRIVERS: Final = ("pymysql", "mysqldb")
#: libpq's first version with ``tcp_user_timeout`` (12).
_TCP_USER_TIMEOUT_LIBPQ: Final = 120000
#: Keepalive probes a silent connection gets before it is given up.
_KEEPALIVE_PROBES: Final = 3
_INSTALLED_FLAG = "geneva_connection_timeouts"
_CHECKED_FLAG = "geneva_connection_timeouts_checked"
_UNBOUNDED_KEY = "geneva_unbounded_reads"


def _libpq_version(dbapi: Any) -> int | None:
    """The libpq version of a psycopg (3) or psycopg2 module, or None if unknown."""
    readers = (
        getattr(getattr(dbapi, "pq", None), "version", None),  # psycopg 3
        getattr(getattr(dbapi, "extensions", None), "libpq_version", None),  # 2
    )
    for read in readers:
        if callable(read):
            try:
                return int(read())
            except Exception:  # noqa: BLE001, S112 - an unexpected driver API
                continue
    return None


def bounded_parameters(dialect: sa.Dialect, timeout: timedelta) -> dict[str, Any]:
    """The ``connect()`` keyword arguments that bound a silent connection.

    Args:
        dialect: The engine's dialect (its name and driver decide).
        timeout: ``GENEVA_CONNECTION_TIMEOUT``, 1 second or more.

    Returns:
        For libpq drivers: ``connect_timeout`` (whole seconds, at least 2, as
        libpq counts), ``tcp_user_timeout`` (milliseconds; libpq 12 or later),
        ``keepalives`` 1, ``keepalives_idle`` (half the timeout),
        ``keepalives_interval`` (a quarter) and ``keepalives_count`` 3, all
        whole seconds of at least 1; for PyMySQL and mysqlclient:
        ``connect_timeout``; ``{}`` for any other driver.
    """
    seconds = timeout.total_seconds()
    if dialect.name == "postgresql" and dialect.driver in LIBPQ_DRIVERS:
        parameters: dict[str, Any] = {"connect_timeout": max(2, math.ceil(seconds))}
        version = _libpq_version(getattr(dialect, "loaded_dbapi", None))
        if version is not None and version >= _TCP_USER_TIMEOUT_LIBPQ:
            parameters["tcp_user_timeout"] = int(seconds * 1000)
        parameters.update(
            keepalives=1,
            keepalives_idle=max(1, int(seconds // 2)),
            keepalives_interval=max(1, int(seconds // 4)),
            keepalives_count=_KEEPALIVE_PROBES,
        )
        return parameters
    if dialect.name in ("mysql", "mariadb") and dialect.driver in MYSQL_DRIVERS:
        return {"connect_timeout": max(1, math.ceil(seconds))}
    return {}


def _named_in_text(key: str, cargs: Any, cparams: Mapping[str, Any]) -> bool:
    """Whether a connection string among the arguments sets ``key`` itself."""
    texts = [value for value in cargs if isinstance(value, str)]
    texts += [
        value
        for name in ("dsn", "conninfo")
        if isinstance(value := cparams.get(name), str)
    ]
    return any(f"{key}=" in text.replace(" =", "=") for text in texts)


def install_connection_timeouts(engine: sa.Engine, timeout: timedelta) -> bool:
    """Give every new DBAPI connection of ``engine`` :func:`bounded_parameters`.

    A ``do_connect`` listener adds each parameter the connection's arguments
    do not already name (the URL's query, ``connect_args``, a ``dsn`` or
    connection string), so the app's own values win. Connections opened
    before the call keep what they have. Idempotent; does nothing for a
    driver without such parameters (SQLite, or see :func:`bounded_parameters`).

    Args:
        engine: The engine to change.
        timeout: ``GENEVA_CONNECTION_TIMEOUT``.

    Returns:
        True when the listener was installed by this call.
    """
    parameters = bounded_parameters(engine.dialect, timeout)
    if not parameters or engine.__dict__.get(_INSTALLED_FLAG):
        return False
    engine.__dict__[_INSTALLED_FLAG] = True

    def _bounded(dialect: Any, record: Any, cargs: Any, cparams: Any) -> None:
        for key, value in parameters.items():
            if key not in cparams and not _named_in_text(key, cargs, cparams):
                cparams[key] = value

    event.listen(engine, "do_connect", _bounded)
    return True


def unbounded_reads_warning(
    engine: sa.Engine, engine_options: Mapping[str, Any]
) -> str | None:
    """What stays unbounded on ``engine`` during a network cut, or None.

    A cheap check at ``init_app`` (no connection): the URL's query and the
    ``connect_args`` the app configured.

    Args:
        engine: The engine.
        engine_options: The options the app configured for it (see
            :func:`flask_geneva.db.mysql.configured_engine_options`).

    Returns:
        The warning's text for a MySQL/MariaDB engine without ``read_timeout``
        (a read waits until TCP gives up) and for a PostgreSQL or MySQL driver
        that takes none of the parameters; None otherwise (SQLite included).
    """
    dialect = engine.dialect
    if dialect.name not in ("postgresql", "mysql", "mariadb"):
        return None
    if not bounded_parameters(dialect, timedelta(seconds=10)):
        return (
            f"the {dialect.name}+{dialect.driver} engine {engine.url!r} takes no "
            "connection timeouts flask_geneva knows: during a network cut "
            "create(), steps and heartbeats may wait until TCP gives up (about 15 "
            "minutes); set the driver's own timeouts, or use psycopg, psycopg2, "
            "PyMySQL or mysqlclient (R-FLT-42)"
        )
    if dialect.name == "postgresql":
        return None
    connect_args = engine_options.get("connect_args") or {}
    if "read_timeout" in engine.url.query or "read_timeout" in connect_args:
        return None
    return (
        f"the {dialect.name} engine {engine.url!r} has no read_timeout: during a "
        "network cut a statement or COMMIT of create() or of a step waits until "
        "TCP gives up (about 15 minutes); set read_timeout and write_timeout in "
        "SQLALCHEMY_ENGINE_OPTIONS['connect_args'] (seconds, longer than your "
        "longest query) (R-FLT-41)"
    )


def set_up_engines(
    engines: Mapping[str | None, sa.Engine],
    app_config: Mapping[str, Any],
    *,
    timeout: timedelta | None,
) -> None:
    """Bound the app's engines' silent connections (R-FLT-40..42).

    Each engine gets :func:`install_connection_timeouts`; what stays unbounded
    (:func:`unbounded_reads_warning`) is logged at INFO on the ``flask_geneva``
    logger and kept on the engine, for the worker registration to log as a
    WARNING (:func:`unbounded_reads_of`): every process, a CLI command
    included, checks it, and the workers, whose steps it concerns, say it out
    loud. Nothing happens with ``timeout`` None.

    Args:
        engines: ``db.engines`` (bind key to engine), read in the app's context.
        app_config: ``app.config``, for the engine options the app configured.
        timeout: ``GENEVA_CONNECTION_TIMEOUT``.
    """
    if timeout is None:
        return
    for bind_key, engine in engines.items():
        if engine.__dict__.get(_CHECKED_FLAG):
            continue
        engine.__dict__[_CHECKED_FLAG] = True
        install_connection_timeouts(engine, timeout)
        warning = unbounded_reads_warning(
            engine, configured_engine_options(app_config, bind_key)
        )
        if warning is not None:
            engine.__dict__[_UNBOUNDED_KEY] = warning
            _log.info("flask_geneva: %s", warning)


def unbounded_reads_of(engine: sa.Engine) -> str | None:
    """What :func:`set_up_engines` found unbounded on ``engine``, or None."""
    warning: str | None = engine.__dict__.get(_UNBOUNDED_KEY)
    return warning


def connection_failure(error: BaseException) -> bool:
    """Whether ``error`` is a failed connection rather than a refused statement.

    True for SQLAlchemy's wrapping of a DBAPI error that invalidated its
    connection (the server closed it, or the connection gave up waiting:
    ``tcp_user_timeout``, keepalives, ``read_timeout``) and for a connect that
    failed (refused, or no answer within ``connect_timeout``), which carries
    no statement. False for everything else: a lock timeout, a constraint, a
    deadlock (R-FLT-50).
    """
    if not isinstance(error, sa_exc.DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    return error.statement is None and isinstance(
        error, sa_exc.OperationalError | sa_exc.InterfaceError
    )


def describe_failure(error: sa_exc.DBAPIError, *, limit: int = 300) -> str:
    """``<driver error class>: <its message on one line>``, cut at ``limit``."""
    original = error.orig if error.orig is not None else error
    text = " ".join(str(original).split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(original).__name__}: {text}"

"""MySQL/MariaDB: READ COMMITTED sessions, so a lock stays on its own rows (R-CFG-04).

InnoDB's default isolation, REPEATABLE READ, makes a locking read or an UPDATE
lock the index range it scanned (next-key and gap locks), not only the rows it
matched. An operator's lock on one workflow's active step executions then also
covers the gap before the next workflow's ``(workflow_id, state)`` entries (with
stale statistics, the whole ``state`` index), so that workflow's claim or
finalize waits, times out (1205) or deadlocks. Under READ COMMITTED InnoDB locks
only the rows matched; geneva relies on locking reads, never on a snapshot that
repeats, as on PostgreSQL, whose default is READ COMMITTED. Django has defaulted
MySQL to READ COMMITTED since 2.0 for the same reason.

:func:`install_read_committed` makes every new connection of an engine READ
COMMITTED (one statement per connection, none per transaction);
:func:`warn_about_gap_locking` logs one warning for an engine that stays
REPEATABLE READ or SERIALIZABLE. ``Geneva.init_app`` calls both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from typing import Final

import sqlalchemy as sa
from sqlalchemy import event

from flask_geneva.core.tagged_logging import module_logger

__all__ = [
    "GAP_LOCKING_LEVELS",
    "READ_COMMITTED",
    "chosen_isolation_level",
    "configured_engine_options",
    "install_read_committed",
    "set_up_engines",
    "warn_about_gap_locking",
]

_log = module_logger("flask_geneva")

READ_COMMITTED: Final = "READ COMMITTED"
#: InnoDB isolation levels whose locking reads and UPDATEs lock index gaps.
GAP_LOCKING_LEVELS = ("REPEATABLE READ", "SERIALIZABLE")
_MYSQL_DIALECTS = ("mysql", "mariadb")
_INSTALLED_FLAG = "geneva_read_committed"
_CHECKED_FLAG = "geneva_isolation_checked"


def _is_mysql(engine: sa.Engine) -> bool:
    return engine.dialect.name in _MYSQL_DIALECTS


def _normalized(level: Any) -> str:
    return str(level).upper().replace("-", " ").replace("_", " ")


def chosen_isolation_level(
    engine: sa.Engine, engine_options: Mapping[str, Any] | None = None
) -> str | None:
    """The isolation level the application chose for ``engine`` itself, or None.

    Args:
        engine: The engine.
        engine_options: The options the engine was created with as the app
            configured them (``SQLALCHEMY_ENGINE_OPTIONS`` for the default
            engine, the bind's dict in ``SQLALCHEMY_BINDS``); their
            ``isolation_level`` or ``execution_options["isolation_level"]``.

    Returns:
        The level, upper case with spaces (``"REPEATABLE READ"``), from those
        options or else from ``engine.get_execution_options()``; None when the
        app chose none.
    """
    options = dict(engine_options or {})
    execution_options = options.get("execution_options") or {}
    for level in (
        options.get("isolation_level"),
        execution_options.get("isolation_level"),
        engine.get_execution_options().get("isolation_level"),
    ):
        if level is not None:
            return _normalized(level)
    return None


def configured_engine_options(
    app_config: Mapping[str, Any], bind_key: str | None
) -> Mapping[str, Any]:
    """The engine options Flask-SQLAlchemy's config gives the engine of ``bind_key``.

    Args:
        app_config: ``app.config``.
        bind_key: None for the default engine, else a key of ``SQLALCHEMY_BINDS``.

    Returns:
        ``SQLALCHEMY_ENGINE_OPTIONS`` for the default engine, the bind's dict in
        ``SQLALCHEMY_BINDS`` (a bare URL has none) for another; ``{}`` if none.
    """
    if bind_key is None:
        options = app_config.get("SQLALCHEMY_ENGINE_OPTIONS")
    else:
        options = (app_config.get("SQLALCHEMY_BINDS") or {}).get(bind_key)
    return options if isinstance(options, Mapping) else {}


def set_up_engines(
    engines: Mapping[str | None, sa.Engine],
    app_config: Mapping[str, Any],
    *,
    read_committed: bool,
) -> None:
    """Give an app's MySQL/MariaDB engines READ COMMITTED or a warning (R-CFG-04).

    Each engine whose isolation level the app did not choose (see
    :func:`chosen_isolation_level`) gets :func:`install_read_committed` when
    ``read_committed`` is True; every engine then gets
    :func:`warn_about_gap_locking`. Other dialects are left alone.

    Args:
        engines: ``db.engines`` (bind key to engine), read in the app's context.
        app_config: ``app.config``, for the engine options the app configured.
        read_committed: ``GENEVA_MYSQL_READ_COMMITTED``.
    """
    for bind_key, engine in engines.items():
        if not _is_mysql(engine):
            continue
        options = configured_engine_options(app_config, bind_key)
        if read_committed and chosen_isolation_level(engine, options) is None:
            install_read_committed(engine)
        warn_about_gap_locking(engine)


def install_read_committed(engine: sa.Engine) -> bool:
    """Make every new DBAPI connection of a MySQL/MariaDB ``engine`` READ COMMITTED.

    Installs a pool ``connect`` listener (first in line, so SQLAlchemy's
    first-connect initialisation already reads READ COMMITTED as the engine's
    default isolation level and its reset-on-return keeps it) that runs
    ``SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED`` once per
    connection through the dialect's ``set_isolation_level``. An
    ``isolation_level`` given to ``create_engine`` still wins: SQLAlchemy
    applies it after this listener (R-CFG-04).

    Idempotent; does nothing on other dialects. Call before the engine opens
    its first connection (``Geneva.init_app`` does): a connection opened
    earlier keeps its level, and :func:`warn_about_gap_locking` then warns.

    Args:
        engine: The engine to change.

    Returns:
        True when the listener was installed by this call.
    """
    if not _is_mysql(engine) or engine.__dict__.get(_INSTALLED_FLAG):
        return False
    engine.__dict__[_INSTALLED_FLAG] = True
    dialect = engine.dialect

    def _read_committed(dbapi_connection: Any, connection_record: Any) -> None:
        dialect.set_isolation_level(dbapi_connection, READ_COMMITTED)

    event.listen(engine, "connect", _read_committed, insert=True)
    return True


def _warn(engine: sa.Engine, level: str, *, connected_early: bool) -> None:
    remedy = (
        "call geneva.init_app(app) before the app first uses the database, so "
        "that GENEVA_MYSQL_READ_COMMITTED (default True) makes every connection "
        "READ COMMITTED"
        if connected_early
        else "let GENEVA_MYSQL_READ_COMMITTED (default True) make the engine "
        "READ COMMITTED, or choose isolation_level='READ COMMITTED' yourself"
    )
    _log.warning(
        "flask_geneva: the %s engine %r runs %s transactions: InnoDB's gap and "
        "next-key locks make an operator's lock on one workflow's step "
        "executions block or deadlock other workflows' step claims and "
        "finalizes (lock wait timeouts, deadlocks); %s (R-CFG-04)",
        engine.dialect.name,
        engine.url,
        level,
        remedy,
    )


def warn_about_gap_locking(engine: sa.Engine) -> None:
    """Log one warning if a MySQL/MariaDB ``engine`` runs a gap-locking isolation.

    The level is the engine's ``isolation_level`` execution option, else the
    default isolation level SQLAlchemy reads from the first connection
    (``Connection.default_isolation_level``): the check runs once, when the
    engine opens its first connection, or at once when it already has. A
    REPEATABLE READ or SERIALIZABLE level logs a WARNING on the
    ``flask_geneva`` logger naming the consequence and the setting (R-CFG-04).

    Idempotent; does nothing on other dialects.

    Args:
        engine: The engine to check.
    """
    if not _is_mysql(engine) or engine.__dict__.get(_CHECKED_FLAG):
        return
    engine.__dict__[_CHECKED_FLAG] = True

    def check(*, connected_early: bool) -> None:
        level = engine.get_execution_options().get("isolation_level") or getattr(
            engine.dialect, "default_isolation_level", None
        )
        if level is not None and _normalized(level) in GAP_LOCKING_LEVELS:
            _warn(engine, _normalized(level), connected_early=connected_early)

    if getattr(engine.dialect, "default_isolation_level", None) is not None:
        # The engine connected before: its connections keep what they have
        # (and SQLAlchemy's reset-on-return the level it read then).
        check(connected_early=bool(engine.__dict__.get(_INSTALLED_FLAG)))
        return

    def _first_connect(dbapi_connection: Any, connection_record: Any) -> None:
        check(connected_early=False)

    # Appended: runs after SQLAlchemy's own first-connect initialisation.
    event.listen(engine, "connect", _first_connect, once=True)

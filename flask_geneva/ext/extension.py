"""The Flask extension object, :class:`Geneva` (SPEC §15.1)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import sqlalchemy as sa
from flask import Flask
from sqlalchemy import orm

from flask_geneva.core import transactions
from flask_geneva.core.config import GenevaConfig
from flask_geneva.core.heroes import hero_type_of
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import connection_timeouts
from flask_geneva.db import mysql as mysql_isolation
from flask_geneva.db import sqlite as sqlite_locking
from flask_geneva.db.queries import models as model_queries
from flask_geneva.dsl.limits import Limit
from flask_geneva.dsl.limits import limit_uses
from flask_geneva.engine import publishing
from flask_geneva.exceptions import GenevaConfigurationError
from flask_geneva.exceptions import HeroTypeNotFoundError
from flask_geneva.ext import broker_checks
from flask_geneva.ext.app_state import GenevaState
from flask_geneva.ext.app_state import current_context
from flask_geneva.ext.app_state import current_state
from flask_geneva.ext.app_state import refuse_celery_backend_without_celery
from flask_geneva.ext.app_state import refuse_eager_celery
from flask_geneva.ext.integrations import load_integration
from flask_geneva.ext.schedules import ScheduleRegistry
from flask_geneva.models import StepExecutionMixin
from flask_geneva.models import WorkflowMixin
from flask_geneva.models import build_models
from flask_geneva.models.workflow_signal import build_signal_model

_log = module_logger("flask_geneva")
__all__ = ["Geneva"]

_KEY_TYPES = ("bigint", "uuid")


class Geneva(ScheduleRegistry):
    """The flask_geneva extension: models, registry of workflow classes, app wiring.

    Usage::

        db = SQLAlchemy()
        geneva = Geneva(db)

        class SignupWorkflow(geneva.Workflow):
            ...

        def create_app():
            app = Flask(__name__)
            db.init_app(app)
            Migrate(app, db)
            geneva.init_app(app, celery=celery)
            return app

    Args:
        db: The host's ``flask_sqlalchemy.SQLAlchemy``; the two tables join its
            metadata so Flask-Migrate sees them.
        app: Optional app to initialise at once (calls :meth:`init_app`).
        celery: Optional Celery app that step tasks are sent through.
        key_type: ``"bigint"`` (default) or ``"uuid"``: primary/foreign key type;
            must match the schema ``flask geneva install`` wrote (R-DM-20..22).

    Attributes:
        Workflow: Base model class of all workflows (single-table inheritance),
            built on ``db.Model``; typed as
            :class:`~flask_geneva.models.WorkflowMixin` (see docs: Typing).
        StepExecution: The step execution model, typed as
            :class:`~flask_geneva.models.StepExecutionMixin`.
        workflow_classes: ``{type identity: class}`` of every declared workflow.

    Raises:
        GenevaConfigurationError: ``key_type`` is not one of the allowed values.

    .. versionadded:: 0.1
    """

    def __init__(
        self,
        db: Any,
        app: Flask | None = None,
        *,
        celery: Any = None,
        key_type: str = "bigint",
    ) -> None:
        if key_type not in _KEY_TYPES:
            raise GenevaConfigurationError(
                f"key_type must be one of {', '.join(map(repr, _KEY_TYPES))}, "
                f"got {key_type!r}"
            )
        self.db = db
        self.key_type = key_type
        self.celery = celery
        self._last_app: Flask | None = None
        self.workflow_classes: dict[str, type[WorkflowMixin]] = {}
        self.reserved_names: frozenset[str] = frozenset()
        self._hero_classes: dict[str, type[Any]] = {}
        self._schedules = {}
        self._hero_lock = threading.Lock()
        models = build_models(db, self, key_type=key_type)
        # Typed for users (docs: Typing): the mixins carry every public method.
        self.Workflow: type[WorkflowMixin] = models[0]
        self.StepExecution: type[StepExecutionMixin] = models[1]
        #: External events delivered to workflows (SPEC §23, R-WSIG-03).
        self.WorkflowSignal: Any = build_signal_model(db, self, key_type=key_type)
        self.reserved_names = _reserved_names(self.Workflow)
        if app is not None:
            self.init_app(app, celery=celery)

    # -- app wiring ---------------------------------------------------------------

    def init_app(
        self, app: Flask, *, celery: Any = None, admin: bool | None = None
    ) -> None:
        """Register on ``app``: ``app.extensions["geneva"]``, config defaults, CLI.

        Call after ``db.init_app(app)`` and after setting the ``GENEVA_*`` keys:
        they are validated here, once, into a frozen
        :class:`~flask_geneva.core.config.GenevaConfig` that every part of flask_geneva
        reads (``app.extensions["geneva"].config``), like Flask-SQLAlchemy reads its
        settings in its ``init_app``. ``app.testing`` is read here too (the default
        of ``GENEVA_ENQUEUE_AFTER_COMMIT``). A ``GENEVA_*`` value changed in
        ``app.config`` afterwards is validated and applied at the start of the
        next geneva operation, which raises ``GenevaConfigurationError`` if it is
        invalid; :meth:`reload_settings` does the same at once (R-CFG-02). On
        SQLite engines it installs the locking setup of
        :func:`flask_geneva.db.sqlite.install_sqlite_locking` (WAL, busy
        timeout, ``BEGIN IMMEDIATE`` for geneva writes) unless
        ``GENEVA_SQLITE_BEGIN_IMMEDIATE`` is False. On MySQL/MariaDB engines
        whose isolation level the app did not choose, it makes every connection
        READ COMMITTED unless ``GENEVA_MYSQL_READ_COMMITTED`` is False, and an
        engine left REPEATABLE READ or SERIALIZABLE is logged as a warning at
        its first connection (R-CFG-04,
        :mod:`flask_geneva.db.mysql`). With a Celery app it logs a
        warning when ``GENEVA_MAX_BROKER_DELAY`` is not below the broker's known
        visibility timeout (R-DSP-06,
        :func:`flask_geneva.ext.broker_checks.warn_if_broker_delay_exceeds_visibility`),
        and when its broker is Redis, a registered workflow class declares a
        priority and ``GENEVA_PRIORITY_MAPPER`` is None (R-PRI-04,
        :func:`flask_geneva.ext.broker_checks.warn_if_redis_priorities_unmapped`).

        Args:
            app: The Flask app.
            celery: Celery app for step tasks; overrides the constructor's.
            admin: Mount a dedicated Flask-Admin with the Geneva views at
                ``GENEVA_ADMIN_URL`` (R-ADM-01); None follows
                ``GENEVA_ADMIN_ENABLED``.

        Raises:
            GenevaConfigurationError: Already registered on this app; ``db`` not
                initialised on it; an invalid ``GENEVA_*`` value (R-CFG-01); a
                registered workflow class naming a method it lacks or whose method
                has the wrong shape, all such problems listed in one message
                (R-CFG-03), or two different limits of one name (R-LIM-04);
                Celery eager mode without ``GENEVA_ALLOW_EAGER``
                (R-TH-21); no Celery app (neither ``celery=``, the constructor's,
                one given to :meth:`init_celery` nor ``app.extensions["celery"]``)
                while ``GENEVA_TASK_BACKEND`` is ``"celery"``; or the admin is
                mounted without ``SECRET_KEY`` (issue 14).
        """
        if "geneva" in app.extensions:
            raise GenevaConfigurationError(
                "flask_geneva is already registered on this app; reuse that instance"
            )
        if "sqlalchemy" not in app.extensions:
            raise GenevaConfigurationError(
                "call db.init_app(app) before geneva.init_app(app)"
            )
        from flask_geneva.core.config import DEFAULTS
        from flask_geneva.core.config import unknown_setting_messages

        for message in unknown_setting_messages(app.config):
            _log.warning("%s", message)
        for key, value in DEFAULTS.items():
            app.config.setdefault(key, value)
        # A Celery app the host's factory stored on this Flask app comes before
        # the one the extension last saw (that may belong to another app).
        celery = celery or app.extensions.get("celery") or self.celery
        # The settings, frozen (R-CFG-02); a later change of app.config is
        # validated again at the next operation (GenevaState.reload).
        config = _validate_at_start(self, app)
        refuse_celery_backend_without_celery(config, celery)
        state = GenevaState(self, app, config, celery=celery)
        mount_admin = admin if admin is not None else config.admin.enabled
        if mount_admin and not app.config.get("SECRET_KEY"):
            raise GenevaConfigurationError(
                "the Geneva admin (GENEVA_ADMIN_ENABLED or admin=True) needs "
                "app.config['SECRET_KEY'] for its sessions and CSRF tokens; set it "
                "before geneva.init_app(app)"
            )
        # init_celery(celery) without app= binds the tasks to this app.
        self._last_app = app
        if state.celery is not None:
            self.init_celery(state.celery, app=app)
        app.extensions["geneva"] = state
        if state.celery is not None:
            broker_checks.warn_if_broker_delay_exceeds_visibility(
                state.celery, config.max_broker_delay
            )
            broker_checks.warn_if_redis_priorities_unmapped(
                state.celery, config.priority_mapper, self.workflow_classes.values()
            )

        if config.sqlite_begin_immediate:
            with app.app_context():
                for engine in self.db.engines.values():
                    sqlite_locking.install_sqlite_locking(engine)
        with app.app_context():
            for engine in self.db.engines.values():
                transactions.track_connection_writes(engine)
            mysql_isolation.set_up_engines(
                self.db.engines,
                app.config,
                read_committed=config.mysql_read_committed,
            )
            # A network cut fails connections within seconds (R-FLT-40).
            connection_timeouts.set_up_engines(
                self.db.engines, app.config, timeout=config.connection_timeout
            )

        from flask_geneva.ext import autogenerate

        # The CLI is a layer above the extension, found by entry point like the admin.
        load_integration("cli")(app, self)
        # `flask db migrate/check` must not see our dialect-specific objects.
        autogenerate.register_autogenerate_filter(app)

        if mount_admin:
            # The admin is a layer above the extension: found by entry point.
            load_integration("admin")(app, self)

    def init_celery(self, celery: Any, *, app: Flask | None = None) -> None:
        """Register the flask_geneva tasks on ``celery`` (fixed names, R-JOB-20).

        Called by :meth:`init_app` for the Celery app it finds. Called before
        ``init_app`` with ``app=``, it gives that app its Celery app. Called after
        ``init_app`` (the app then already has one, since ``init_app`` refuses to
        register the celery backend without, issue 14), it replaces the app's
        Celery app. A task base class that pushes the app context itself is
        respected. Once the app is registered, a ``GENEVA_MAX_BROKER_DELAY`` not
        below the broker's known visibility timeout is logged as a warning
        (R-DSP-06).

        Args:
            celery: A ``celery.Celery`` application.
            app: The Flask app whose context the tasks push when none is active;
                defaults to the app most recently registered through
                :meth:`init_app`.

        Raises:
            GenevaConfigurationError: ``task_always_eager`` is on and
                ``GENEVA_ALLOW_EAGER`` is not (R-TH-21); ``celery`` is None.
        """
        from flask_geneva.ext import tasks

        if celery is None:
            raise GenevaConfigurationError(
                "init_celery() needs a celery.Celery application, got None"
            )
        if app is None:
            app = self._last_app
        if app is not None:
            state = app.extensions.get("geneva")
            if state is not None:
                # Registered: the settings validated at init_app (R-CFG-02).
                task_backend = state.config.task_backend
                allow_eager = state.config.allow_eager
            else:
                # Before init_app: nothing is validated yet.
                task_backend = app.config.get("GENEVA_TASK_BACKEND", "celery")
                allow_eager = bool(app.config.get("GENEVA_ALLOW_EAGER", False))
            refuse_eager_celery(
                celery, task_backend=task_backend, allow_eager=allow_eager
            )
            if state is not None:
                state.celery = celery
                broker_checks.warn_if_broker_delay_exceeds_visibility(
                    celery, state.config.max_broker_delay
                )
        tasks.register_tasks(celery, geneva=self, app=app)
        self.celery = celery

    def reload_settings(self, app: Flask) -> GenevaConfig:
        """Validate ``app.config``'s ``GENEVA_*`` keys again and use them (R-CFG-02).

        A change of ``app.config`` after ``init_app`` is validated and applied at
        the start of the next geneva operation anyway; this applies it at once,
        so that an invalid value raises here, at a moment of the caller's
        choosing, rather than in the operation::

            app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 2
            geneva.reload_settings(app)

        Both go through the same validation
        (:meth:`flask_geneva.ext.app_state.GenevaState.reload`). The new settings apply
        to every operation that starts afterwards; change them between
        operations, since one running in another thread may see them from its
        next read on. ``app.testing`` is read again too. The admin mounted by
        ``init_app`` stays where it is (``GENEVA_ADMIN_URL`` and
        ``GENEVA_ADMIN_ENABLED`` take effect at ``init_app`` only).

        Args:
            app: A Flask app this extension is registered on.

        Returns:
            The new frozen :class:`~flask_geneva.core.config.GenevaConfig`, from now on
            ``app.extensions["geneva"].config``.

        Raises:
            GenevaConfigurationError: ``app`` is not registered; a value is invalid
                (every invalid setting is named, R-CFG-01/03); the celery backend
                without a Celery app (issue 14); Celery eager mode without
                ``GENEVA_ALLOW_EAGER`` (R-TH-21). The settings in force then stay
                unchanged.
        """
        state = app.extensions.get("geneva")
        if state is None or state.geneva is not self:
            raise GenevaConfigurationError(
                "this Geneva extension is not registered on this app; call "
                "geneva.init_app(app) first"
            )
        config: GenevaConfig = state.reload()
        return config

    # -- conveniences -------------------------------------------------------------

    @staticmethod
    def inline_enqueue() -> contextlib.AbstractContextManager[None]:
        """Publish immediately inside the block (R-TXN-05).

        See :func:`publishing.inline_enqueue`.
        """
        return publishing.inline_enqueue()

    def dispatch_due(self) -> int:
        """Run the dispatcher once (R-DSP-02, R-WRK-13); needs an app context.

        The same run as the beat task's
        (:func:`flask_geneva.engine.operators.dispatcher.run_dispatcher`): publishes the
        deferred executions that came due, recovers the executions of dead
        workers (R-WRK-06) and records the run (R-HK-40).

        Returns:
            The number of executions published.
        """
        from flask_geneva.engine.operators import dispatcher

        return dispatcher.dispatch_due(current_context())

    def run_housekeeping(self) -> dict[str, int]:
        """Run housekeeping now: cleanup, stuck recovery, gauges (R-HK-01).

        Needs an app context. See
        :func:`flask_geneva.engine.operators.housekeeping.run_housekeeping`.

        Returns:
            ``{"workflows_cleaned_up", "step_executions_cleaned_up",
            "stuck_in_progress_recovered", "stuck_scheduled_recovered"}`` counts.

        .. versionadded:: 0.1
        """
        from flask_geneva.engine.operators import housekeeping

        return housekeeping.run_housekeeping(current_context())

    @property
    def session(self) -> orm.Session:
        """The current ``Session`` of the host's scoped ``db.session``.

        Bound to these models (``session.info["geneva"]``), so the engine's
        store functions called with it know which tables they work on.
        """
        session: orm.Session = self.db.session()
        session.info["geneva"] = self
        return session

    # -- heroes (R-HERO) ----------------------------------------------------------

    def hero_reference(self, hero: Any) -> tuple[str | None, Any]:
        """Return ``(hero_type, hero_id)`` for a mapped instance, or ``(None, None)``.

        Raises:
            TypeError: ``hero`` is not a mapped instance, or has no primary key yet
                (flush or commit it first).
        """
        if hero is None:
            return None, None
        try:
            mapper = sa.inspect(type(hero))
        except sa.exc.NoInspectionAvailable:
            raise TypeError(
                f"hero must be a mapped model instance or None, got {hero!r} "
                f"({type(hero).__name__})"
            ) from None
        identity = sa.inspect(hero).identity
        if identity is None:
            (orm.object_session(hero) or self.session).flush()
            identity = sa.inspect(hero).identity
        if identity is None:
            raise TypeError(
                f"hero {hero!r} has no primary key yet: add it to the session "
                "(db.session.add(hero)) and flush or commit before creating its "
                "workflow"
            )
        if len(identity) != 1:
            raise TypeError(
                f"hero {hero!r} must have a single-column primary key, "
                f"got {len(identity)} columns"
            )
        return hero_type_of(mapper.class_), identity[0]

    def load_hero(
        self, hero_type: str | None, hero_id: Any, session: orm.Session | None = None
    ) -> Any:
        """Load the hero row, or None (R-HERO-01..03).

        Args:
            hero_type: The stored hero type, or None.
            hero_id: The stored hero id, or None.
            session: The session to load it in (the workflow's own); default
                ``db.session``.

        Raises:
            HeroTypeNotFoundError: ``hero_type`` names no mapped class.
        """
        if hero_type is None or hero_id is None:
            return None
        hero_cls = self._resolve_hero_class(hero_type)
        return (session if session is not None else self.session).get(hero_cls, hero_id)

    def hero_class(self, hero_type: str) -> type[Any]:
        """The mapped model class a stored ``hero_type`` names (R-HERO-01).

        Raises:
            HeroTypeNotFoundError: ``hero_type`` names no mapped class (R-HERO-03).
        """
        return self._resolve_hero_class(hero_type)

    def _resolve_hero_class(self, hero_type: str) -> type[Any]:
        cached = self._hero_classes.get(hero_type)
        if cached is not None:
            return cached
        with self._hero_lock:
            for mapper in self.db.Model.registry.mappers:
                cls = mapper.class_
                if mapper.inherits is None and hero_type_of(cls) == hero_type:
                    self._hero_classes[hero_type] = cls
                    return cls  # type: ignore[no-any-return]
        raise HeroTypeNotFoundError(
            f"hero_type {hero_type!r} does not name a mapped model class; it was "
            "renamed or removed (set __geneva_hero_type__ on the model to keep the "
            "stored name)"
        )

    def hero_workflow(self, workflow_type: str, *, ongoing: bool = True) -> property:
        """A read-only property for hero models: the latest matching workflow or None.

        Args:
            workflow_type: STI identity of the workflow class (``__geneva_type__``).
            ongoing: Only consider ongoing workflows.
        """
        geneva = self

        def getter(hero: Any) -> Any:
            hero_type, hero_id = geneva.hero_reference(hero)
            return model_queries.latest_hero_workflow(
                geneva.session,
                geneva.Workflow,
                workflow_type,
                hero_type,
                hero_id,
                ongoing=ongoing,
            )

        return property(getter)

    def hero_workflows(self, workflow_type: str) -> property:
        """A read-only hero-model property: a select of its workflows of one type."""
        geneva = self

        def getter(hero: Any) -> Any:
            hero_type, hero_id = geneva.hero_reference(hero)
            return model_queries.workflows_for_hero(
                geneva.Workflow, hero_type, hero_id, workflow_type=workflow_type
            )

        return property(getter)

    @property
    def limits(self) -> Mapping[str, Limit]:
        """``{name: Limit}`` of every limit the registered classes' steps declare.

        Read-only, sorted by name, computed from :attr:`workflow_classes` at
        each access (a class declared later counts). ``init_app`` refused two
        different limits of one name (R-LIM-04); for a class declared after it
        with such a limit, the first class registered wins here.

        .. versionadded:: 0.2
        """
        found: dict[str, Limit] = {}
        for use in limit_uses(self.workflow_classes.values()):
            found.setdefault(use.limit.name, use.limit)
        return MappingProxyType(dict(sorted(found.items())))

    def workflow_class(self, workflow_type: str) -> type[WorkflowMixin] | None:
        """The class registered for a stored ``type`` value, or None."""
        return self.workflow_classes.get(workflow_type)

    @contextlib.contextmanager
    def _app_context(self) -> Iterator[None]:
        state = current_state()
        with state.app.app_context():
            yield


def _validate_at_start(geneva: Geneva, app: Flask) -> GenevaConfig:
    """Validate the settings and every registered workflow class (R-CFG-01/03).

    Returns:
        The frozen settings (R-CFG-02).

    Raises:
        GenevaConfigurationError: One error listing every invalid setting and
            every workflow class problem.
    """
    from flask_geneva.core.config import config_from_mapping
    from flask_geneva.core.config import setting_problems
    from flask_geneva.ext.startup_checks import check_workflow_class
    from flask_geneva.ext.startup_checks import format_problems
    from flask_geneva.ext.startup_checks import limit_conflicts

    problems = setting_problems(app.config, testing=app.testing)
    classes = list(geneva.workflow_classes.values())
    class_problems = [
        problem for cls in classes for problem in check_workflow_class(cls)
    ]
    class_problems.extend(limit_conflicts(classes))
    if len(problems) == 1 and not class_problems:
        raise GenevaConfigurationError(problems[0])
    if problems or class_problems:
        raise GenevaConfigurationError(format_problems(problems + class_problems))
    return config_from_mapping(app.config, testing=app.testing)


def _reserved_names(workflow_cls: type[Any]) -> frozenset[str]:
    # R-DEF-18: names a step must not shadow (flow control, hooks, columns, helpers).
    names = {name for name in dir(workflow_cls) if not name.startswith("_")}
    names.update(sa.inspect(workflow_cls).all_orm_descriptors.keys())
    return frozenset(names)

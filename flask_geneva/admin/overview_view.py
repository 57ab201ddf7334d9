"""The admin's overview page (R-ADM-10): counts, health, stuck and overdue, failures.

Only reads (R-ADM-32). The stuck and overdue counts use the same criteria as the
step executions list filters they link to (R-HK-20).
"""

from __future__ import annotations

from datetime import datetime
from datetime import timedelta
from typing import Any

from flask import Blueprint
from flask import abort
from flask import url_for
from flask_admin import expose

import flask_geneva.admin.throughput_cache as throughput_cache
from flask_geneva.admin.activity import activity_charts
from flask_geneva.admin.activity import hour_edges
from flask_geneva.admin.activity import step_durations
from flask_geneva.admin.base_view import GenevaView
from flask_geneva.admin.error_pages import install_error_pages
from flask_geneva.admin.executions import FAILED_COUNT_CAP
from flask_geneva.admin.executions import flag_criteria
from flask_geneva.admin.outcome_cache import outcome_counts
from flask_geneva.admin.overview_charts import ACTIVE_SERIES
from flask_geneva.admin.overview_charts import active_chart
from flask_geneva.admin.overview_charts import minute_edges
from flask_geneva.admin.overview_charts import throughput_chart
from flask_geneva.admin.row_display import error_class_of
from flask_geneva.core import clock
from flask_geneva.db.queries import admin as admin_queries
from flask_geneva.db.queries import admin_stats as admin_stats_queries
from flask_geneva.engine.limits import overview as limit_overview
from flask_geneva.engine.operators import maintenance_runs
from flask_geneva.engine.workers import health as worker_health
from flask_geneva.ext.app_state import current_state
from flask_geneva.models import WorkflowState

__all__ = ["DURATION_SAMPLE", "DURATION_SCAN", "DURATION_WINDOW", "OverviewView"]

#: A class page's step durations: the latest completed executions in this window,
#: at most this many (R-ADM-55).
DURATION_WINDOW = timedelta(days=7)
DURATION_SAMPLE = 5000
#: The class page's sample is taken among this many latest completed executions
#: of every class (R-ADM-55): its cost does not depend on how rare the class is.
DURATION_SCAN = 20_000


def at_a_glance(
    session: Any,
    execution_cls: Any,
    now: datetime,
    hours: list[datetime],
    class_states: list[tuple[Any, Any, Any]],
) -> dict[str, Any]:
    """The overview's charts at a glance (R-ADM-130..132): one grouped read
    each for the last hour by minute and the last day by hour (``hours``: the
    24 hourly edges of the outcome charts; settled buckets kept in the
    process, :mod:`~flask_geneva.admin.throughput_cache`), and the work in
    flight per class drawn from ``class_states``, the class x state counts
    ``(type, state, count)`` the overview read."""
    minutes = minute_edges(now)
    return {
        "throughput_hour": throughput_chart(
            throughput_cache.finished_counts(
                session, execution_cls, minutes, unit="minute", now=now
            ),
            minutes,
            now=now,
            key="hour",
            title="Finished per minute, last hour",
        ),
        "throughput_day": throughput_chart(
            throughput_cache.finished_counts(
                session, execution_cls, hours, unit="hour", now=now
            ),
            hours,
            now=now,
            key="day",
            title="Finished per minute, last 24 hours (hourly)",
        ),
        # The class x state counts the overview read: no read of its own.
        "active": active_chart(class_states),
        "active_series": ACTIVE_SERIES,
    }


class OverviewView(GenevaView):
    """Class-by-state counts, paused ratios, stuck/overdue counts, latest failures.

    Its blueprint also installs the admin's error pages for every URL under the
    overview's URL, the prefix of all Geneva views (R-ADM-47).
    """

    def create_blueprint(self, admin: Any) -> Blueprint:
        blueprint = super().create_blueprint(admin)
        prefix = str(self.url)
        blueprint.record_once(
            lambda state: install_error_pages(state.app, prefix, self)
        )
        return blueprint

    @expose("/")
    def index(self) -> str:
        """Render the overview (R-ADM-10; health: R-WRK-09, R-HK-42/43; the
        limits line: R-LIM-43)."""
        session = self.session
        workflow_cls = self.geneva.Workflow
        execution_cls = self.geneva.StepExecution
        config = current_state().config
        # First: they end the read transaction, which would expire the failures
        # read below and reload each one row by row while rendering.
        workers = worker_health.worker_overview(session, config=config)
        health = maintenance_runs.last_runs(session, config=config)
        rows = admin_queries.workflow_counts_by_type_and_state(session, workflow_cls)
        states = [state.value for state in WorkflowState]
        counts: dict[str, dict[str, int]] = {}
        for type_name, state, count in rows:
            counts.setdefault(str(type_name), {})[str(state)] = int(count)
        classes = []
        for type_name, by_state in counts.items():
            total = sum(by_state.values())
            ratio = by_state.get("paused", 0) / total if total else 0.0
            classes.append(
                {
                    "type": type_name,
                    "known": type_name in self.geneva.workflow_classes,
                    "counts": by_state,
                    "total": total,
                    "paused_ratio": ratio,
                    "warn": ratio > config.admin.paused_ratio_warn,
                }
            )
        now = clock.now()
        # The list filters of the links use the same criteria (R-ADM-10, R-HK-20).
        stuck = admin_queries.count_executions(
            session, execution_cls, flag_criteria("stuck", execution_cls, config, now)
        )
        overdue = admin_queries.count_executions(
            session,
            execution_cls,
            flag_criteria("stuck_scheduled", execution_cls, config, now),
        )
        failed_count = admin_queries.count_failed_executions(
            session, execution_cls, FAILED_COUNT_CAP
        )
        failures = admin_queries.latest_failures(
            session, execution_cls, workflow_cls, limit=20
        )
        edges = hour_edges(now)
        charts = activity_charts(
            outcome_counts(session, execution_cls, workflow_cls, edges, now=now),
            edges,
        )
        oldest = admin_stats_queries.oldest_overdue_execution(
            session, execution_cls, workflow_cls, now
        )
        glance = at_a_glance(session, execution_cls, now, edges, rows)
        return self.render(
            "geneva/admin/overview.html",
            workers=workers,
            health=health,
            health_jobs=maintenance_runs.JOBS,
            duration_text=maintenance_runs.duration_text,
            charts=charts,
            **glance,
            oldest_overdue=oldest,
            limits_line=limit_overview.status_line(
                limit_overview.limit_status(session)
            ),
            class_url=lambda name: url_for(
                f"{self.endpoint}.workflow_class", type_name=name
            ),
            states=states,
            classes=classes,
            stuck_count=int(stuck or 0),
            overdue_count=int(overdue or 0),
            failed_count=failed_count,
            failed_count_cap=FAILED_COUNT_CAP,
            failures=[
                {
                    "execution": execution,
                    "type": type_name,
                    "error_class": error_class_of(execution, self._columns()),
                    "first_line": (execution.error_message or "").split("\n", 1)[0],
                }
                for execution, type_name in failures
            ],
        )

    @expose("/class/<type_name>")
    def workflow_class(self, type_name: str) -> str:
        """A class's step durations and activity (R-ADM-54, R-ADM-55).

        404 when no workflow class of that name is defined or stored.
        """
        session = self.session
        workflow_cls = self.geneva.Workflow
        execution_cls = self.geneva.StepExecution
        defined = self.geneva.workflow_classes.get(type_name)
        if defined is None and type_name not in admin_queries.workflow_types_stored(
            session, workflow_cls
        ):
            abort(404, description=f"no workflow class {type_name!r}")
        now = clock.now()
        rows = admin_stats_queries.recent_step_durations(
            session,
            execution_cls,
            workflow_cls,
            type_name,
            since=now - DURATION_WINDOW,
            limit=DURATION_SAMPLE,
            scan=DURATION_SCAN,
        )
        order = list(defined.step_collection().names) if defined is not None else []
        edges = hour_edges(now)
        charts = activity_charts(
            [
                row
                for row in outcome_counts(
                    session, execution_cls, workflow_cls, edges, now=now
                )
                if row[0] == type_name
            ],
            edges,
        )
        return self.render(
            "geneva/admin/workflow_class.html",
            type_name=type_name,
            known=defined is not None,
            durations=step_durations(rows, order),
            sample_size=len(rows),
            sample_cap=DURATION_SAMPLE,
            scan_cap=DURATION_SCAN,
            window_days=DURATION_WINDOW.days,
            charts=charts,
        )

"""The admin's overview page (R-ADM-10): counts, stuck and overdue, latest failures.

Only reads (R-ADM-32). The stuck and overdue counts use the same criteria as the
step executions list filters they link to (R-HK-20).
"""

from __future__ import annotations

import sqlalchemy as sa
from flask_admin import expose

from flask_geneva import clock
from flask_geneva import column_detection
from flask_geneva import worker_registry
from flask_geneva.admin.base_view import GenevaView
from flask_geneva.admin.executions import FAILED_COUNT_CAP
from flask_geneva.admin.executions import capped_count
from flask_geneva.admin.executions import flag_criteria
from flask_geneva.admin.row_display import error_class_of
from flask_geneva.models import WorkflowState
from flask_geneva.runtime import current_state

__all__ = ["OverviewView"]


class OverviewView(GenevaView):
    """Class-by-state counts, paused ratios, stuck/overdue counts, latest failures."""

    @expose("/")
    def index(self) -> str:
        """Render the overview (R-ADM-10)."""
        session = self.session
        workflow_cls = self.geneva.Workflow
        execution_cls = self.geneva.StepExecution
        config = current_state().config
        rows = session.execute(
            sa.select(workflow_cls.type, workflow_cls.state, sa.func.count())
            .group_by(workflow_cls.type, workflow_cls.state)
            .order_by(workflow_cls.type)
        ).all()
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
        stuck = session.scalar(
            sa.select(sa.func.count())
            .select_from(execution_cls)
            .where(*flag_criteria("stuck", execution_cls, config, now))
        )
        overdue = session.scalar(
            sa.select(sa.func.count())
            .select_from(execution_cls)
            .where(*flag_criteria("stuck_scheduled", execution_cls, config, now))
        )
        failed_count = capped_count(
            session,
            sa.select(execution_cls.id).where(execution_cls.state == "failed"),
            FAILED_COUNT_CAP,
        )
        failures = session.execute(
            sa.select(execution_cls, workflow_cls.type)
            .join(workflow_cls, workflow_cls.id == execution_cls.workflow_id)
            .where(execution_cls.state == "failed")
            # finished_at equals failed_at on a failed row (R-SE-02) and is
            # indexed: the newest failures are read off the index's end instead
            # of sorting every failed row (R-ADM-30).
            .where(execution_cls.finished_at.is_not(None))
            .options(*column_detection.undefer_options(session, None, execution_cls))
            .order_by(execution_cls.finished_at.desc(), execution_cls.id.desc())
            .limit(20)
        ).all()
        workers = worker_registry.worker_overview(session, config=config)
        return self.render(
            "geneva/admin/overview.html",
            workers=workers,
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

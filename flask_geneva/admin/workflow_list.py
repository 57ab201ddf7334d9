"""The workflows list page (R-ADM-11): filters, sorting, paging, latest errors.

Only reads (R-ADM-32): one page of rows plus one, one query for the page's latest
errors, one for its limit waiters (with the ``add_flow_limits`` unit: their Next
run reads "waiting for <limit>", R-LIM-42) and one capped count (R-ADM-30).
"""

from __future__ import annotations

import functools
from typing import Any

from flask import request
from flask_admin import expose

from flask_geneva.admin.base_view import WorkflowPages
from flask_geneva.admin.bulk_actions import BULK_ACTIONS
from flask_geneva.admin.children_panel import parked_for
from flask_geneva.admin.csrf import action_form
from flask_geneva.admin.filters import capped_count
from flask_geneva.admin.filters import format_count
from flask_geneva.admin.filters import hero_admin_urls
from flask_geneva.admin.filters import latest_error_classes
from flask_geneva.admin.keyset_pages import page_request
from flask_geneva.admin.keyset_pages import position_token
from flask_geneva.admin.keyset_pages import read_list_page
from flask_geneva.admin.list_counts import match_label
from flask_geneva.admin.list_params import PAGE_SIZE
from flask_geneva.admin.list_params import choice
from flask_geneva.admin.row_display import hero_reference_of
from flask_geneva.admin.workflow_start import allowed_start_classes
from flask_geneva.db.queries import admin as admin_queries
from flask_geneva.db.queries import admin_workflow_signals as admin_signal_queries
from flask_geneva.db.queries import limits as limit_reads
from flask_geneva.db.queries.keyset import KeysetOrder
from flask_geneva.engine.operator_transaction import allowed_from
from flask_geneva.models import WorkflowState

__all__ = ["SORTS", "WorkflowListPage", "next_runs"]

#: Columns the list sorts by.
SORTS = ("id", "created_at", "transitioned_at")


class WorkflowListPage(WorkflowPages):
    """The workflows list, ``GET <workflows>/`` (R-ADM-11)."""

    @expose("/")
    def index(self) -> str:
        """Render one page of the filtered, sorted list."""
        args = request.args
        session = self.session
        workflow_cls = self.geneva.Workflow
        columns = self._columns()
        matching = self._filters(args)
        # Newest first by default: the id for sequential keys, else created_at;
        # with a created range, created_at, so the list is read along the range's
        # own index from its end wherever the range sits (R-ADM-11, R-ADM-30).
        created_range = "created_from" in matching.params or (
            "created_to" in matching.params
        )
        default_sort = (
            "created_at" if self.geneva.key_type == "uuid" or created_range else "id"
        )
        notes = list(matching.notes)
        sort = choice(args, "sort", SORTS, default_sort, notes)
        direction = choice(args, "dir", ("asc", "desc"), "desc", notes)
        column = getattr(workflow_cls, sort)
        # The sort, then the id; transitioned_at's NULL rows (ongoing
        # workflows) come last either way (R-ADM-151).
        order = KeysetOrder(
            column,
            workflow_cls.id,
            descending=direction == "desc",
            nullable=sort == "transitioned_at",
        )
        # Pages are read from the last (or first) row's key, never with OFFSET
        # (R-ADM-150); one row more than a page tells whether more exist.
        listed = read_list_page(
            functools.partial(
                admin_queries.workflow_list_page,
                session,
                workflow_cls,
                matching.conditions,
                order=order,
            ),
            page_request(
                args,
                notes,
                by_id=order.by_id,
                nullable=order.nullable,
                parse_key=self._parse_key,
                page_size=PAGE_SIZE,
            ),
            page_size=PAGE_SIZE,
            token_of=lambda row: position_token(
                getattr(row, sort), row.id, by_id=order.by_id
            ),
            link_args={"sort": sort, "dir": direction, **matching.params},
            notes=notes,
        )
        rows = listed.rows
        # One query for the page's latest errors, one capped count (R-ADM-30).
        errors = latest_error_classes(
            session,
            self.geneva.StepExecution,
            [row.id for row in rows],
            has_error_class_column=columns.error_class_name,
            has_metadata_column=columns.step_execution_metadata,
        )
        hero_urls = hero_admin_urls(rows)
        runs = next_runs(session, self.geneva.StepExecution, [row.id for row in rows])
        # A parked step has no next run: it waits for a signal (R-WSIG-66) or
        # for children (R-CHD-21).
        parked = (
            admin_signal_queries.parked_workflow_ids(
                session, self.geneva.StepExecution, [row.id for row in rows]
            )
            if columns.workflow_signals
            else {}
        )
        # A limit's waiter has no due time: it runs when granted (R-LIM-42).
        limited = (
            limit_reads.waited_limits(session, [row.id for row in rows])
            if columns.flow_limits
            else {}
        )
        count, more = capped_count(session, workflow_cls, matching)
        # Past the cap, PostgreSQL's estimate: "about 4.9 M" (R-ADM-152).
        label = match_label(
            count + 1 if more else count,
            count,  # the cap when more match
            lambda: admin_queries.estimate_workflow_list(
                session, workflow_cls, matching.conditions, cap=count
            ),
        )
        return self.render(
            "geneva/admin/workflows.html",
            workflows=[
                self._summary(row, errors, hero_urls, runs, parked, limited)
                for row in rows
            ],
            filters=matching.params,
            filtered=matching.is_active,
            filter_descriptions=matching.descriptions,
            notes=notes,
            caveats=matching.caveats,
            # The all-matching form would drop the ignored values (R-ADM-23).
            filters_ignored=bool(matching.notes),
            match_count=count,
            match_label=label,
            # The bulk buttons act on what was counted: "all 10,000+".
            capped_label=format_count(count, more),
            sort=sort,
            direction=direction,
            page=listed.page,
            pager=listed,
            states=[state.value for state in WorkflowState],
            known_types=sorted(self.geneva.workflow_classes),
            # Classes with rows whose code is gone (R-ADM-50).
            gone_types=[
                name
                for name in admin_queries.workflow_types_stored(session, workflow_cls)
                if name not in self.geneva.workflow_classes
            ],
            # Only actions that can apply to the filtered state (R-ADM-52).
            bulk_actions={
                action: label
                for action, label in BULK_ACTIONS.items()
                if "state" not in matching.params
                or matching.params["state"] in allowed_from(action)
            },
            action_form=action_form(),
            # "Start a workflow…" when the user may start a class (R-ADM-200).
            start_shown=bool(allowed_start_classes(self.geneva.workflow_classes)),
            # The parent filter's field (R-CHD-62), with the unit only.
            children_installed=columns.child_workflows,
        )

    def _summary(
        self,
        workflow: Any,
        errors: dict[Any, str],
        hero_urls: dict[Any, str],
        runs: dict[Any, Any],
        parked: dict[Any, str],
        limited: dict[Any, str],
    ) -> dict[str, Any]:
        running = workflow.state in ("ready", "performing")
        return {
            "id": workflow.id,
            "type": workflow.type,
            "known": workflow.type in self.geneva.workflow_classes,
            "hero": hero_reference_of(workflow),
            "hero_url": hero_urls.get((workflow.hero_type, str(workflow.hero_id))),
            "state": workflow.state,
            # A canceled or finished workflow has no step to come (R-ADM-46).
            "step": ""
            if workflow.state in ("finished", "canceled")
            else workflow.current_step_name or workflow.next_step_name or "",
            "created_at": workflow.created_at,
            "transitioned_at": workflow.transitioned_at,
            "error_class": errors.get(workflow.id),
            # A paused or ended workflow's scheduled execution does not run.
            "next_run": runs.get(workflow.id) if running else None,
            # Parked: "waiting for a signal" or "waiting for children".
            "waiting": parked_for(type(workflow), parked[workflow.id])
            if workflow.state == "ready" and workflow.id in parked
            else None,
            # Its execution waits for a limit: "waiting for partner-api".
            "limit": limited.get(workflow.id) if running else None,
        }


def next_runs(
    session: Any, execution_cls: Any, workflow_ids: list[Any]
) -> dict[Any, Any]:
    """When each listed workflow's scheduled execution is due (R-ADM-44).

    See :func:`flask_geneva.db.queries.admin.next_runs`.
    """
    return admin_queries.next_runs(session, execution_cls, workflow_ids)

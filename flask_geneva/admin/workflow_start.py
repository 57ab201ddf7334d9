"""The admin's "Start a workflow" page (R-ADM-200..205).

``GET <workflows>/start`` shows two forms. The first (a GET, no state change)
picks a class and finds the hero: a hero type (the mapped models with a
single-column key, R-ADM-203) and an id, looked up by primary key, or a text
matched against the model's label column (``__geneva_hero_label__``, a prefix
search of at most :data:`MAX_MATCHES` rows), never a list of every row. The
second, shown once the hero is found (or for a class that needs none),
``POST <workflows>/start`` with the CSRF token, an optional priority and an
optional start time (UTC), starts the workflow through
:func:`flask_geneva.ext.operations.start_workflow`: ``create()``'s own path
and checks, and the operator action ``start`` recorded with the actor and
``via="admin"`` (R-ADM-201). Only classes not marked ``admin_startable =
False`` (and, under roles, those the user may ``start``) are offered and
accepted (R-ADM-200, R-ADM-213). Whatever ``create()`` refuses (an ongoing
workflow of the class for the hero, a priority out of range, a class that
needs a hero) and whatever the form cannot use (an unknown hero, a start time
in the past) is said on the form with the values kept; nothing is written
(R-ADM-204).
"""

from __future__ import annotations

import dataclasses
import functools
from datetime import UTC
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from flask import abort
from flask import flash
from flask import redirect
from flask import request
from flask import session as http_session
from flask import url_for
from flask_admin import expose
from flask_admin.form import SecureForm
from wtforms import Form
from wtforms import StringField

from flask_geneva.admin.access import current_actor
from flask_geneva.admin.access import permits
from flask_geneva.admin.access import refuse
from flask_geneva.admin.access import require
from flask_geneva.admin.audit import audit_start
from flask_geneva.admin.base_view import WorkflowPages
from flask_geneva.admin.csrf import flask_wtf_protects
from flask_geneva.core import clock
from flask_geneva.core.heroes import hero_models
from flask_geneva.db.queries.heroes import heroes_by_label
from flask_geneva.exceptions import GenevaError
from flask_geneva.ext.operations import start_workflow

__all__ = [
    "LABEL_ATTRIBUTE",
    "MAX_MATCHES",
    "HeroLookup",
    "WorkflowStart",
    "allowed_start_classes",
    "parse_priority",
    "parse_start_at",
    "start_form",
    "startable_classes",
]

#: The hero model's attribute naming its label column (R-ADM-203).
LABEL_ATTRIBUTE = "__geneva_hero_label__"
#: Most heroes a label search lists (R-ADM-203).
MAX_MATCHES = 20


class _StartFields:
    """The start form's fields; the CSRF field comes from the base form."""

    type = StringField("Class")
    hero_type = StringField("Hero type")
    hero_id = StringField("Hero id")
    priority = StringField("Priority")
    start_at = StringField("Start at (UTC)")


class _SecureStartForm(_StartFields, SecureForm):
    """The form with Flask-Admin's session-bound token."""


@functools.cache
def _flask_wtf_form() -> type[Form]:
    """The form on ``flask_wtf.FlaskForm`` (imported only when needed)."""
    from flask_wtf import FlaskForm

    class FlaskWTFStartForm(_StartFields, FlaskForm):
        """The form with Flask-WTF's token, the one ``CSRFProtect`` checks."""

    return FlaskWTFStartForm


def start_form(formdata: Any = None) -> Form:
    """The start form with the CSRF token the active protection accepts (R-ADM-05).

    Args:
        formdata: Submitted data to bind (``request.form``), or None.
    """
    if flask_wtf_protects():
        return _flask_wtf_form()(formdata=formdata)
    return _SecureStartForm(formdata)


def startable_classes(workflow_classes: dict[str, Any]) -> dict[str, Any]:
    """The classes the admin may start, by type (R-ADM-200).

    Every registered class except abstract bases (``__geneva_abstract__``) and
    those marked ``admin_startable = False``; sorted by type.
    """
    return {
        name: cls
        for name, cls in sorted(workflow_classes.items())
        if cls.admin_startable is True and not cls.__dict__.get("__geneva_abstract__")
    }


def allowed_start_classes(workflow_classes: dict[str, Any]) -> dict[str, Any]:
    """The startable classes this request's user may start (R-ADM-200, R-ADM-213).

    The page offers, and the list links to it for, these only.
    """
    return {
        name: cls
        for name, cls in startable_classes(workflow_classes).items()
        if permits("start", cls)
    }


def parse_priority(text: str) -> int | None:
    """The form's priority: None when empty, else a whole number.

    Raises:
        ValueError: Not a whole number; names the text. The range is
            ``create()``'s to check (R-JOB-05).
    """
    text = text.strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"priority must be a whole number (higher runs first), got {text!r}; "
            "leave it empty for the class's default"
        ) from None


def parse_start_at(text: str, now: datetime) -> datetime | None:
    """The form's start time: None when empty, else a UTC time after ``now``.

    Args:
        text: ``YYYY-MM-DDTHH:MM[:SS]`` (a ``datetime-local`` field) read as
            UTC, or ISO 8601 with an offset.
        now: The request's now (aware).

    Raises:
        ValueError: Not such a time, or not after ``now``; names the text.
    """
    text = text.strip()
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"start time {text!r} is not a time; give YYYY-MM-DD HH:MM in UTC, "
            "or leave it empty to start now"
        ) from None
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
    moment = moment.astimezone(UTC)
    if moment <= now:
        raise ValueError(
            f"start time {moment.strftime('%Y-%m-%d %H:%M:%S')} UTC is not in the "
            "future; leave it empty to start now"
        )
    return moment


@dataclasses.dataclass
class HeroLookup:
    """What the find form found (R-ADM-203).

    Attributes:
        hero: The hero found by id, or None.
        reference: ``"User#7"`` when found.
        label: ``str(hero)`` when found.
        error: Why the hero could not be found, or ``""``.
        matches: ``[(id, reference, label)]`` of a label search.
        more: The label search found more than :data:`MAX_MATCHES`.
        note: A remark on the search (no label column), or ``""``.
    """

    hero: Any = None
    reference: str = ""
    label: str = ""
    error: str = ""
    matches: list[tuple[Any, str, str]] = dataclasses.field(default_factory=list)
    more: bool = False
    note: str = ""


def _parse_hero_id(hero_type: str, hero_cls: Any, text: str) -> Any:
    """``text`` as the hero model's primary key value.

    Raises:
        ValueError: Not a valid key of the model; names the text and the type.
    """
    column = sa.inspect(hero_cls).primary_key[0]
    try:
        python_type = column.type.python_type
    except NotImplementedError:
        return text
    if python_type is str:
        return text
    try:
        return python_type(text)
    except (TypeError, ValueError):
        raise ValueError(
            f"hero id {text!r} is not a valid {hero_type} id (a {python_type.__name__})"
        ) from None


def _label_column(hero_cls: Any) -> tuple[Any, str]:
    """``(column attribute, "")`` of the model's label column, or ``(None, note)``."""
    name = getattr(hero_cls, LABEL_ATTRIBUTE, None)
    if name is None:
        return None, (
            f"{hero_cls.__name__} names no label column ({LABEL_ATTRIBUTE} = "
            '"email" on the model would let you search it): find the hero by id'
        )
    columns = sa.inspect(hero_cls).columns
    if not isinstance(name, str) or name not in columns:
        return None, (
            f"{hero_cls.__name__}.{LABEL_ATTRIBUTE} = {name!r} names no column "
            f"of {hero_cls.__name__}: find the hero by id"
        )
    return getattr(hero_cls, name), ""


class WorkflowStart(WorkflowPages):
    """``GET`` and ``POST <workflows>/start``: start a workflow (R-ADM-200..205)."""

    def start_classes(self) -> dict[str, Any]:
        """The startable classes this user may start (R-ADM-200, R-ADM-213)."""
        return allowed_start_classes(self.geneva.workflow_classes)

    @expose("/start", methods=("GET",))
    def start_page(self) -> Any:
        """The class and hero search form, and the start form once found."""
        classes = self.start_classes()
        if not classes:
            refuse("start", None)
        return self._render_start(classes, request.args, self._find(request.args))

    @expose("/start", methods=("POST",))
    def start(self) -> Any:
        """Check, start the workflow through ``create()``'s path, and go to it.

        Answers 400 for a missing or invalid CSRF token or a class that is not
        startable (naming the startable ones), 403 when the user may not start
        it (audited); every other refusal is said on the form (R-ADM-204).
        """
        form = start_form(request.form)
        token_stored = flask_wtf_protects() or "csrf" in http_session
        form.validate()
        if not token_stored or form.meta.csrf_field_name in form.errors:
            abort(400, description="missing or invalid CSRF token")
        startable = startable_classes(self.geneva.workflow_classes)
        type_name = str(form.type.data or "")
        workflow_cls = startable.get(type_name)
        if workflow_cls is None:
            abort(
                400,
                description=f"class {type_name[:80]!r} cannot be started here; "
                f"startable classes: {', '.join(startable) or '(none)'}",
            )
        require("start", workflow_cls)  # R-ADM-213
        values = {name: str(form[name].data or "") for name in _FIELDS}
        lookup = self._find(values)
        actor = current_actor()
        try:
            if lookup.error:
                raise ValueError(lookup.error)
            if values["hero_type"] and lookup.hero is None:
                raise ValueError(
                    f"give the {values['hero_type'][:80]} hero's id (or choose "
                    "no hero type for a class that needs no hero)"
                )
            priority = parse_priority(values["priority"])
            start_at = parse_start_at(values["start_at"], clock.now())
            self.session.commit()  # end the reading transaction first
            workflow = start_workflow(
                workflow_cls,
                hero=lookup.hero,
                priority=priority,
                start_at=start_at,
                actor=actor,
                via="admin",
            )
        except (GenevaError, ValueError, TypeError) as error:
            # create()'s refusals (R-ADM-204); nothing was written.
            self.session.rollback()
            return self._render_start(
                self.start_classes(), values, lookup, error=str(error)
            )
        audit_start(workflow, lookup.reference, actor=actor)
        when = f", first step at {start_at:%Y-%m-%d %H:%M} UTC" if start_at else ""
        flash(
            f"Started {type_name} workflow {workflow.id} for hero "
            f"{lookup.reference or '(none)'}{when}; state is {workflow.state}",
            "success",
        )
        return redirect(
            url_for(f"{self.endpoint}.detail", workflow_id=workflow.id), code=303
        )

    def _find(self, values: Any) -> HeroLookup:
        """Look the hero up from the form's ``hero_type``, ``hero_id`` and ``q``."""
        hero_type = str(values.get("hero_type", "") or "").strip()
        hero_id = str(values.get("hero_id", "") or "").strip()
        text = str(values.get("q", "") or "").strip()
        if not hero_type:
            if hero_id or text:
                return HeroLookup(error="choose the hero's type")
            return HeroLookup()
        models = hero_models(self.geneva.Workflow)
        hero_cls = models.get(hero_type)
        if hero_cls is None:
            return HeroLookup(
                error=f"unknown hero type {hero_type[:80]!r}; hero types: "
                f"{', '.join(models) or '(none)'}"
            )
        lookup = HeroLookup()
        if text:
            self._search(lookup, hero_type, hero_cls, text)
        if not hero_id:
            return lookup
        try:
            key = _parse_hero_id(hero_type, hero_cls, hero_id)
        except ValueError as error:
            lookup.error = str(error)
            return lookup
        try:
            hero = self.session.get(hero_cls, key)  # one row by primary key
        except sa.exc.DBAPIError:  # e.g. a number beyond the column's range
            self.session.rollback()
            hero = None
        if hero is None:
            lookup.error = f"no {hero_type} with id {hero_id[:80]!r}"
            return lookup
        lookup.hero = hero
        lookup.reference = f"{hero_type}#{key}"
        lookup.label = str(hero)
        return lookup

    def _search(
        self, lookup: HeroLookup, hero_type: str, hero_cls: Any, text: str
    ) -> None:
        """Fill ``lookup.matches`` from the label column (R-ADM-203)."""
        column, note = _label_column(hero_cls)
        if column is None:
            lookup.note = note
            return
        found = heroes_by_label(
            self.session, hero_cls, column, text, limit=MAX_MATCHES + 1
        )
        key = sa.inspect(hero_cls).primary_key[0].key
        lookup.more = len(found) > MAX_MATCHES
        lookup.matches = [
            (
                getattr(hero, key),
                f"{hero_type}#{getattr(hero, key)}",
                str(getattr(hero, column.key)),
            )
            for hero in found[:MAX_MATCHES]
        ]

    def _render_start(
        self, classes: dict[str, Any], values: Any, lookup: HeroLookup, error: str = ""
    ) -> str:
        chosen = str(values.get("type", "") or "")
        workflow_cls = classes.get(chosen)
        ready = workflow_cls is not None and (
            lookup.hero is not None
            or (
                workflow_cls.may_proceed_without_hero
                and not values.get("hero_type")
                and not values.get("hero_id")
            )
        )
        return self.render(
            "geneva/admin/workflow_start.html",
            classes=classes,
            chosen=chosen,
            hero_types=list(hero_models(self.geneva.Workflow)),
            values={name: str(values.get(name, "") or "") for name in (*_FIELDS, "q")},
            lookup=lookup,
            ready=ready,
            error=error,
            start_form=start_form(),
            max_matches=MAX_MATCHES,
        )


_FIELDS = ("type", "hero_type", "hero_id", "priority", "start_at")

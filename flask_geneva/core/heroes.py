"""The stored name of a hero model class, ``workflow.hero_type`` (R-HERO).

A lower layer than the extension and the admin: both ask it which name a mapped
class is stored under, and neither imports the other for it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

__all__ = ["GENEVA_TABLE_PREFIX", "hero_models", "hero_type_of", "hero_type_spellings"]

#: The names of geneva's own tables start with this; their models are no heroes.
GENEVA_TABLE_PREFIX = "geneva_drive_"


def hero_type_of(cls: type[Any]) -> str:
    """Return the hero type stored for instances of a mapped class (R-HERO-01).

    Args:
        cls: A mapped model class (or a subclass of one).

    Returns:
        ``__geneva_hero_type__`` of the class when set, else that of its base
        mapper's class, else the base mapper class's name (single-table subclasses
        share their base's name).

    Raises:
        sqlalchemy.exc.NoInspectionAvailable: ``cls`` is not mapped.
    """
    explicit = getattr(cls, "__geneva_hero_type__", None)
    if explicit:
        return str(explicit)
    base = sa.inspect(cls).base_mapper.class_
    explicit = getattr(base, "__geneva_hero_type__", None)
    return str(explicit) if explicit else base.__name__


def hero_type_spellings(workflow_cls: Any, typed: str) -> list[str]:
    """Every hero type that equals ``typed`` ignoring case (R-ADM-50).

    The hero types of the models mapped in the workflow model's registry whose
    name differs from ``typed`` only in case, plus ``typed`` itself (a hero type
    of a model no longer mapped matches as typed). The admin's search and
    ``flask geneva list --hero`` compare ``hero_type`` with these, so the
    ``(hero_type, hero_id)`` index still answers.

    Args:
        workflow_cls: The Workflow model (its registry holds the host's models).
        typed: The hero type as the operator typed it, e.g. ``"order"``.

    Returns:
        The spellings, sorted.
    """
    wanted = typed.casefold()
    spellings = {typed}
    for mapper in workflow_cls.registry.mappers:
        name = hero_type_of(mapper.class_)
        if name.casefold() == wanted:
            spellings.add(name)
    return sorted(spellings)


def hero_models(workflow_cls: Any) -> dict[str, type[Any]]:
    """The models a workflow's hero can be, by hero type (R-ADM-203).

    The base classes of the models mapped in the workflow model's registry
    with a single-column primary key (R-HERO-01), geneva's own tables left
    out.

    Args:
        workflow_cls: The Workflow model (its registry holds the host's models).

    Returns:
        ``{hero type: model class}``, sorted by hero type.
    """
    found: dict[str, type[Any]] = {}
    for mapper in workflow_cls.registry.mappers:
        if mapper.inherits is not None or len(mapper.primary_key) != 1:
            continue
        table = getattr(mapper.local_table, "name", "")
        if str(table).startswith(GENEVA_TABLE_PREFIX):
            continue
        found.setdefault(hero_type_of(mapper.class_), mapper.class_)
    return dict(sorted(found.items()))

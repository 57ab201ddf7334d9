"""A plain stand-in for ``geneva.Workflow`` that only collects DSL declarations."""

from __future__ import annotations

from typing import ClassVar

from flask_geneva.dsl.collect import collect_definitions


class Workflow:
    """Collects the class body's declarations like ``geneva.Workflow`` does.

    Subclasses may set ``reserved_names`` to the names a step must not shadow.
    """

    reserved_names: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        parent = next(
            (
                base.__dict__["__geneva_definitions__"]
                for base in cls.__mro__[1:]
                if "__geneva_definitions__" in base.__dict__
            ),
            None,
        )
        cls.__geneva_definitions__ = collect_definitions(
            cls,
            parent=parent,
            type_name=cls.__name__,
            reserved_names=cls.reserved_names,
        )

"""Step ordering: the ordered, immutable steps of a workflow class (SPEC §5.2).

:class:`StepCollection` computes the execution order once (R-ORD-01) and answers
"which step comes next/before" (R-ORD-03..05). Pure code: no database, no Flask.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Iterator
from typing import overload

from flask_geneva.dsl.definitions import StepDefinition
from flask_geneva.exceptions import StepConfigurationError

__all__ = ["StepCollection"]


class StepCollection:
    """The ordered, immutable steps of a workflow class (SPEC §5.2, R-ORD-01..05).

    Args:
        definitions: Step definitions in registration order, inherited ones first.

    The execution order is computed once, on first use, by the algorithm of
    R-ORD-01: unpositioned steps in registration order, then each positioned step
    (in registration order) inserted right before its ``before`` target or right
    after its ``after`` target as found in the list built so far.

    Raises:
        StepConfigurationError: Two definitions share a name (R-DEF-02).

    .. versionadded:: 0.1
    """

    __slots__ = ("_by_name", "_ordered", "_positions", "_registered")

    def __init__(self, definitions: Iterable[StepDefinition] = ()) -> None:
        registered = tuple(definitions)
        by_name: dict[str, StepDefinition] = {}
        for definition in registered:
            if definition.name in by_name:
                raise StepConfigurationError(
                    f"step {definition.name!r} is defined twice in the collection"
                )
            by_name[definition.name] = definition
        self._registered = registered
        self._by_name = by_name
        self._ordered: tuple[StepDefinition, ...] | None = None
        self._positions: dict[str, int] = {}

    @property
    def registered(self) -> tuple[StepDefinition, ...]:
        """The definitions in registration order (not execution order)."""
        return self._registered

    @property
    def ordered(self) -> tuple[StepDefinition, ...]:
        """The definitions in execution order (computed once and cached, R-DEF-17)."""
        if self._ordered is None:
            ordered = self._compute_order()
            self._positions = {d.name: i for i, d in enumerate(ordered)}
            self._ordered = ordered
        return self._ordered

    def _compute_order(self) -> tuple[StepDefinition, ...]:
        result = [d for d in self._registered if not d.is_positioned]
        for definition in self._registered:
            if not definition.is_positioned:
                continue
            target = (
                definition.before if definition.before is not None else definition.after
            )
            names = [d.name for d in result]
            if target not in names:
                option = "before" if definition.before is not None else "after"
                raise StepConfigurationError(
                    f"step {definition.name!r}: {option}={target!r} references no step "
                    f"placed before it; only already-defined steps can be referenced"
                )
            index = names.index(target)
            result.insert(
                index if definition.before is not None else index + 1, definition
            )
        return tuple(result)

    @property
    def names(self) -> list[str]:
        """Step names in execution order."""
        return [definition.name for definition in self.ordered]

    @property
    def first(self) -> StepDefinition | None:
        """The first step in execution order, None when there are no steps."""
        ordered = self.ordered
        return ordered[0] if ordered else None

    @property
    def last(self) -> StepDefinition | None:
        """The last step in execution order, None when there are no steps."""
        ordered = self.ordered
        return ordered[-1] if ordered else None

    def named(self, name: object) -> StepDefinition | None:
        """Return the step called ``str(name)``, or None (R-ORD-05)."""
        if name is None:
            return None
        return self._by_name.get(str(name))

    def next_after(self, name: object) -> StepDefinition | None:
        """Return the step after ``name``; the first step for None (R-ORD-03).

        Returns None after the last step and for unknown names.
        """
        ordered = self.ordered
        if name is None:
            return ordered[0] if ordered else None
        position = self._positions.get(str(name))
        if position is None or position + 1 >= len(ordered):
            return None
        return ordered[position + 1]

    def previous_before(self, name: object) -> StepDefinition | None:
        """Return the step before ``name`` (R-ORD-04).

        Returns None for None, for the first step and for unknown names.
        """
        if name is None:
            return None
        ordered = self.ordered
        position = self._positions.get(str(name))
        if position is None or position == 0:
            return None
        return ordered[position - 1]

    def __contains__(self, name: object) -> bool:
        """Whether a step called ``str(name)`` exists; does not compute the order."""
        return name is not None and str(name) in self._by_name

    @overload
    def __getitem__(self, index: int) -> StepDefinition: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[StepDefinition, ...]: ...

    def __getitem__(
        self, index: int | slice
    ) -> StepDefinition | tuple[StepDefinition, ...]:
        """Index into the execution order (ints and slices)."""
        return self.ordered[index]

    def __len__(self) -> int:
        return len(self._registered)

    def __iter__(self) -> Iterator[StepDefinition]:
        return iter(self.ordered)

    def __repr__(self) -> str:
        return f"<StepCollection {self.names!r}>"

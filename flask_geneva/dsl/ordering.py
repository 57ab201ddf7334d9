"""Step ordering: the ordered, immutable steps of a workflow class (SPEC §5.2).

:class:`StepCollection` computes the execution order once (R-ORD-01) and answers
"which step comes next/before" (R-ORD-03..05). It also knows the step history
(issue 19): gravestones keep their class-body position, so "the step after a
removed one" is the next defined step after that position (R-EVO-02), and a
renamed name resolves to its new step (R-EVO-04). Pure code: no database, no
Flask.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from typing import overload

from flask_geneva.dsl.definitions import StepDefinition
from flask_geneva.exceptions import StepConfigurationError

__all__ = ["StepCollection"]


class StepCollection:
    """The ordered, immutable steps of a workflow class (SPEC §5.2, R-ORD-01..05).

    Args:
        definitions: Step definitions in registration order, inherited ones first.
        removed: Gravestones as ``(name, index)``: the removed step stood before
            ``definitions[index]`` in the class body (``len(definitions)``: at the
            end) (R-EVO-01).
        renamed: Old name -> new (defined) step name (R-EVO-04).

    The execution order is computed once, on first use, by the algorithm of
    R-ORD-01: unpositioned steps in registration order, then each positioned step
    (in registration order) inserted right before its ``before`` target or right
    after its ``after`` target as found in the list built so far.

    Raises:
        StepConfigurationError: Two definitions share a name (R-DEF-02).

    .. versionadded:: 0.1
    """

    __slots__ = (
        "_by_name",
        "_full",
        "_ordered",
        "_positions",
        "_registered",
        "_removed",
        "_renamed",
    )

    def __init__(
        self,
        definitions: Iterable[StepDefinition] = (),
        *,
        removed: Iterable[tuple[str, int]] = (),
        renamed: Mapping[str, str] | None = None,
    ) -> None:
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
        self._removed = tuple(removed)
        self._renamed = dict(renamed or {})
        self._ordered: tuple[StepDefinition, ...] | None = None
        # Execution order with the gravestones (str) at their places.
        self._full: tuple[StepDefinition | str, ...] = ()
        self._positions: dict[str, int] = {}

    @property
    def registered(self) -> tuple[StepDefinition, ...]:
        """The definitions in registration order (not execution order)."""
        return self._registered

    @property
    def ordered(self) -> tuple[StepDefinition, ...]:
        """The definitions in execution order (computed once and cached, R-DEF-17)."""
        if self._ordered is None:
            full = self._compute_order()
            self._full = full
            self._positions = {_entry_name(e): i for i, e in enumerate(full)}
            self._ordered = tuple(e for e in full if not isinstance(e, str))
        return self._ordered

    def _compute_order(self) -> tuple[StepDefinition | str, ...]:
        result: list[StepDefinition | str] = []
        for index, definition in enumerate((*self._registered, None)):
            result.extend(name for name, at in self._removed if at == index)
            if definition is not None and not definition.is_positioned:
                result.append(definition)
        for definition in self._registered:
            if not definition.is_positioned:
                continue
            target = (
                definition.before if definition.before is not None else definition.after
            )
            names = [_entry_name(d, gravestone="") for d in result]
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
        """Return the step called ``str(name)``, or None (R-ORD-05).

        A renamed name returns its new step (R-EVO-04); a removed one None.
        """
        if name is None:
            return None
        key = str(name)
        return self._by_name.get(self._renamed.get(key, key))

    def next_after(self, name: object) -> StepDefinition | None:
        """Return the step after ``name``; the first step for None (R-ORD-03).

        After a gravestone: the first defined step after its position (R-EVO-02);
        a renamed name counts as its new step (R-EVO-04). Returns None after the
        last step and for unknown names.
        """
        ordered = self.ordered
        if name is None:
            return ordered[0] if ordered else None
        key = str(name)
        position = self._positions.get(self._renamed.get(key, key))
        if position is None:
            return None
        return next(
            (e for e in self._full[position + 1 :] if not isinstance(e, str)), None
        )

    def previous_before(self, name: object) -> StepDefinition | None:
        """Return the step before ``name`` (R-ORD-04).

        Returns None for None, for the first step and for unknown names; renamed
        names and gravestones as in :meth:`next_after`.
        """
        if name is None:
            return None
        self.ordered  # noqa: B018 - computes the positions
        key = str(name)
        position = self._positions.get(self._renamed.get(key, key))
        if position is None:
            return None
        return next(
            (e for e in reversed(self._full[:position]) if not isinstance(e, str)),
            None,
        )

    def __contains__(self, name: object) -> bool:
        """Whether a step called ``str(name)`` exists; does not compute the order.

        Renamed names count (they run their new step); gravestones do not.
        """
        return self.named(name) is not None

    @property
    def removed_names(self) -> tuple[str, ...]:
        """The gravestones' names, in declaration order (R-EVO-01)."""
        return tuple(name for name, _ in self._removed)

    @property
    def renames(self) -> Mapping[str, str]:
        """Old name -> new step name, for every ``step.renamed`` (R-EVO-04)."""
        return dict(self._renamed)

    def is_removed(self, name: object) -> bool:
        """Whether ``name`` is a gravestone (``step.removed``, R-EVO-01)."""
        return name is not None and str(name) in self.removed_names

    def is_known(self, name: object) -> bool:
        """Whether the code knows ``name``: a step, a rename or a gravestone.

        Rows carrying any other name strand their workflow (R-EXE-14, R-EVO-08).
        """
        return name in self or self.is_removed(name)

    def display_name(self, name: object) -> str:
        """How a stored step name reads (R-EVO-04, R-EVO-06).

        ``"new (was old)"`` for a renamed name, ``"old (removed)"`` for a
        gravestone, else the name itself.
        """
        key = str(name)
        new = self._renamed.get(key)
        if new is not None:
            return f"{new} (was {key})"
        return f"{key} (removed)" if self.is_removed(key) else key

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


def _entry_name(entry: StepDefinition | str, gravestone: str | None = None) -> str:
    """An order entry's name; a gravestone's is ``gravestone`` when given."""
    if isinstance(entry, str):
        return entry if gravestone is None else gravestone
    return entry.name

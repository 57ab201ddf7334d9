"""Collect a workflow class's DSL declarations into :class:`WorkflowDefinitions`.

Called from ``Workflow.__init_subclass__`` (SPEC §15.2). The collector reads only the
new class's own ``__dict__``, in insertion (class-body) order, and merges what it finds
onto copies of the parent's collected values (R-INH-01..04); it never re-reads
inherited attributes, which would register them twice, and never mutates the parent.
Pure code: no database, no Flask.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from flask_geneva.dsl.conditions import CANCEL_CONDITION_MARK
from flask_geneva.dsl.deadlines import DEFAULT_ON_DEADLINE
from flask_geneva.dsl.deadlines import class_deadline
from flask_geneva.dsl.deadlines import class_on_deadline
from flask_geneva.dsl.definitions import STEP_MARK
from flask_geneva.dsl.definitions import DecoratedStep
from flask_geneva.dsl.definitions import StepDefinition
from flask_geneva.dsl.definitions import StepSpec
from flask_geneva.dsl.evolution import RemovedStep
from flask_geneva.dsl.evolution import RenamedStep
from flask_geneva.dsl.evolution import validate_history
from flask_geneva.dsl.job_options import fold_priority
from flask_geneva.dsl.job_options import merge_job_options
from flask_geneva.dsl.job_options import validate_job_options
from flask_geneva.dsl.ordering import StepCollection
from flask_geneva.dsl.signatures import condition_problem
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.policies.exception_policy import HANDLER_MARK
from flask_geneva.policies.exception_policy import ExceptionHandlerDecorator
from flask_geneva.policies.exception_policy import ExceptionPolicy

__all__ = ["WorkflowDefinitions", "collect_definitions"]


@dataclass(frozen=True)
class WorkflowDefinitions:
    """Everything a workflow class declared, inherited declarations included.

    Attributes:
        steps: The steps (registration order in ``steps.registered``, execution order
            when iterated).
        cancel_conditions: Cancel conditions in evaluation order, parent's first
            (R-INH-04): callables ``(workflow)``, method names, or constants.
        exception_policies: Class-level policies in registration order, parent's
            first (R-POL-40 consults them from the end).
        default_job_options: Class-level job options, validated and merged over the
            parent's (read-only mapping, R-JOB-01).
        removed: ``step.removed`` gravestones and their positions (R-EVO-01).
        renamed: ``step.renamed`` declarations by old name (R-EVO-04).

    .. versionadded:: 0.1
    """

    steps: StepCollection
    cancel_conditions: tuple[object, ...]
    exception_policies: tuple[ExceptionPolicy, ...]
    default_job_options: Mapping[str, Any]
    #: Gravestones with the registration index they stand before (R-EVO-01).
    removed: tuple[tuple[RemovedStep, int], ...] = ()
    #: ``step.renamed`` declarations by old name (R-EVO-04).
    renamed: Mapping[str, RenamedStep] = field(
        default_factory=lambda: MappingProxyType({})
    )
    #: ``__geneva_deadline__``: each workflow's deadline after its creation,
    #: or None (R-DL-01).
    deadline: timedelta | None = None
    #: ``__geneva_on_deadline__``: ``"cancel"`` or ``"pause"`` (R-DL-03).
    on_deadline: str = DEFAULT_ON_DEADLINE


def collect_definitions(
    cls: type,
    *,
    parent: WorkflowDefinitions | None,
    type_name: str,
    reserved_names: frozenset[str],
) -> WorkflowDefinitions:
    """Collect the DSL declarations of ``cls`` on top of ``parent`` (SPEC §15.2).

    Recognised entries of ``cls.__dict__``, processed in class-body order:

    - functions marked by ``@step``/``@resumable_step``;
    - attributes holding a :class:`StepSpec` or a list/tuple of them (expanded in
      place; anonymous ones are named ``step_<N>``, N counting inherited steps,
      R-DEF-03);
    - ``cancel_conditions`` (list/tuple) and ``@cancel_if`` methods (registered by
      method name);
    - ``exception_policies`` (list/tuple of :class:`ExceptionPolicy`) and
      ``@on_exception`` handler methods (registered with their method name as
      handler);
    - ``default_job_options`` (a mapping, validated with context
      ``"<type_name>.default_job_options"`` and merged over the parent's);
    - ``priority`` (an int or None): the class's ``priority`` job option,
      the same as ``default_job_options={"priority": n}`` (R-PRI-01); a step
      method named ``priority`` stays a step;
    - ``step.removed``/``step.renamed`` markers (gravestones keep their
      class-body position, R-EVO-01..05);
    - ``__geneva_deadline__`` (a positive timedelta or None) and
      ``__geneva_on_deadline__`` (``"cancel"`` or ``"pause"``), inherited
      unless set again (R-DL-01, R-DL-03).

    Args:
        cls: The class being created.
        parent: The parent class's definitions, or None for a root class. Never
            mutated.
        type_name: The class's name for error messages.
        reserved_names: Attribute names of the base ``Workflow`` that steps must not
            shadow (R-DEF-18).

    Returns:
        A new :class:`WorkflowDefinitions`.

    Raises:
        StepConfigurationError: A duplicate step name ("already defined in
            <type_name>", R-DEF-02), a ``before``/``after`` reference to a step not
            registered yet (R-DEF-07), a reserved step or body method name
            (R-DEF-18), a malformed ``cancel_conditions``/``exception_policies``/
            ``default_job_options``/``priority`` attribute, a ``priority``
            attribute and ``default_job_options={"priority": ...}`` with
            different values (R-PRI-01), an ``on_exception(...)`` handler
            decorator that was not applied to a method, or contradictory step
            history (R-EVO-05).

    .. versionadded:: 0.1
    """
    collector = _Collector(parent, type_name, reserved_names)
    for attribute, value in cls.__dict__.items():
        collector.visit(attribute, value)
    return collector.result()


class _Collector:
    def __init__(
        self,
        parent: WorkflowDefinitions | None,
        type_name: str,
        reserved_names: frozenset[str],
    ) -> None:
        self.type_name = type_name
        self.reserved_names = reserved_names
        self.steps: list[StepDefinition] = (
            list(parent.steps.registered) if parent else []
        )
        self.step_names = {definition.name for definition in self.steps}
        # Gravestones as (marker, index of the step they stand before).
        self.removed: list[tuple[RemovedStep, int]] = (
            list(parent.removed) if parent else []
        )
        self.inherited_removed = frozenset(marker for marker, _ in self.removed)
        self.renamed: dict[str, RenamedStep] = dict(parent.renamed) if parent else {}
        self.seen_history: set[int] = set()
        self.namespace: dict[str, object] = {}
        self.decorated: list[DecoratedStep] = []
        self.conditions: list[object] = list(parent.cancel_conditions) if parent else []
        self.policies: list[ExceptionPolicy] = (
            list(parent.exception_policies) if parent else []
        )
        self.job_options: dict[str, Any] = (
            dict(parent.default_job_options) if parent else {}
        )
        # This class body's own default_job_options and priority attribute,
        # folded together in result() (R-PRI-01).
        self.own_job_options: object = None
        self.priority: object = None
        self.deadline = parent.deadline if parent else None
        self.on_deadline = parent.on_deadline if parent else DEFAULT_ON_DEADLINE

    def visit(self, attribute: str, value: object) -> None:
        self.namespace[attribute] = value
        if attribute == "default_job_options":
            self.own_job_options = value
        elif attribute == "priority" and not _is_step_function(value):
            self.priority = self._class_priority(value)
        elif attribute == "__geneva_deadline__":
            self.deadline = class_deadline(value, type_name=self.type_name)
        elif attribute == "__geneva_on_deadline__":
            self.on_deadline = class_on_deadline(value, type_name=self.type_name)
        elif attribute == "cancel_conditions":
            self._add_cancel_conditions(value)
        elif attribute == "exception_policies":
            self._add_exception_policies(value)
        elif isinstance(value, RemovedStep | RenamedStep):
            self._add_history(value)
        elif isinstance(value, DecoratedStep):
            self.decorated.append(value)
        elif isinstance(value, StepSpec):
            self._add_step(value, attribute=None)
        elif isinstance(value, list | tuple) and value and _all_specs(value):
            for spec in value:
                self._add_step(spec, attribute=None)
        elif isinstance(value, list | tuple) and any(
            isinstance(item, StepSpec) for item in value
        ):
            raise StepConfigurationError(
                f"{self.type_name}.{attribute}: a list of steps must hold only "
                f"StepSpec objects (from step.anonymous/step.repeat); got {value!r}"
            )
        elif isinstance(value, ExceptionHandlerDecorator):
            raise StepConfigurationError(
                f"{self.type_name}.{attribute}: {value!r} was not applied to a method; "
                f"use it as @on_exception(...) above a method (self, error), or give "
                f"an action to build a declarative policy"
            )
        elif inspect.isfunction(value):
            self._add_marked_function(attribute, value)

    def _add_marked_function(self, attribute: str, func: Any) -> None:
        marks = func.__dict__
        spec = marks.get(STEP_MARK)
        if spec is not None:
            self._add_step(spec, attribute=attribute)
        if marks.get(CANCEL_CONDITION_MARK):
            self.conditions.append(attribute)
        policy = marks.get(HANDLER_MARK)
        if isinstance(policy, ExceptionPolicy):
            if policy.handler != attribute:
                policy = policy._with_handler(attribute)
            self.policies.append(policy)

    def _add_step(self, spec: StepSpec, *, attribute: str | None) -> None:
        name = spec.name if spec.name is not None else f"step_{len(self.steps) + 1}"
        method_name = spec.method_name
        if attribute is not None and spec.method_name is not None:
            # A decorated method is looked up by the attribute it is stored under.
            method_name = attribute
        if name in self.step_names:
            raise StepConfigurationError(
                f"step {name!r} is already defined in {self.type_name}"
            )
        for kind, value in (("name", name), ("body method name", method_name)):
            if value is not None and value in self.reserved_names:
                raise StepConfigurationError(
                    f"{self.type_name}: step {kind} {value!r} is reserved: it would "
                    f"shadow the attribute {value!r} of the Workflow base class; "
                    f"choose another name"
                )
        for option, target in (("before", spec.before), ("after", spec.after)):
            if target is not None and target not in self.step_names:
                defined = ", ".join(repr(d.name) for d in self.steps) or "none"
                raise StepConfigurationError(
                    f"{self.type_name}: step {name!r} uses {option}={target!r}, but "
                    f"no step named {target!r} is defined yet; only already-defined "
                    f"steps can be referenced (defined so far: {defined})"
                )
        self.steps.append(spec.build(name, method_name=method_name))
        self.step_names.add(name)

    def _add_history(self, marker: RemovedStep | RenamedStep) -> None:
        if id(marker) in self.seen_history:
            return  # recorded by the call and assigned to an attribute too
        self.seen_history.add(id(marker))
        if isinstance(marker, RemovedStep):
            if any(known.name == marker.name for known, _ in self.removed):
                raise StepConfigurationError(
                    f"{self.type_name}: step.removed({marker.name!r}) is declared "
                    f"twice; one gravestone per removed step "
                    f"({marker.location[0]}:{marker.location[1]})"
                )
            self.removed.append((marker, len(self.steps)))
            return
        if marker.old_name in self.renamed:
            raise StepConfigurationError(
                f"{self.type_name}: step {marker.old_name!r} is renamed twice (to "
                f"{self.renamed[marker.old_name].new_name!r} and to "
                f"{marker.new_name!r}); keep one step.renamed "
                f"({marker.location[0]}:{marker.location[1]})"
            )
        self.renamed[marker.old_name] = marker

    def _listed(
        self, value: object, attribute: str, elements: str
    ) -> list[Any] | tuple[Any, ...]:
        """``value`` of the class attribute ``attribute``, which must be a list.

        Raises:
            StepConfigurationError: It is not a list or tuple of ``elements``.
        """
        if not isinstance(value, list | tuple):
            raise StepConfigurationError(
                f"{self.type_name}.{attribute} must be a list of {elements}; got "
                f"{value!r} ({type(value).__name__})"
            )
        return value

    def _add_cancel_conditions(self, value: object) -> None:
        for condition in self._listed(
            value,
            "cancel_conditions",
            "conditions (callables (self), method names or constants)",
        ):
            if isinstance(condition, str) and not condition.isidentifier():
                raise StepConfigurationError(
                    f"{self.type_name}.cancel_conditions: invalid method name "
                    f"{condition!r}; a string condition names a workflow method"
                )
            if callable(condition) and not isinstance(condition, type):
                problem = condition_problem(condition, option="cancel condition")
                if problem is not None:
                    raise StepConfigurationError(
                        f"{self.type_name}.cancel_conditions: {problem}"
                    )
            self.conditions.append(condition)

    def _add_exception_policies(self, value: object) -> None:
        listed = self._listed(
            value,
            "exception_policies",
            "ExceptionPolicy objects (e.g. on_exception(TimeoutError, "
            "action='reattempt'))",
        )
        for index, policy in enumerate(listed):
            if isinstance(policy, ExceptionHandlerDecorator):
                raise StepConfigurationError(
                    f"{self.type_name}.exception_policies[{index}]: {policy!r} has no "
                    f"action; give an action (e.g. on_exception(TimeoutError, "
                    f"action='reattempt')) or use @on_exception(...) to decorate a "
                    f"handler method (self, error)"
                )
            if not isinstance(policy, ExceptionPolicy):
                raise StepConfigurationError(
                    f"{self.type_name}.exception_policies[{index}]: {policy!r} "
                    f"({type(policy).__name__}) is not an ExceptionPolicy"
                )
            self.policies.append(policy)

    def _class_priority(self, value: object) -> object:
        """The ``priority`` class attribute, checked as the job option (R-PRI-01).

        Raises:
            StepConfigurationError: Not an int or None (bools refused, R-JOB-05);
                the message says what the attribute is.
        """
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            return value
        raise StepConfigurationError(
            f"{self.type_name}.priority: must be an int or None, got {value!r} "
            f"({type(value).__name__}); the class attribute priority is the "
            f"class-level 'priority' job option (higher runs first); for one "
            f"workflow pass create(priority=...) (R-PRI-01)"
        )

    def _add_job_options(self) -> None:
        options = validate_job_options(
            self.own_job_options, context=f"{self.type_name}.default_job_options"
        )
        folded = fold_priority(
            options,
            self.priority,
            context=self.type_name,
            keyword="priority = ",
            options_name="default_job_options",
        )
        self.job_options = merge_job_options(self.job_options, folded)

    def _check_replaced_steps(self) -> None:
        """Refuse a decorated step that a later definition replaced (R-DEF-02)."""
        for record in self.decorated:
            held = self.namespace.get(record.attribute)
            marks = getattr(held, "__dict__", {})
            if marks.get(STEP_MARK) is record.spec:
                continue
            spec = record.spec
            first = f"{spec.definition_location[0]}:{spec.definition_location[1]}"
            later = ""
            code = getattr(held, "__code__", None)
            if code is not None:
                later = f" at {code.co_filename}:{code.co_firstlineno}"
            step_name = spec.name if spec.name is not None else record.attribute
            raise StepConfigurationError(
                f"step {step_name!r} is already defined in {self.type_name}: a "
                f"second definition of {record.attribute!r}{later} replaces the "
                f"step decorated at {first}; give each step its own method name"
            )

    def result(self) -> WorkflowDefinitions:
        self._add_job_options()
        self._check_replaced_steps()
        validate_history(
            self.type_name,
            [definition.name for definition in self.steps],
            [marker for marker, _ in self.removed],
            self.renamed,
            inherited=self.inherited_removed,
        )
        return WorkflowDefinitions(
            steps=StepCollection(
                self.steps,
                removed=[(marker.name, index) for marker, index in self.removed],
                renamed={old: m.new_name for old, m in self.renamed.items()},
            ),
            removed=tuple(self.removed),
            renamed=MappingProxyType(dict(self.renamed)),
            cancel_conditions=tuple(self.conditions),
            exception_policies=tuple(self.policies),
            default_job_options=MappingProxyType(self.job_options),
            deadline=self.deadline,
            on_deadline=self.on_deadline,
        )


def _is_step_function(value: object) -> bool:
    """Whether ``value`` is a function marked by ``@step`` (a step named so)."""
    return inspect.isfunction(value) and STEP_MARK in value.__dict__


def _all_specs(values: list[Any] | tuple[Any, ...]) -> bool:
    return all(isinstance(item, StepSpec) for item in values)

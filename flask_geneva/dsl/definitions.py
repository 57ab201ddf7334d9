"""Step definitions: what one declared step is (SPEC §5.1, §15.2).

A :class:`StepSpec` is a declared step whose options are validated but whose name may
still be unknown (anonymous steps); the collector (:mod:`flask_geneva.dsl.collect`)
builds an immutable :class:`StepDefinition` from it when the workflow class is
created. Pure code: no database, no Flask.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import fields
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from flask_geneva.dsl.conditions import describe_condition
from flask_geneva.dsl.conditions import evaluate_condition
from flask_geneva.dsl.job_options import validate_job_options
from flask_geneva.dsl.limits import Limit
from flask_geneva.dsl.signal_matchers import WaitFor
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.policies.exception_policy import Action
from flask_geneva.policies.exception_policy import ExceptionPolicy
from flask_geneva.policies.exception_policy import PolicyList

__all__ = ["STEP_MARK", "DecoratedStep", "StepDefinition", "StepSpec"]

#: Attribute holding the :class:`StepSpec` on a function decorated with ``@step``.
STEP_MARK = "__geneva_step__"


@dataclass(frozen=True)
class DecoratedStep:
    """A ``@step`` applied in a class body, recorded in that class's namespace.

    The class body's namespace keeps only the last function defined under a
    name, so a second ``def welcome`` would silently replace a decorated
    ``welcome``; the collector compares these records with what the class
    holds and refuses such a replacement (R-DEF-02).

    Attributes:
        attribute: The function's name, the attribute it is defined under.
        spec: The :class:`StepSpec` the decorator marked it with.
    """

    attribute: str
    spec: StepSpec


@dataclass(frozen=True, kw_only=True, eq=False)
class _StepFields:
    """The fields of a step, declared once for :class:`StepSpec` and the
    :class:`StepDefinition` it builds (the attributes are described there)."""

    name: str | None
    method_name: str | None
    body: Callable[..., Any] | None
    wait: timedelta | None
    skip_if: Any
    run_if: Any
    exception_policy: ExceptionPolicy | PolicyList | None
    job_options: Any
    before: str | None
    after: str | None
    is_resumable: bool
    max_iterations: int | None
    max_runtime: timedelta | None
    definition_location: tuple[str, int]
    body_location: tuple[str, int] | None
    wait_for: WaitFor | None = None
    wait_timeout: timedelta | None = None
    on_wait_timeout: str | None = None
    limits: tuple[Limit, ...] = ()
    wait_for_children: str | int | None = None
    on_child_failure: str = "fail"
    timeout: timedelta | None = None


@dataclass(frozen=True, kw_only=True, eq=False)
class StepDefinition(_StepFields):
    """An immutable step of a workflow class (SPEC §5.1, R-DEF-17).

    Created by the collector from a :class:`StepSpec`; do not build it by hand.

    Attributes:
        name: The step name, stored in the database (R-DEF-02).
        method_name: Name of the workflow method that is the body, looked up on the
            instance at run time so subclass overrides win (R-INH-03); None for
            inline bodies.
        body: Inline body ``(workflow)`` (``(workflow, it)`` for resumable steps),
            used when ``method_name`` is None.
        wait: Delay before the step's execution is due, or None (R-DEF-04).
        skip_if: None, bool, method name or callable ``(workflow)`` (R-DEF-05).
        run_if: Inverse condition of ``skip_if``, same shapes (R-DEF-06).
        exception_policy: The step-level policy, a :class:`PolicyList`, or None when
            the step set none (R-DEF-12).
        job_options: Validated step-level job options, read-only (R-DEF-14).
        before: Name of the step this one is placed before, or None.
        after: Name of the step this one is placed after, or None.
        is_resumable: Whether this is a ``resumable_step`` (SPEC §10).
        max_iterations: Iterations per execution before interruption, or None.
        max_runtime: Runtime per execution before interruption, or None.
        definition_location: ``(file, line)`` of the declaration (R-DEF-16).
        body_location: ``(file, line)`` of the body function, None when the body is a
            method name given as a string (R-DEF-16).
        wait_for: What the step waits for before it runs (a normalized
            :class:`~flask_geneva.dsl.signal_matchers.WaitFor`), or None (R-WSIG-05).
        wait_timeout: How long it waits for it after parking, or None (R-WSIG-40).
        on_wait_timeout: ``"skip"``, ``"cancel"``, ``"pause"`` or None (the
            timeout then raises ``SignalWaitTimeout`` into the policies, R-WSIG-41).
        limits: The step's :class:`~flask_geneva.dsl.limits.Limit` objects, in
            declaration order; ``()`` for an unlimited step (R-LIM-03).
        wait_for_children: ``"all"``, ``"any"``, a positive int, or None: how
            many of the workflow's children must have settled before the step
            runs (R-CHD-21).
        on_child_failure: ``"fail"`` (a failed child raises
            ``ChildWorkflowFailed`` at the gate) or ``"ignore"`` (R-CHD-23).
        timeout: How long one run of the body may take, or None: longer
            raises :class:`~flask_geneva.exceptions.StepTimeout` into the
            step's policies (R-STO-01..14).

    .. versionadded:: 0.1
    """

    # The shared fields are declared once, on _StepFields.
    name: str
    job_options: Mapping[str, Any]

    @property
    def on_exception(self) -> Action | None:
        """Action of a single declarative step-level policy, else None (R-DEF-13)."""
        policy = self.exception_policy
        if isinstance(policy, ExceptionPolicy) and policy.is_declarative:
            return policy.action
        return None

    @property
    def is_positioned(self) -> bool:
        """Whether the step was placed with ``before`` or ``after`` (R-ORD-01)."""
        return self.before is not None or self.after is not None

    def invoke(self, workflow: object, iterable_step: object = None) -> Any:
        """Run the step body on ``workflow`` and return its result.

        A method body is called as ``getattr(workflow, method_name)(...)`` so that a
        subclass override takes effect (R-INH-03); an inline body as
        ``body(workflow, ...)``. Resumable steps receive ``iterable_step`` (the ``it``
        object) as the extra argument; regular steps receive nothing.

        Raises:
            Exception: Whatever the body raises, including flow-control signals.
        """
        if self.method_name is not None:
            target = getattr(workflow, self.method_name)
            return target(iterable_step) if self.is_resumable else target()
        if self.body is None:  # pragma: no cover - prevented by StepSpec validation
            raise StepConfigurationError(f"Step '{self.name}' has no body")
        if self.is_resumable:
            return self.body(workflow, iterable_step)
        return self.body(workflow)

    def should_skip(self, workflow: object) -> bool:
        """Return whether the step is skipped for ``workflow`` (R-CND-02, R-DEF-06).

        ``skip_if`` skips when truthy; ``run_if`` skips when falsy; with neither the
        step runs. Method-name conditions are called on the workflow.

        Raises:
            Exception: Whatever the condition raises, unchanged.
        """
        if self.run_if is not None:
            return not evaluate_condition(workflow, self.run_if)
        return evaluate_condition(workflow, self.skip_if)

    def skip_condition_description(self) -> str | None:
        """Describe the skip condition for records (R-PDR-04), None if there is none.

        ``skip_if`` is described by its name or repr; ``run_if`` as ``"not <name>"``.
        """
        if self.run_if is not None:
            return f"not {describe_condition(self.run_if)}"
        if self.skip_if is not None:
            return describe_condition(self.skip_if)
        return None

    def __repr__(self) -> str:
        kind = "resumable_step" if self.is_resumable else "step"
        return f"<StepDefinition {kind} {self.name!r}>"


@dataclass(frozen=True, kw_only=True, eq=False)
class StepSpec(_StepFields):
    """A declared step before it is registered on a class (SPEC §15.2).

    ``step.anonymous`` and ``step.repeat`` return specs; ``@step`` stores one on the
    decorated function (attribute :data:`STEP_MARK`). All options are already
    validated, except the ``before``/``after`` references, duplicate names and
    reserved names, which need the class and are checked by the collector.

    Attributes:
        name: The step name, or None for an anonymous step (named ``step_<N>`` when
            registered, R-DEF-03).
        job_options: Validated read-only mapping for named specs; the raw value for
            anonymous specs, validated by :meth:`build` once the name is known.

    Other attributes are as in :class:`StepDefinition`.

    .. versionadded:: 0.1
    """

    def build(
        self, name: str | None = None, *, method_name: str | None = None
    ) -> StepDefinition:
        """Return the :class:`StepDefinition` for this spec.

        Args:
            name: The final name; required for anonymous specs, defaults to
                :attr:`name`.
            method_name: Overrides :attr:`method_name` (the collector passes the
                attribute name under which a decorated method was found).

        Raises:
            StepConfigurationError: No name is known, or the job options are invalid
                (context ``"Step '<name>'"``, R-DEF-14).
        """
        final_name = self.name if name is None else str(name)
        if final_name is None:
            raise StepConfigurationError("an anonymous step needs a name to be built")
        options = validate_job_options(self.job_options, context=f"Step '{final_name}'")
        shared = {field.name: getattr(self, field.name) for field in fields(self)}
        return StepDefinition(
            **{
                **shared,
                "name": final_name,
                "method_name": self.method_name if method_name is None else method_name,
                "job_options": MappingProxyType(options),
            }
        )

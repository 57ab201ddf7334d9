"""Backoff strategies: how long a reattempt waits, growing with the attempt (SPEC §9.7).

A reattempt policy's ``wait`` is either a fixed duration or a strategy from this
module (R-POL-50):

- :meth:`Backoff.exponential` — ``base * factor ** (attempt - 1)``, capped;
- :meth:`Backoff.polynomial` — ``attempt ** 4 + 2`` seconds (ActiveJob's
  ``polynomially_longer``), capped;
- :meth:`Backoff.retry_after` — the wait the error carries (an HTTP 429/503's
  ``Retry-After``), else a default;
- any callable ``(attempt, error) -> timedelta``.

``attempt`` is the number of the reattempt being scheduled: 1 for the first,
i.e. the consecutive-reattempt count of R-CNT-01 plus one (R-POL-51). Jitter
only adds, at most ``jitter`` times the computed wait, and is derived from a
hash of (workflow id, step name, attempt), so a replay computes the same wait
(R-POL-52). Pure code: no database, no Flask.
"""

from __future__ import annotations

import hashlib
import inspect
import math
from abc import ABC
from abc import abstractmethod
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from datetime import timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from flask_geneva.core import clock
from flask_geneva.core.durations import MAX_DURATION
from flask_geneva.core.durations import coerce_duration
from flask_geneva.core.durations import duration_option
from flask_geneva.exceptions import GenevaError
from flask_geneva.exceptions import StepConfigurationError

__all__ = [
    "Backoff",
    "BackoffError",
    "BackoffStrategy",
    "BackoffWait",
    "CallableBackoff",
    "ExponentialBackoff",
    "PolynomialBackoff",
    "RetryAfterBackoff",
    "coerce_wait",
    "jitter_fraction",
]

#: Allowed forms of a reattempt ``wait``, for error messages.
WAIT_FORMS = (
    "a non-negative timedelta or number of seconds, a Backoff strategy "
    "(Backoff.exponential(...), Backoff.polynomial(...), Backoff.retry_after(...)) "
    "or a callable (attempt, error) -> timedelta"
)


class BackoffError(GenevaError, ValueError):
    """A backoff callable returned something that is not a usable wait (R-POL-55).

    Raised at run time when a custom ``(attempt, error)`` callable returns a value
    that is not a ``timedelta``, or a negative one. The executor records it in the
    policy decision (``wait_error``) and pauses the workflow; the worker goes on.

    .. versionadded:: 0.3
    """


@dataclass(frozen=True)
class BackoffWait:
    """A computed reattempt wait and how it was obtained (R-PDR-07).

    Attributes:
        wait: The delay before the reattempt, jitter included.
        label: How the admin names the strategy, e.g. ``"exponential backoff"``.
    """

    wait: timedelta
    label: str


def jitter_fraction(key: str) -> float:
    """A fraction in ``[0, 1)`` derived from ``key`` by SHA-256 (R-POL-52).

    The same key always gives the same fraction (no ``random()``), so tests and
    replays compute the same wait.
    """
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def jitter_key(workflow_id: object, step_name: str, attempt: int) -> str:
    """The jitter key of one reattempt: workflow id, step name and attempt."""
    return f"{workflow_id}\x1f{step_name}\x1f{attempt}"


def _seconds_option(value: object, *, name: str, strategy: str) -> float:
    """Validate a positive duration option; return it in seconds."""
    return duration_option(
        value,
        name=name,
        label=strategy,
        must="a timedelta or number of seconds from 1 microsecond (timedelta's "
        "resolution) to 100 years",
        positive=True,
    ).total_seconds()


def _cap_option(value: object, *, strategy: str) -> float | None:
    """Validate an optional ``cap``: None, or a positive duration in seconds."""
    if value is None:
        return None
    return _seconds_option(value, name="cap", strategy=strategy)


def _number_option(
    value: object, *, accepts: Callable[[float], bool], message: str
) -> float:
    """Validate a finite number (not a bool) that ``accepts``; return it as float.

    Raises:
        StepConfigurationError: ``message``, for any other value.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not accepts(value)
    ):
        raise StepConfigurationError(message)
    return float(value)


def _jitter_option(value: object, *, strategy: str) -> float:
    return _number_option(
        value,
        accepts=lambda number: 0 <= number <= 1,
        message=f"{strategy}: invalid jitter {value!r}: must be a number from 0 to 1 "
        f"(the largest fraction of the wait added at random-looking but "
        f"deterministic offsets; 0 = no jitter)",
    )


def _limits(cap: object, jitter: object, strategy: str) -> tuple[float | None, float]:
    """A strategy's validated ``(cap in seconds or None, jitter)``."""
    return _cap_option(cap, strategy=strategy), _jitter_option(
        jitter, strategy=strategy
    )


def _capped(seconds: Callable[[], float], cap: float | None, label: str) -> BackoffWait:
    """The wait of ``seconds()`` (infinite on overflow), at most ``cap``."""
    try:
        value = seconds()
    except OverflowError:
        value = math.inf
    if cap is not None:
        value = min(value, cap)
    return BackoffWait(_clamp(value), label)


def _clamp(seconds: float) -> timedelta:
    """Seconds as a timedelta, limited to ``[0, MAX_DURATION]``."""
    if not math.isfinite(seconds) or seconds >= MAX_DURATION.total_seconds():
        return MAX_DURATION
    return timedelta(seconds=max(seconds, 0.0))


class BackoffStrategy(ABC):
    """Base of the backoff strategies (R-POL-50).

    Attributes:
        jitter: Largest fraction of the computed wait added as jitter (0..1).
        label: How the admin's policy sentence names the strategy.

    .. versionadded:: 0.3
    """

    jitter: float = 0.0
    label: str = "backoff"

    @abstractmethod
    def base_wait(self, attempt: int, error: BaseException | None) -> BackoffWait:
        """The wait before jitter for reattempt number ``attempt`` (1-based)."""

    def compute(
        self, attempt: int, error: BaseException | None, *, key: str
    ) -> BackoffWait:
        """The wait of reattempt number ``attempt``, jitter included (R-POL-51/52).

        Args:
            attempt: 1 for the first reattempt (consecutive count + 1, R-CNT-01).
            error: The exception being handled (read by ``retry_after`` and by
                callables), or None.
            key: The jitter key (:func:`jitter_key`).

        Raises:
            BackoffError: A callable returned a non-timedelta or negative value.
        """
        found = self.base_wait(attempt, error)
        if not self.jitter:
            return found
        extra = found.wait.total_seconds() * self.jitter * jitter_fraction(key)
        return BackoffWait(_clamp(found.wait.total_seconds() + extra), found.label)


class ExponentialBackoff(BackoffStrategy):
    """``base * factor ** (attempt - 1)`` seconds, at most ``cap`` (R-POL-53).

    Build it with :meth:`Backoff.exponential`.
    """

    label = "exponential backoff"

    def __init__(
        self, base: object, *, factor: object, cap: object, jitter: object
    ) -> None:
        name = "Backoff.exponential"
        self.base = _seconds_option(base, name="base", strategy=name)
        self.factor = _number_option(
            factor,
            accepts=lambda number: number >= 1,
            message=f"{name}: invalid factor {factor!r}: must be a finite number >= 1 "
            f"(2 doubles the wait each reattempt)",
        )
        self.cap, self.jitter = _limits(cap, jitter, name)

    def base_wait(self, attempt: int, error: BaseException | None) -> BackoffWait:
        """``base * factor ** (attempt - 1)``, limited to ``cap``."""
        return _capped(
            lambda: self.base * self.factor ** max(attempt - 1, 0), self.cap, self.label
        )

    def __repr__(self) -> str:
        return (
            f"Backoff.exponential({self.base:g}, factor={self.factor:g}, "
            f"cap={self.cap!r}, jitter={self.jitter:g})"
        )


class PolynomialBackoff(BackoffStrategy):
    """``attempt ** exponent + offset`` seconds, at most ``cap`` (R-POL-53).

    Build it with :meth:`Backoff.polynomial`.
    """

    label = "polynomial backoff"

    def __init__(
        self, *, exponent: object, offset: object, cap: object, jitter: object
    ) -> None:
        name = "Backoff.polynomial"
        self.exponent = _number_option(
            exponent,
            accepts=lambda number: number > 0,
            message=f"{name}: invalid exponent {exponent!r}: must be a positive number",
        )
        self.offset = duration_option(
            offset,
            name="offset",
            label=name,
            must="a non-negative timedelta or number of seconds",
        ).total_seconds()
        self.cap, self.jitter = _limits(cap, jitter, name)

    def base_wait(self, attempt: int, error: BaseException | None) -> BackoffWait:
        """``attempt ** exponent + offset``, limited to ``cap``."""
        return _capped(
            lambda: float(max(attempt, 1)) ** self.exponent + self.offset,
            self.cap,
            self.label,
        )

    def __repr__(self) -> str:
        return (
            f"Backoff.polynomial(exponent={self.exponent:g}, offset={self.offset:g}, "
            f"cap={self.cap!r}, jitter={self.jitter:g})"
        )


def _retry_after_value(error: BaseException | None, attribute: str) -> object:
    """The raw Retry-After of ``error``: its attribute, else its response header."""
    if error is None:
        return None
    value = getattr(error, attribute, None)
    if value is not None:
        return value
    # requests.HTTPError / httpx.HTTPStatusError carry the response.
    headers = getattr(getattr(error, "response", None), "headers", None)
    if isinstance(headers, Mapping) or hasattr(headers, "get"):
        try:
            return headers.get("Retry-After")  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001 - a foreign object: treat as absent
            return None
    return None


def parse_retry_after(value: object, now: datetime) -> timedelta | None:
    """A Retry-After value as a wait, or None when it is not one (R-POL-54).

    Accepts a number of seconds, a ``timedelta``, or an HTTP ``Retry-After``
    header value: delta-seconds (``"120"``) or an HTTP-date
    (``"Wed, 21 Oct 2026 07:28:00 GMT"``, counted from ``now``; a past date is
    0). Negative, non-finite or unparsable values give None.
    """
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if isinstance(value, str):
        text = value.strip()
        if text.isascii() and text.isdigit():  # delta-seconds: ASCII digits only
            return _clamp(float(text))
        try:
            moment = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if moment.tzinfo is None:  # "-0000" dates: UTC per RFC 5322
            moment = moment.replace(tzinfo=now.tzinfo)
        return max(moment - now, timedelta(0))
    if isinstance(value, timedelta):
        return value if value >= timedelta(0) else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or value < 0:
            return None
        return _clamp(float(value))
    return None


class RetryAfterBackoff(BackoffStrategy):
    """The wait the error carries (Retry-After), else ``default`` (R-POL-54).

    Build it with :meth:`Backoff.retry_after`.
    """

    label = "Retry-After"

    def __init__(
        self, *, default: object, attribute: object, cap: object, jitter: object
    ) -> None:
        name = "Backoff.retry_after"
        if isinstance(default, BackoffStrategy):
            self.default: BackoffStrategy | timedelta = default
        else:
            self.default = duration_option(
                default,
                name="default",
                label=name,
                must="a non-negative timedelta or number of seconds, or a Backoff "
                "strategy",
            )
        if not isinstance(attribute, str) or not attribute.isidentifier():
            raise StepConfigurationError(
                f"{name}: invalid attribute {attribute!r}: must be an attribute name "
                f"such as 'retry_after'"
            )
        self.attribute = attribute
        self.cap, self.jitter = _limits(cap, jitter, name)

    def base_wait(self, attempt: int, error: BaseException | None) -> BackoffWait:
        """The error's Retry-After (limited to ``cap``), else the default."""
        found = parse_retry_after(
            _retry_after_value(error, self.attribute), clock.now()
        )
        if found is not None:
            return _capped(found.total_seconds, self.cap, self.label)
        if isinstance(self.default, BackoffStrategy):
            fallback = self.default.base_wait(attempt, error)
            return BackoffWait(fallback.wait, f"{fallback.label}, no Retry-After")
        return BackoffWait(self.default, "no Retry-After, default wait")

    def __repr__(self) -> str:
        return (
            f"Backoff.retry_after(default={self.default!r}, "
            f"attribute={self.attribute!r}, cap={self.cap!r})"
        )


def _callable_name(func: Callable[..., Any]) -> str:
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    return str(name) if name else repr(func)


class CallableBackoff(BackoffStrategy):
    """A user callable ``(attempt, error) -> timedelta`` (R-POL-55)."""

    def __init__(self, func: object, *, jitter: object = 0.0) -> None:
        if not callable(func) or isinstance(func, type):
            raise StepConfigurationError(
                f"invalid wait {func!r} ({type(func).__name__}): must be {WAIT_FORMS}"
            )
        try:
            signature = inspect.signature(func)
        except (TypeError, ValueError):
            signature = None  # builtins without a signature: trust them
        if signature is not None:
            try:
                signature.bind(1, Exception())
            except TypeError as exc:
                raise StepConfigurationError(
                    f"invalid wait callable {_callable_name(func)}{signature}: it must "
                    f"accept two positional arguments (attempt, error) and return a "
                    f"timedelta"
                ) from exc
        self.func: Callable[..., Any] = func
        self.jitter = _jitter_option(jitter, strategy=f"wait {_callable_name(func)}")
        self.label = f"backoff by {_callable_name(func)}"

    def base_wait(self, attempt: int, error: BaseException | None) -> BackoffWait:
        """Call the function; check that it returned a non-negative timedelta.

        Raises:
            BackoffError: The result is not a ``timedelta``, or is negative or
                longer than 100 years.
            Exception: Whatever the function raises.
        """
        value = self.func(attempt, error)
        name = _callable_name(self.func)
        if not isinstance(value, timedelta):
            raise BackoffError(
                f"wait callable {name} returned {value!r} ({type(value).__name__}) "
                f"for attempt {attempt}: it must return a non-negative timedelta"
            )
        if value < timedelta(0) or value > MAX_DURATION:
            raise BackoffError(
                f"wait callable {name} returned {value!r} for attempt {attempt}: it "
                f"must return a timedelta from 0 to 100 years"
            )
        return BackoffWait(value, self.label)

    def __repr__(self) -> str:
        return f"Backoff.custom({_callable_name(self.func)}, jitter={self.jitter:g})"


class Backoff:
    """Factories of backoff strategies for a reattempt policy's ``wait`` (R-POL-50).

    Example::

        on_exception(TimeoutError, action="reattempt", max_reattempts=10,
                     wait=Backoff.exponential(5, cap=timedelta(minutes=10)))

    .. versionadded:: 0.3
    """

    @staticmethod
    def exponential(
        base: timedelta | float,
        *,
        factor: float = 2,
        cap: timedelta | float | None = None,
        jitter: float = 0.1,
    ) -> ExponentialBackoff:
        """Wait ``base * factor ** (attempt - 1)``, at most ``cap`` (R-POL-53).

        Args:
            base: Wait of the first reattempt: a positive ``timedelta`` or seconds.
            factor: Growth per reattempt, a finite number >= 1 (default 2).
            cap: Largest wait before jitter (``timedelta`` or seconds), or None
                for none (the wait still stops at 100 years).
            jitter: Largest fraction added on top, 0..1 (default 0.1: up to 10 %).

        Raises:
            StepConfigurationError: A value outside these forms (named in the
                message with the allowed forms).
        """
        return ExponentialBackoff(base, factor=factor, cap=cap, jitter=jitter)

    @staticmethod
    def polynomial(
        *,
        exponent: float = 4,
        offset: timedelta | float = 2,
        cap: timedelta | float | None = None,
        jitter: float = 0.1,
    ) -> PolynomialBackoff:
        """Wait ``attempt ** exponent + offset`` seconds (R-POL-53).

        The defaults give ActiveJob's ``polynomially_longer``: 3 s, 18 s, 83 s,
        258 s, 627 s, ... for reattempts 1, 2, 3, 4, 5.

        Args:
            exponent: A positive number (default 4).
            offset: Added seconds or ``timedelta``, non-negative (default 2).
            cap: Largest wait before jitter, or None.
            jitter: Largest fraction added on top, 0..1 (default 0.1).

        Raises:
            StepConfigurationError: A value outside these forms.
        """
        return PolynomialBackoff(
            exponent=exponent, offset=offset, cap=cap, jitter=jitter
        )

    @staticmethod
    def retry_after(
        *,
        default: timedelta | float | BackoffStrategy,
        attribute: str = "retry_after",
        cap: timedelta | float | None = None,
        jitter: float = 0.0,
    ) -> RetryAfterBackoff:
        """Wait as long as the error says, else ``default`` (R-POL-54).

        The wait is read from the error's ``attribute`` (default
        ``retry_after``), else from ``error.response.headers["Retry-After"]``
        (``requests``/``httpx`` HTTP errors). It may be seconds, a
        ``timedelta``, or a header value: delta-seconds or an HTTP-date.

        Args:
            default: Wait when the error carries none (or an unreadable one): a
                non-negative ``timedelta``/seconds, or another strategy.
            attribute: The error attribute to read.
            cap: Largest wait accepted from the error, or None.
            jitter: Largest fraction added on top, 0..1 (default 0: the server
                said when).

        Raises:
            StepConfigurationError: A value outside these forms.
        """
        return RetryAfterBackoff(
            default=default, attribute=attribute, cap=cap, jitter=jitter
        )

    @staticmethod
    def custom(
        func: Callable[[int, BaseException], timedelta], *, jitter: float = 0.0
    ) -> CallableBackoff:
        """Wrap a callable ``(attempt, error) -> timedelta`` (R-POL-55).

        Passing the callable itself as ``wait`` is the same with no jitter.

        Raises:
            StepConfigurationError: ``func`` is not callable with two positional
                arguments, or ``jitter`` is not 0..1.
        """
        return CallableBackoff(func, jitter=jitter)


def coerce_wait(value: object) -> timedelta | BackoffStrategy | None:
    """Validate a reattempt policy's ``wait`` (R-POL-02, R-POL-50).

    Returns:
        None, a ``timedelta``, or a :class:`BackoffStrategy` (a bare callable is
        wrapped in :class:`CallableBackoff`).

    Raises:
        StepConfigurationError: Any other value; the message shows it and lists
            the allowed forms.
    """
    if value is None or isinstance(value, BackoffStrategy):
        return value
    if callable(value) and not isinstance(value, type):
        return CallableBackoff(value)
    try:
        return coerce_duration(value, name="wait")
    except (TypeError, ValueError) as exc:
        raise StepConfigurationError(
            f"invalid wait {value!r} ({type(value).__name__}): must be {WAIT_FORMS}"
        ) from exc

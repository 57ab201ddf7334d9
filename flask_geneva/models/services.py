"""The engine operations the model methods call, registered by the engine (STYLE §3.1).

The ORM mixins import nothing above the data layer. Their state-changing methods
(``create``, ``pause``, ``resume``, ``mark_completed``, ``execute``, ...) call an
operation of the engine by name: ``model_engine().pause(workflow, actor=..., ...)``.
:mod:`flask_geneva.ext.model_engine` registers the operations, each an engine
function (wrapped to bind the app's engine context) taking the model's arguments
as they are, when :mod:`flask_geneva` is imported, so every import of a model has
them. Tests may register stand-ins.

Each model method is defined once: its signature, docstring and defaults are the
model's; the engine function that implements it is the engine's own API (the
admin and the CLI call it too). Nothing between them restates the arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import NoReturn

__all__ = [
    "EngineOperations",
    "model_engine",
    "raise_from_engine",
    "register_model_engine",
]


class EngineOperations:
    """The registered engine operations, one attribute per operation name.

    ``operations.pause`` is the callable registered under ``"pause"``; the model
    method passes its own arguments to it unchanged.
    """

    def __init__(self, operations: Mapping[str, Callable[..., Any]]) -> None:
        self._operations = dict(operations)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        try:
            return self._operations[name]
        except KeyError:
            raise AttributeError(
                f"the registered flask_geneva engine has no operation {name!r} "
                "for the model methods"
            ) from None


_registered: EngineOperations | None = None


def register_model_engine(operations: Mapping[str, Callable[..., Any]]) -> None:
    """Install ``operations`` as the ones the model methods call; replaces any earlier.

    Args:
        operations: The engine's callables by operation name (the name a model
            method looks up on :func:`model_engine`).
    """
    global _registered
    _registered = EngineOperations(operations)


def model_engine() -> EngineOperations:
    """Return the registered engine operations.

    Returns:
        The :class:`EngineOperations` that :mod:`flask_geneva.ext.model_engine`
        registered.

    Raises:
        RuntimeError: None is registered, which happens only if ``flask_geneva``'s
            package ``__init__`` has not finished importing.
    """
    if _registered is None:
        raise RuntimeError(
            "no flask_geneva engine is registered for the model methods; "
            "import flask_geneva (it registers flask_geneva.ext.model_engine)"
        )
    return _registered


def raise_from_engine(name: str, *args: Any, **kwargs: Any) -> NoReturn:
    """Call the engine operation ``name``, which always raises (``finish`` ...).

    Args:
        name: An operation that ends the running step with a flow control
            signal, or refuses with ``InvalidStateError``.
        args, kwargs: Passed to the operation unchanged.

    Raises:
        Whatever the operation raises; ``AssertionError`` if it returned.
    """
    getattr(model_engine(), name)(*args, **kwargs)
    raise AssertionError(f"the engine operation {name!r} returned instead of raising")

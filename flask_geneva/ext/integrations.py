"""Optional integrations that ``Geneva.init_app`` mounts on request, found by name.

The extension sits below the integrations built on it (the admin, STYLE §3.1): it
never imports them. Each one is declared as a Python entry point in the group
:data:`GROUP` of the package metadata (``pyproject.toml``), the way Flask finds
``flask.commands`` plugins, and is loaded only when asked for, e.g.
``geneva.init_app(app, admin=True)`` loads ``admin`` (R-ADM-01). So an install
without an integration's extra never imports it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from flask_geneva.exceptions import GenevaConfigurationError

__all__ = ["GROUP", "load_integration"]

#: Entry-point group of the integrations, in ``pyproject.toml``.
GROUP = "flask_geneva.integrations"


@functools.cache
def load_integration(name: str) -> Callable[..., Any]:
    """Return the mount function registered as entry point ``name`` in :data:`GROUP`.

    ``admin`` is :func:`flask_geneva.admin.init_standalone_admin`, called as
    ``mount(app, geneva)``. Loading it imports the integration's module, which
    may raise its own error (the admin names its missing extra).

    Args:
        name: The integration's entry-point name, e.g. ``"admin"``.

    Returns:
        The loaded callable.

    Raises:
        GenevaConfigurationError: No entry point of that name is installed; the
            message lists the names that are.
    """
    found = entry_points(group=GROUP)
    for point in found:
        if point.name == name:
            loaded: Callable[..., Any] = point.load()
            return loaded
    known = ", ".join(sorted(repr(point.name) for point in found)) or "none"
    raise GenevaConfigurationError(
        f"no flask_geneva integration {name!r} is installed (entry point group "
        f"{GROUP!r}; installed: {known}). Reinstall flask-geneva "
        "(pip install -e . in a checkout) so that its package metadata is current"
    )

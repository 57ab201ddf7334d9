"""The installed flask_geneva's version, read from its distribution's metadata.

``pyproject.toml`` is the one place the version is written; the package root's
``__version__`` and the ``flask geneva install`` revision files read it here.
"""

from __future__ import annotations

from importlib import metadata

__all__ = ["DISTRIBUTION", "installed_version"]

#: The distribution name on the package index (imported as ``flask_geneva``).
DISTRIBUTION = "flask-geneva"


def installed_version() -> str:
    """Return the installed distribution's version, e.g. ``"0.1.0.dev0"``.

    Returns:
        The version from the installed metadata, or ``"0+unknown"`` when
        flask_geneva is imported from a folder that was never installed (a
        plain checkout on ``sys.path``).
    """
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"

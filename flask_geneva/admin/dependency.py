"""Fail with the extra to install when Flask-Admin is missing (``[admin]``).

Imported first by :mod:`flask_geneva.admin`, which the engine imports only when
an admin is mounted, so an install without the ``admin`` extra runs workflows and
never needs Flask-Admin.
"""

from __future__ import annotations

import importlib.util

from flask_geneva.exceptions import GenevaConfigurationError

__all__ = ["require_flask_admin"]


def require_flask_admin() -> None:
    """Check that Flask-Admin can be imported.

    Raises:
        GenevaConfigurationError: It is not installed; the message names the
            ``flask-geneva[admin]`` extra.
    """
    if importlib.util.find_spec("flask_admin") is None:
        raise GenevaConfigurationError(
            "the flask_geneva admin needs Flask-Admin, which is not installed: "
            "pip install 'flask-geneva[admin]'"
        )


require_flask_admin()

"""The GENEVA_ADMIN_* role settings, validated when the settings are read (R-ADM-210)."""

from __future__ import annotations

import pytest

from flask_geneva import GenevaConfigurationError
from flask_geneva.core.admin_settings import admin_config_from_mapping
from flask_geneva.core.config import DEFAULTS

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


def role_of_nobody() -> str | None:
    """A GENEVA_ADMIN_CURRENT_ROLE by import path."""
    return None


def _config(**settings):
    return admin_config_from_mapping({**DEFAULTS, **settings})


def test_role_settings_take_callables_and_import_paths():
    """CURRENT_ROLE takes a no-argument callable or an import path, AUTHORIZE one of
    (user, action, target); either switches the admin to per-action checks (R-ADM-210)."""
    assert _config().per_action is False
    config = _config(
        GENEVA_ADMIN_CURRENT_ROLE="tests.core.test_admin_settings:role_of_nobody"
    )
    assert config.current_role is role_of_nobody
    assert config.per_action is True

    def authorize(user, action, target=None):
        return True

    assert _config(GENEVA_ADMIN_AUTHORIZE=authorize).authorize is authorize


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"GENEVA_ADMIN_CURRENT_ROLE": "viewer"},
            "an import path such as .*got 'viewer'",
        ),
        ({"GENEVA_ADMIN_CURRENT_ROLE": 3}, "must be a callable, an import path"),
        (
            {"GENEVA_ADMIN_CURRENT_ROLE": lambda user: "viewer"},
            r"GENEVA_ADMIN_CURRENT_ROLE must be a callable taking \(\)",
        ),
        (
            {"GENEVA_ADMIN_AUTHORIZE": lambda user, action: True},
            r"GENEVA_ADMIN_AUTHORIZE must be a callable taking \(user, action, "
            r"target\), got .* with the signature \(user, action\)",
        ),
        (
            {
                "GENEVA_ADMIN_CURRENT_ROLE": lambda: "viewer",
                "GENEVA_ADMIN_AUTHORIZE": lambda user, action, target: True,
            },
            "are both set: set one",
        ),
        (
            {
                "GENEVA_ADMIN_CURRENT_ROLE": lambda: "viewer",
                "GENEVA_ADMIN_CAN_ACT": lambda: True,
            },
            "GENEVA_ADMIN_CAN_ACT cannot be combined with GENEVA_ADMIN_CURRENT_ROLE",
        ),
        (
            {
                "GENEVA_ADMIN_AUTHORIZE": lambda user, action, target: True,
                "GENEVA_ADMIN_CAN_ACT": lambda: True,
            },
            "GENEVA_ADMIN_CAN_ACT cannot be combined with GENEVA_ADMIN_AUTHORIZE",
        ),
    ],
)
def test_wrong_role_settings_are_refused_naming_them(settings, message):
    """A value that is no callable, a callable of the wrong arity, both settings, or
    either with GENEVA_ADMIN_CAN_ACT is a GenevaConfigurationError (R-ADM-210)."""
    with pytest.raises(GenevaConfigurationError, match=message):
        _config(**settings)


def test_init_app_refuses_a_wrong_role_setting(tmp_path):
    """init_app reports the role settings with the others (R-ADM-210, R-CFG-01)."""
    from tests.conftest import make_app

    with pytest.raises(GenevaConfigurationError, match="GENEVA_ADMIN_AUTHORIZE"):
        make_app(tmp_path, GENEVA_ADMIN_AUTHORIZE=lambda: True)

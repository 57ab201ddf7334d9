"""The ``GENEVA_ADMIN_*`` settings of the admin UI, validated (R-ADM-01..04, R-ADM-210).

:func:`admin_config_from_mapping` turns the merged settings into the frozen
:class:`AdminConfig` that :class:`~flask_geneva.core.config.GenevaConfig`
holds as ``admin``. Only the settings' shapes are checked here (a callable, an
import path, how many arguments it takes, which settings go together); what
the callables return is the admin's business, per request.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

from flask_geneva.core.setting_values import bool_value
from flask_geneva.core.setting_values import callable_or_none
from flask_geneva.exceptions import GenevaConfigurationError

__all__ = ["AdminConfig", "admin_config_from_mapping"]


@dataclasses.dataclass(frozen=True)
class AdminConfig:
    """Validated ``GENEVA_ADMIN_*`` settings of the admin UI (R-ADM-01..04, R-ADM-10).

    Attributes:
        enabled: Mount a dedicated Flask-Admin at ``url`` from ``init_app``.
        url: URL prefix of the dedicated admin, starting with ``/``.
        access: ``() -> bool`` deciding access per request, or None (denied outside
            debug/testing).
        can_act: ``() -> bool`` deciding whether buttons act, or None (= ``access``).
        actor: ``() -> str | None`` naming the operator, or None (default lookup).
        paused_ratio_warn: Paused ratio (0..1) above which the overview warns.
        refresh_seconds: Seconds between automatic page refreshes; 0 = off
            (R-ADM-49).
        current_role: ``() -> str | None`` naming the current user's role
            (``"viewer"``, ``"operator"``, ``"admin"``), or None (R-ADM-210).
        authorize: ``(user, action, target) -> bool`` deciding each action, or
            None (R-ADM-211).
    """

    enabled: bool
    url: str
    access: Callable[[], bool] | None
    can_act: Callable[[], bool] | None
    actor: Callable[[], str | None] | None
    paused_ratio_warn: float
    refresh_seconds: int = 10
    current_role: Callable[[], str | None] | None = None
    authorize: Callable[[Any, str, Any], bool] | None = None

    @property
    def per_action(self) -> bool:
        """Whether roles or an authorize callable decide each action (R-ADM-210)."""
        return self.current_role is not None or self.authorize is not None


def admin_config_from_mapping(merged: Mapping[str, Any]) -> AdminConfig:
    """Validate the ``GENEVA_ADMIN_*`` keys of ``merged`` (defaults applied).

    Raises:
        GenevaConfigurationError: A value is invalid; names the key, the value and
            what is allowed. ``GENEVA_ADMIN_CURRENT_ROLE`` and
            ``GENEVA_ADMIN_AUTHORIZE`` are refused together, and either of them
            with ``GENEVA_ADMIN_CAN_ACT`` (R-ADM-210); each must accept the
            arguments it is called with.
    """
    url = merged["GENEVA_ADMIN_URL"]
    if not isinstance(url, str) or not url.startswith("/") or url == "/":
        raise GenevaConfigurationError(
            "GENEVA_ADMIN_URL must be a str starting with '/' (not '/' itself), "
            f"got {url!r}"
        )
    ratio = merged["GENEVA_ADMIN_PAUSED_RATIO_WARN"]
    if (
        isinstance(ratio, bool)
        or not isinstance(ratio, int | float)
        or not 0 <= ratio <= 1
    ):
        raise GenevaConfigurationError(
            "GENEVA_ADMIN_PAUSED_RATIO_WARN must be a number from 0 to 1, "
            f"got {ratio!r}"
        )
    refresh = merged["GENEVA_ADMIN_REFRESH_SECONDS"]
    if isinstance(refresh, bool) or not isinstance(refresh, int) or refresh < 0:
        raise GenevaConfigurationError(
            "GENEVA_ADMIN_REFRESH_SECONDS must be a whole number of seconds >= 0 "
            f"(0 turns auto-refresh off), got {refresh!r}"
        )
    can_act = callable_or_none(merged, "GENEVA_ADMIN_CAN_ACT")
    current_role = _taking(merged, "GENEVA_ADMIN_CURRENT_ROLE", ())
    authorize = _taking(merged, "GENEVA_ADMIN_AUTHORIZE", ("user", "action", "target"))
    _refuse_together(current_role, authorize, can_act)
    return AdminConfig(
        enabled=bool_value(merged, "GENEVA_ADMIN_ENABLED"),
        url=url.rstrip("/"),
        access=callable_or_none(merged, "GENEVA_ADMIN_ACCESS"),
        can_act=can_act,
        actor=callable_or_none(merged, "GENEVA_ADMIN_ACTOR"),
        paused_ratio_warn=float(ratio),
        refresh_seconds=refresh,
        current_role=current_role,
        authorize=authorize,
    )


def _taking(merged: Mapping[str, Any], key: str, arguments: tuple[str, ...]) -> Any:
    """A callable setting (or None) that accepts ``arguments`` positionally.

    A callable whose signature Python cannot read (some builtins) is taken as
    it is.

    Raises:
        GenevaConfigurationError: Not a callable or import path, or its
            signature refuses that many positional arguments.
    """
    value = callable_or_none(merged, key)
    if value is None:
        return None
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return value
    try:
        signature.bind(*arguments)
    except TypeError:
        wanted = f"({', '.join(arguments)})" if arguments else "()"
        raise GenevaConfigurationError(
            f"{key} must be a callable taking {wanted}, got {value!r} with the "
            f"signature {signature}"
        ) from None
    return value


def _refuse_together(current_role: Any, authorize: Any, can_act: Any) -> None:
    """Refuse settings that would each decide who acts (R-ADM-210)."""
    if current_role is not None and authorize is not None:
        raise GenevaConfigurationError(
            "GENEVA_ADMIN_CURRENT_ROLE and GENEVA_ADMIN_AUTHORIZE are both set: "
            "set one. CURRENT_ROLE names the user's role and the built-in role "
            "map decides; AUTHORIZE decides each action itself (it may use "
            "flask_geneva.admin.roles.role_allows)"
        )
    if can_act is not None and (current_role is not None or authorize is not None):
        which = (
            "GENEVA_ADMIN_CURRENT_ROLE"
            if current_role is not None
            else "GENEVA_ADMIN_AUTHORIZE"
        )
        raise GenevaConfigurationError(
            f"GENEVA_ADMIN_CAN_ACT cannot be combined with {which}: with roles "
            "the role decides who acts; remove GENEVA_ADMIN_CAN_ACT"
        )

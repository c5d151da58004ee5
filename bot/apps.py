"""Feishu apps beside the default one: ``[apps.NAME]`` tables of larkgate.toml.

The default app comes from the environment (``FEISHU_APP_ID`` …) and keeps the routes
``/feishu/events`` and ``/feishu/card``. Each table here is one more bot identity in the
same deployment, with its own routes (``/feishu/NAME/events``, ``/feishu/NAME/card``) or
long connection, token manager, API budget, admins and default profile::

    [apps.hr]
    app_id = "cli_a1b2c3"
    app_secret_env = "HR_APP_SECRET"                  # secrets by variable name, never here
    verification_token_env = "HR_VERIFICATION_TOKEN"  # webhook mode
    encrypt_key_env = "HR_ENCRYPT_KEY"                # webhook mode (signed pushes)
    event_mode = "webhook"                            # or "ws"
    profile = "hr"                                    # chats without a [groups] route
    admins = ["ou_..."]                               # open_ids as this app sees them
    accept_bots = ["ou_..."]                          # bots it answers (open_ids)
    monthly_api_budget = 0

An open_id names a person (or a bot) as one app sees them: the same person has another
open_id in another app, so admins and accepted bots are given per app.

Neutral like ``bot.profiles``: it reads a parsed file and an environment, nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# A path segment of its routes; the default app has none.
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYS = frozenset(
    {
        "app_id",
        "app_secret_env",
        "verification_token_env",
        "encrypt_key_env",
        "event_mode",
        "profile",
        "admins",
        "accept_bots",
        "monthly_api_budget",
    }
)
# What someone might write instead of naming a variable: refused with what to write.
_SECRETS_IN_FILE = {
    "app_secret": "app_secret_env",
    "verification_token": "verification_token_env",
    "encrypt_key": "encrypt_key_env",
}


class AppError(ValueError):
    """An ``[apps.NAME]`` table that cannot be used; the message says where and why."""


@dataclass(frozen=True, slots=True)
class AppSpec:
    """One more Feishu app, its secrets read from the environment."""

    name: str
    app_id: str
    app_secret: str = field(repr=False)
    verification_token: str = field(default="", repr=False)
    encrypt_key: str = field(default="", repr=False)
    event_mode: Literal["webhook", "ws"] = "webhook"
    profile: str | None = None
    admins: tuple[str, ...] = ()
    accept_bots: tuple[str, ...] = ()
    monthly_api_budget: int = 0

    @property
    def events_path(self) -> str:
        return f"/feishu/{self.name}/events"

    @property
    def card_path(self) -> str:
        return f"/feishu/{self.name}/card"


def load_apps(
    data: Mapping[str, Any],
    environ: Mapping[str, str],
    *,
    where: str,
    profiles: frozenset[str] = frozenset(),
    default_app_id: str = "",
) -> tuple[AppSpec, ...]:
    """The ``[apps.*]`` tables of the parsed file ``data``, secrets from ``environ``;
    ``profiles`` are the names a table may route to."""
    section = data.get("apps", {})
    if not isinstance(section, Mapping):
        raise AppError(f"{where}: [apps] must hold tables, [apps.NAME]")
    apps = [_app(name, table, environ, where, profiles) for name, table in sorted(section.items())]
    seen = {default_app_id: "the default app (FEISHU_APP_ID)"} if default_app_id else {}
    for app in apps:
        if app.app_id in seen:
            raise AppError(
                f"{where}: [apps.{app.name}] app_id {app.app_id} is already {seen[app.app_id]}"
            )
        seen[app.app_id] = f"[apps.{app.name}]"
    return tuple(apps)


def _app(
    name: str,
    table: object,
    environ: Mapping[str, str],
    where: str,
    profiles: frozenset[str],
) -> AppSpec:
    at = f"{where}: [apps.{name}]"
    if not isinstance(table, Mapping):
        raise AppError(f"{at} must be a table")
    if not _NAME.fullmatch(name):
        raise AppError(
            f"{at}: an app's name is part of its routes (/feishu/NAME/events): lower-case "
            "letters, digits, '-' or '_', starting with a letter, at most 32"
        )
    for written, instead in _SECRETS_IN_FILE.items():
        if written in table:
            raise AppError(
                f"{at}: {written} does not belong in the file; put it in an environment "
                f"variable and name that variable with {instead}"
            )
    unknown = set(table) - _KEYS
    if unknown:
        raise AppError(f"{at}: unknown keys {', '.join(sorted(unknown))}")
    app_id = table.get("app_id")
    if not isinstance(app_id, str) or not app_id:
        raise AppError(f"{at}: app_id (the app's cli_… id) is required")
    mode = table.get("event_mode", "webhook")
    if mode not in ("webhook", "ws"):
        raise AppError(f"{at}: event_mode is webhook or ws, not {mode!r}")
    secret = _secret(table, "app_secret_env", environ, at, required=True)
    token = _secret(table, "verification_token_env", environ, at, required=mode == "webhook")
    key = _secret(table, "encrypt_key_env", environ, at, required=False)
    profile = table.get("profile")
    if profile is not None and (not isinstance(profile, str) or profile not in profiles):
        known = ", ".join(sorted(profiles)) or "none are declared"
        raise AppError(f"{at}: profile {profile!r} is no [profiles.*] table ({known})")
    budget = table.get("monthly_api_budget", 0)
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        raise AppError(f"{at}: monthly_api_budget is a whole number of calls, 0 for none")
    return AppSpec(
        name=name,
        app_id=app_id,
        app_secret=secret,
        verification_token=token,
        encrypt_key=key,
        event_mode=mode,
        profile=profile,
        admins=_open_ids(table, "admins", at),
        accept_bots=_open_ids(table, "accept_bots", at),
        monthly_api_budget=budget,
    )


def _secret(
    table: Mapping[str, Any], key: str, environ: Mapping[str, str], at: str, *, required: bool
) -> str:
    variable = table.get(key)
    if variable is None:
        if required:
            raise AppError(f"{at}: {key} (the environment variable holding it) is required")
        return ""
    if not isinstance(variable, str) or not _ENV_NAME.fullmatch(variable):
        raise AppError(f"{at}: {key} names an environment variable, not {variable!r}")
    value = environ.get(variable, "")
    if not value:
        raise AppError(f"{at}: {key} names {variable}, which is not set")
    return value


def _open_ids(table: Mapping[str, Any], key: str, at: str) -> tuple[str, ...]:
    values = table.get(key, [])
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise AppError(f"{at}: {key} is a list of open_ids")
    wrong = [v for v in values if not v.startswith("ou_")]
    if wrong:
        raise AppError(
            f"{at}: {key} takes open_ids (ou_…) as this app sees them, not {', '.join(wrong)}"
        )
    return tuple(values)

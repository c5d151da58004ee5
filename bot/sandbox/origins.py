"""What ``larkgate dev`` says at start: the settings that change what it does, and where
each came from (the environment, the .env file, or dev's own defaults).

A copied ``.env`` or a variable exported long ago quietly points the sandbox at another
model or database; the block names the source of each, so a surprise is seen at once.
Secret values are never printed, only whether they are set and where from; a password in
a URL is hidden.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr
from pydantic_settings import DotEnvSettingsSource, EnvSettingsSource

from bot.config import Settings

from .runner import DEV_DATABASE_URL, EMULATOR_SETTINGS

ENVIRONMENT = "from the environment"
DOTENV = "from .env"
GIVEN = "given by the caller"  # keyword arguments to Settings: tests, never the command line
DEV_DEFAULT = "dev's own default"
UNSET = "in neither the environment nor .env"


def origins(settings: Settings) -> dict[str, str]:
    """Each field the settings were given a value for → where that value came from, as
    pydantic-settings reads them: the environment wins over the .env file."""
    cls = type(settings)
    from_env = EnvSettingsSource(cls)()
    from_file = DotEnvSettingsSource(cls)()
    found: dict[str, str] = {}
    for name in settings.model_fields_set:
        if name in from_env:
            found[name] = ENVIRONMENT
        elif name in from_file:
            found[name] = DOTENV
        else:
            found[name] = GIVEN
    return found


def settings_report(settings: Settings) -> str:
    """The block ``larkgate dev`` prints at start, before anything runs."""
    where = origins(settings)
    env_file = Path(str(Settings.model_config.get("env_file") or ".env")).resolve()
    read = f"{env_file}" if env_file.is_file() else f"none at {env_file}"
    rows: list[tuple[str, str, str]] = []

    def row(name: str, shown: str, origin: str) -> None:
        rows.append((name.upper(), shown, origin))

    def plain(name: str, unset: str) -> None:
        value = getattr(settings, name)
        if name in where and value not in (None, ""):
            row(name, _without_password(str(value)), where[name])
        else:
            row(name, unset, where.get(name, UNSET))

    plain("llm_base_url", "not set (dev needs it)")
    plain("llm_model", "not set (dev needs it)")
    row("llm_api_key", _secret(settings.llm_api_key), where.get("llm_api_key", UNSET))
    if "database_url" in where:
        row("database_url", _without_password(settings.database_url), where["database_url"])
    else:
        row("database_url", DEV_DATABASE_URL, DEV_DEFAULT)
    plain("larkgate_config", "not set: no larkgate.toml rules")
    token_key = settings.larkgate_token_key
    if token_key.get_secret_value():
        row("larkgate_token_key", _secret(token_key), where["larkgate_token_key"])
    else:
        row("larkgate_token_key", "not set: a key of this session", DEV_DEFAULT)
    ignored = [
        f"{name.upper()} ({where[name].removeprefix('from ')})"
        for name in EMULATOR_SETTINGS
        if name in where
    ]
    feishu = "the emulator's app, keys and domain"
    if ignored:
        feishu += "; not used here: " + ", ".join(ignored)
    row("feishu_*", feishu, DEV_DEFAULT)

    width = max(len(name) for name, _, _ in rows)
    lines = [
        "larkgate dev settings (the environment wins over .env, .env over dev's own "
        f"defaults; .env: {read}):"
    ]
    lines += [f"  {name:<{width}}  {shown}  [{origin}]" for name, shown, origin in rows]
    return "\n".join(lines)


def _secret(value: SecretStr) -> str:
    return "set (not shown)" if value.get_secret_value() else "not set"


def _without_password(url: str) -> str:
    """``url`` with the password of its user part, if any, replaced by ``***``."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if not password:
        return url
    user, _, host = parts.netloc.rpartition("@")
    name = user.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{name}:***@{host}"))

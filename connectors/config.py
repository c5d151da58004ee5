"""Connector settings as the composition root hands them over (kept free of heavy imports)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, SecretBytes, SecretStr

# <NAME>_CONNECTOR_<SETTING>, e.g. SQL_CONNECTOR_URL or HTTP_CONNECTOR_ALLOWED_HOSTS.
ENV_OVERRIDE = re.compile(r"^([A-Z][A-Z0-9]*)_CONNECTOR_([A-Z0-9_]+)$")


@dataclass(frozen=True, slots=True)
class ConnectorsConfig:
    """Raw settings per connector name, merged from larkgate.toml and the environment.

    ``explicit`` is True when larkgate.toml has a ``[connectors]`` table, which then
    decides alone which connectors are on. Each connector validates its own section
    into its typed settings model.
    """

    sections: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    explicit: bool = False


def merge_environment(
    sections: Mapping[str, Mapping[str, Any]], environ: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """``sections`` with every ``<NAME>_CONNECTOR_<SETTING>`` variable applied on top."""
    merged = {name: dict(values) for name, values in sections.items()}
    for key, value in environ.items():
        match = ENV_OVERRIDE.match(key)
        if match:
            merged.setdefault(match.group(1).lower(), {})[match.group(2).lower()] = value
    return merged


# Where a section that does not validate keeps its secrets (the shape fallback below).
_SECRET_TABLES = frozenset({"env", "headers", "host_headers"})
_SECRET_NAME = re.compile(r"(?i)(secret|password|passwd|token|api[_-]?key|credential|url|dsn)")


def connector_secrets(config: ConnectorsConfig) -> set[str]:
    """Every secret value in the connectors' settings, found without starting a connector.

    For the log masker, before anything runs. Each section (enabled or not) is validated
    with its connector's settings model, which imports the connector's module and does
    nothing else, and every ``SecretStr`` in it is collected: MCP servers' ``env`` and
    ``headers``, the HTTP connector's ``headers`` and ``host_headers``, the SQL URL (the
    masker also masks its password alone). A section that does not validate, or whose
    connector cannot be loaded, is searched by shape instead.
    """
    from .hub import load_connector_class  # the hub imports this module; loaded when used

    found: set[str] = set()
    for name, section in config.sections.items():
        raw = {key: value for key, value in section.items() if key != "enabled"}
        try:
            settings = load_connector_class(name).Settings.model_validate(raw)
        except Exception:  # it will not start either; its values may still be logged
            found |= set(_secret_looking_values(raw))
        else:
            found |= set(secret_values(settings))
    return {value for value in found if value}


def secret_values(value: object) -> Iterator[str]:
    """The values of every ``SecretStr`` (and ``SecretBytes``) inside a settings model."""
    if isinstance(value, SecretStr):
        yield value.get_secret_value()
    elif isinstance(value, SecretBytes):
        yield value.get_secret_value().decode("utf-8", errors="replace")
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from secret_values(getattr(value, name))
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from secret_values(item)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from secret_values(item)


def _secret_looking_values(value: object, secret: bool = False) -> Iterator[str]:
    """Strings under secret-named keys or in env/headers tables (JSON text looked into)."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("{", "["):
            try:
                yield from _secret_looking_values(json.loads(text), secret)
                return
            except ValueError:
                pass
        if secret:
            yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            inside = secret or str(key).lower() in _SECRET_TABLES
            yield from _secret_looking_values(item, inside or bool(_SECRET_NAME.search(str(key))))
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _secret_looking_values(item, secret)

"""Connector settings as the composition root hands them over (kept free of heavy imports)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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

"""The connector hub: the enabled connectors, started, and their actions as one registry.

Which connectors are on: with a ``[connectors]`` table in ``larkgate.toml`` exactly the
ones listed there (``enabled = false`` turns one off); without it, every connector
whose settings are present (utilities always; SQL with ``SQL_CONNECTOR_URL``; HTTP
with ``HTTP_CONNECTOR_ALLOWED_HOSTS``; the Feishu workspace tools with the app's
credentials; MCP when servers are configured). A connector that fails to configure
or start is reported and left out; the others carry on. Third-party connectors
register under the ``larkgate.connectors`` entry-point group.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

from pydantic import ValidationError

from bot.engine import Tool, ToolRegistry

from .base import Connector, ConnectorContext, ConnectorStatus
from .config import ConnectorsConfig

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "larkgate.connectors"
BUILTIN: Mapping[str, str] = {
    "utilities": "connectors.utilities:Utilities",
    "sql": "connectors.sql:SQL",
    "http": "connectors.http:HTTP",
    "feishu": "connectors.feishu:FeishuWorkspace",
    "mcp": "connectors.mcp:MCP",
}
# Without a [connectors] table, a connector is on when this setting is present.
ENABLED_BY: Mapping[str, str] = {"sql": "url", "http": "allowed_hosts", "mcp": "servers"}


def load_connector_class(name: str) -> type[Connector]:
    """The class behind a connector name: built in, or from an installed plugin.

    Imported only when enabled, so an unused connector's dependencies are never loaded.
    """
    target = BUILTIN.get(name)
    if target is not None:
        module, _, attribute = target.partition(":")
        loaded = getattr(importlib.import_module(module), attribute)
    else:
        points = [p for p in entry_points(group=ENTRY_POINT_GROUP) if p.name == name]
        if not points:
            raise LookupError(f"no connector named {name!r} is installed")
        loaded = points[0].load()
    if not (isinstance(loaded, type) and issubclass(loaded, Connector)):
        raise TypeError(f"connector {name!r} is not a Connector subclass")
    return loaded


def enabled(config: ConnectorsConfig, *, feishu_credentials: bool) -> dict[str, dict[str, Any]]:
    """The connectors to build, with their raw settings (``enabled`` removed)."""
    chosen: dict[str, dict[str, Any]] = {}
    if config.explicit:
        for name, section in config.sections.items():
            settings = dict(section)
            if settings.pop("enabled", True) is not False:
                chosen[name] = settings
        return chosen
    chosen["utilities"] = dict(config.sections.get("utilities", {}))
    if feishu_credentials:
        chosen["feishu"] = dict(config.sections.get("feishu", {}))
    for name, key in ENABLED_BY.items():
        section = config.sections.get(name, {})
        if section.get(key):
            chosen[name] = dict(section)
    return chosen


class ConnectorHub:
    """The running connectors and the tool registry they make."""

    def __init__(self, connectors: list[Connector], failures: Mapping[str, str]) -> None:
        self.connectors = connectors
        self.failures = dict(failures)
        self._owner: dict[str, str] = {}
        self._acts_as_user: set[str] = set()
        tools: list[Tool] = []
        for connector in connectors:
            actions = connector.actions()
            for tool in connector.tools():
                if tool.name in self._owner:
                    logger.error(
                        "tool %s of %s clashes with %s's; left out",
                        tool.name,
                        connector.name,
                        self._owner[tool.name],
                    )
                    continue
                self._owner[tool.name] = connector.name
                spec = actions.get(tool.name)
                if spec is not None and spec.acts_as == "user":
                    self._acts_as_user.add(tool.name)
                tools.append(tool)
        self.registry = ToolRegistry(tools)

    @classmethod
    async def build(
        cls,
        config: ConnectorsConfig,
        context: ConnectorContext,
        *,
        feishu_credentials: bool,
        classes: Mapping[str, type[Connector]] | None = None,
    ) -> ConnectorHub:
        connectors: list[Connector] = []
        failures: dict[str, str] = {}
        for name, raw in enabled(config, feishu_credentials=feishu_credentials).items():
            try:
                connector_class = (
                    classes[name] if classes is not None else load_connector_class(name)
                )
            except Exception as exc:  # a missing or broken plugin is reported, not fatal
                failures[name] = f"cannot load: {type(exc).__name__}: {exc}"[:300]
                continue
            try:
                settings = connector_class.Settings.model_validate(raw)
                connector = connector_class(settings, context)
                await connector.start()
            except ValidationError as exc:
                failures[name] = "invalid settings: " + _validation_summary(exc)
                continue
            except Exception as exc:  # one connector failing must not stop the others
                logger.exception("connector %s failed to start", name)
                # Long enough for a refusal that says how to fix it (e.g. the SQL role's setup).
                failures[name] = f"failed to start: {type(exc).__name__}: {exc}"[:2_000]
                continue
            connectors.append(connector)
        for name, reason in failures.items():
            logger.error("connector %s is off: %s", name, reason)
        hub = cls(connectors, failures)
        logger.info(
            "connectors: %s (%d tools)",
            ", ".join(c.name for c in connectors) or "none",
            len(hub.registry),
        )
        return hub

    def connector_of(self, tool_name: str) -> str | None:
        return self._owner.get(tool_name)

    def acts_as_user(self, tool_name: str) -> bool:
        """Whether the tool calls Feishu as the asking person (their user token)."""
        return tool_name in self._acts_as_user

    def tools(self, side_effect: str | None = None) -> ToolRegistry:
        if side_effect is None:
            return self.registry
        return self.registry.by_side_effect(side_effect)  # type: ignore[arg-type]  # read or write

    async def check(self) -> list[ConnectorStatus]:
        statuses = []
        for connector in self.connectors:
            try:
                statuses.append(await connector.check())
            except Exception as exc:  # a check must report, not raise
                statuses.append(ConnectorStatus(connector.name, False, f"check failed: {exc}"))
        statuses += [ConnectorStatus(name, False, reason) for name, reason in self.failures.items()]
        return statuses

    async def aclose(self) -> None:
        for connector in self.connectors:
            try:
                await connector.aclose()
            except Exception:
                logger.exception("closing connector %s failed", connector.name)


def _validation_summary(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}"
        for err in exc.errors()[:5]
    )

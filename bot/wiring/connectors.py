"""The connector hub, built from its settings (or the classes a test gives), and the user-token
scopes its tools need."""

from __future__ import annotations

from bot.config import Settings
from bot.feishu.client import FeishuClient
from connectors.base import Connector, ConnectorContext, UserTokenSource
from connectors.hub import ConnectorHub, load_connector_class

from .parts import Overrides


async def build_connectors(
    settings: Settings,
    overrides: Overrides,
    feishu: FeishuClient,
    user_tokens: UserTokenSource | None = None,
) -> ConnectorHub:
    config = overrides.connectors or settings.connectors()
    return await ConnectorHub.build(
        config,
        ConnectorContext(feishu=feishu, user_tokens=user_tokens, network=settings.network()),
        feishu_credentials=bool(settings.feishu_app_id and settings.feishu_app_secret),
        classes=_Classes(overrides.connector_classes) if overrides.connector_classes else None,
    )


class _Classes(dict[str, type[Connector]]):
    """Connector classes given by name; any other name is loaded as usual."""

    def __missing__(self, name: str) -> type[Connector]:
        return load_connector_class(name)


def scopes_by_tool(hub: ConnectorHub) -> dict[str, tuple[str, ...]]:
    """The user-token scopes of every tool that acts as the asker, by tool name."""
    scopes: dict[str, tuple[str, ...]] = {}
    for connector in hub.connectors:
        for name, spec in connector.actions().items():
            if spec.acts_as == "user" and hub.connector_of(name) == connector.name:
                scopes[name] = spec.scopes
    return scopes

"""Building the running bot from its settings, in the order things depend on each other.

``bot.app`` runs :func:`build_services` in the application's lifecycle. Each feature builds
itself in a module of its own from the settings and what earlier phases built (the
foundation: ``foundation``, ``models``, ``feishu_side``; then ``tools``, ``connectors``,
``schedules``, ``turns``, ``messages``); this module only puts them in order, once for the
default app and once for each ``[apps.NAME]``.
"""

from __future__ import annotations

from bot.config import Settings
from bot.metrics import Metrics
from bot.runtime.tasks import TaskTracker
from connectors.hub import ConnectorHub

from .feishu_side import feishu_side_of
from .foundation import foundation
from .messages import message_path
from .parts import Built, Foundation, Overrides, Services
from .tools import governed_tools


async def build_services(settings: Settings, overrides: Overrides, metrics: Metrics) -> Built:
    base = await foundation(settings, overrides, metrics)
    services, hub = await _app_services(settings, overrides, base)
    apps: dict[str, tuple[Services, ConnectorHub]] = {}
    for spec in settings.apps():
        # Another bot identity: its own Feishu client, budget and stacks from intake to
        # governance, as if a replica of its own (its owner id says which app it is).
        app_settings = settings.for_app(spec)
        app_base = await feishu_side_of(app_settings, base, app=spec.name)
        apps[spec.name] = await _app_services(app_settings, overrides, app_base)
    return Built(
        services=services,
        hub=hub,
        models=base.models,
        apps=apps,
    )


async def _app_services(
    settings: Settings, overrides: Overrides, base: Foundation
) -> tuple[Services, ConnectorHub]:
    tasks = TaskTracker()
    tools = await governed_tools(settings, overrides, base, tasks)
    return message_path(settings, base, tools, tasks), tools.hub


__all__ = ["Built", "Overrides", "Services", "build_services"]

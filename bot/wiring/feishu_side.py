"""One app's Feishu side: its client (with its own token manager), its monthly API budget and
the bot identity it learns at start."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

from bot.config import Settings
from bot.feishu.client import FeishuClient
from bot.metrics import Metrics
from bot.runtime import texts
from bot.runtime.api_budget import ApiUsage, Delivery
from bot.runtime.intake.identity import BotIdentity
from bot.store import (
    Database,
)
from bot.store.api_calls import ApiCallLedger
from bot.timezones import time_zone

from .parts import Foundation


async def feishu_parts(
    settings: Settings, database: Database, clock: Callable[[], float], metrics: Metrics
) -> tuple[FeishuClient, ApiUsage, BotIdentity]:
    """One app's Feishu side: its client (its own token manager), its API budget and the
    bot identity it learns at start."""
    admins = sorted(settings.governance().admins)

    async def tell_admins(delivery: Delivery, used: int, budget: int) -> None:
        content = json.dumps(
            {"text": texts.api_budget_notice(delivery.name, used, budget)}, ensure_ascii=False
        )
        for admin in admins:
            await feishu.send_message("open_id", admin, msg_type="text", content=content)

    api_usage = ApiUsage(
        ApiCallLedger(database, clock=clock),
        app_id=settings.feishu_app_id,
        budget=settings.feishu_monthly_api_budget,
        zone=time_zone(settings.larkgate_timezone),
        clock=clock,
        notify=tell_admins,
    )
    if not settings.app_name:  # the gauges are the default app's
        metrics.track_api_usage(lambda: api_usage.total, lambda: api_usage.delivery().level)

    def on_call(endpoint: str, code: str) -> None:
        metrics.feishu_call(endpoint, code)
        api_usage.record(endpoint, code)

    feishu = FeishuClient(settings.feishu(), on_call=on_call, network=settings.network())
    await api_usage.refresh()  # the month's total so far, before the first answer
    identity = BotIdentity(feishu)
    identity.start()
    return feishu, api_usage, identity


async def feishu_side_of(settings: Settings, base: Foundation, *, app: str) -> Foundation:
    """``base`` as the [apps.NAME] ``app`` stands on it: its own Feishu side, the rest
    shared."""
    feishu, api_usage, identity = await feishu_parts(
        settings, base.database, base.clock, base.metrics
    )
    return replace(
        base,
        feishu=feishu,
        api_usage=api_usage,
        identity=identity,
        owner=f"{base.owner}/{app}",
        app=app,
    )

"""What every app stands on: the database, migrated, and the models; then the default app's
Feishu side."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid

from bot.config import Settings
from bot.media.reader_pool import ReaderPool
from bot.metrics import Metrics
from bot.store import (
    Database,
    RunStore,
)
from bot.store.migrate import upgrade

from .feishu_side import feishu_parts
from .models import build_models
from .parts import Foundation, Overrides

logger = logging.getLogger(__name__)


async def foundation(settings: Settings, overrides: Overrides, metrics: Metrics) -> Foundation:
    clock = overrides.clock
    await asyncio.to_thread(upgrade, settings.database_url)
    database = await (overrides.open_database or Database.connect)(settings.database_url)
    feishu, api_usage, identity = await feishu_parts(settings, database, clock, metrics)
    models = build_models(settings, metrics, overrides.llm)
    interrupted = await RunStore(database, clock=clock).mark_interrupted_running()
    if interrupted:
        logger.info("%d runs left by a stopped process are marked interrupted", interrupted)
    await models.start()
    return Foundation(
        database=database,
        feishu=feishu,
        api_usage=api_usage,
        identity=identity,
        models=models,
        owner=overrides.owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}",
        clock=clock,
        metrics=metrics,
        readers=ReaderPool(overrides.reader_limits),
    )

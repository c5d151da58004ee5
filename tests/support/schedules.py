"""A scheduled task put straight into the store, for tests that need one to exist."""

from __future__ import annotations

import time
from typing import Any

from bot.store.schedules import ScheduledTask, ScheduleStore


async def daily_task(
    store: ScheduleStore,
    *,
    creator: str,
    chat_id: str,
    prompt: str,
    chat_type: str = "group",
    next_run_at: float | None = None,
    **fields: Any,
) -> ScheduledTask:
    """A task of ``creator`` in ``chat_id`` that runs ``prompt`` every day at 9:00 UTC,
    next in an hour unless ``next_run_at`` says when."""
    values: dict[str, Any] = {
        "name": prompt,
        "prompt": prompt,
        "creator": creator,
        "chat_id": chat_id,
        "chat_type": chat_type,
        "thread_id": "",
        "reply_to": "",
        "kind": "cron",
        "expression": "0 9 * * *",
        "timezone": "UTC",
        "next_run_at": time.time() + 3600 if next_run_at is None else next_run_at,
        "created_in_run": "",
        "max_per_creator": 20,
    }
    values.update(fields)
    return await store.create(**values)

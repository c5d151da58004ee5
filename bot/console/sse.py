"""Run events as Server-Sent Events.

Each event is written as ``event: <type>\\nid: <n>\\ndata: <json>\\n\\n`` with the run's own
sequential id. A client gets the replay of what the hub kept, then live events, and the
stream closes after ``done``. ``Last-Event-ID`` (header, as a reconnecting client sends it)
resumes after that id without repeating anything. A comment line (``: heartbeat``) goes out
every ``HEARTBEAT_SECONDS`` of silence so proxies keep the connection open.

A finished run the hub no longer holds (old, or run by another process) is served from the
``runs`` table as its single ``done`` event (id 1).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from aiohttp import web

from bot.runtime.turn.run_events import PublishedEvent, RunChannel
from bot.store.runs import RunRecord

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 15.0


def last_event_id(request: web.Request) -> int:
    raw = request.headers.get("Last-Event-ID", "").strip()
    try:
        return max(0, int(raw)) if raw else 0
    except ValueError:
        return 0


def encode(event: PublishedEvent) -> bytes:
    data = json.dumps(event.data, ensure_ascii=False, default=str, separators=(",", ":"))
    return f"event: {event.type}\nid: {event.id}\ndata: {data}\n\n".encode()


async def _open(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",  # nginx: do not buffer the stream
        }
    )
    await response.prepare(request)
    return response


async def stream(
    request: web.Request, channel: RunChannel, after: int, *, heartbeat: float
) -> web.StreamResponse:
    response = await _open(request)
    subscription = channel.subscribe(after)
    try:
        while True:
            event = await subscription.next(heartbeat)
            if event is not None:
                await response.write(encode(event))
                if event.type == "done":
                    break
            elif subscription.ended:
                break  # done was sent before ``after``, or this client fell too far behind
            else:
                await response.write(b": heartbeat\n\n")
        await response.write_eof()
        return response
    except ConnectionResetError:  # the client went away
        logger.debug("console client of run %s left", channel.run_id)
        return response
    finally:
        subscription.close()


async def single_done(request: web.Request, data: dict[str, Any], after: int) -> web.StreamResponse:
    response = await _open(request)
    if after < 1:
        await response.write(encode(PublishedEvent(1, "done", data)))
    await response.write_eof()
    return response


def done_from_record(record: RunRecord) -> dict[str, Any]:
    elapsed = None
    if record.finished_at is not None:
        elapsed = round(max(0.0, record.finished_at - record.started_at), 3)
    return {
        "type": "done",
        "run_id": record.id,
        "status": record.status,
        "iterations": record.iterations,
        "usage": {
            "prompt_tokens": record.prompt_tokens,
            "completion_tokens": record.completion_tokens,
            "total_tokens": record.total_tokens,
        },
        "elapsed": elapsed,
        "tool_calls": record.tool_calls,
        "model": record.model or None,
        "error": record.error,
    }

"""The real larkgate server with a no-op agent, for ``bench/webhook.py``.

Settings come from the environment exactly as for ``larkgate serve``; only the LLM is
replaced by one that answers at once, so what is measured is the webhook, the ledger,
the conversation machinery and the replies, not a model.

    python -m bench.webhook_server --port 8080 [--database-url URL] [--owner NAME]

``--database-url`` overrides ``DATABASE_URL``; ``--owner`` names this process in the
message ledger (default: host:pid:random, as ``larkgate serve`` does). Several of these
processes may share one PostgreSQL database, as replicas behind a load balancer do.

``BENCH_DB_OPTIONS`` (JSON, for experiments) adds engine options to the app's
``Database``, e.g. ``{"pool_size": 20, "pool_pre_ping": false}`` on PostgreSQL.

``BENCH_TRANSACTIONS`` (a path): count the app's transactions by the store operation that
ran them, and write the counts there as JSON at shutdown (both backends; PostgreSQL's own
statistics also count what SQLAlchemy runs outside them, such as pool pings).

It serves as ``larkgate serve`` does (``bot.serving``, aiohttp's server).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from bot.app import create_app
from bot.cli import freeze_after_startup, serving_event_loop
from bot.config import load_settings
from bot.engine import LLMResponse, StreamDelta, Usage
from bot.serving import serve
from bot.store import Database
from connectors.config import ConnectorsConfig

ANSWER = "ok"


class InstantLLM:
    """Answers every call at once: the no-op agent of the benchmark."""

    model = "instant"
    abilities: Mapping[str, bool] = {"tool_call": True, "json_mode": True, "streaming": True}

    async def chat(self, messages: Sequence[Any], **kwargs: Any) -> LLMResponse:
        return LLMResponse(content=ANSWER, usage=Usage(1, 1, 2))

    async def stream_chat(self, messages: Sequence[Any], **kwargs: Any) -> AsyncIterator[Any]:
        yield StreamDelta(content=ANSWER)
        yield StreamDelta(usage=Usage(1, 1, 2), finish_reason="stop")


def bench_database(
    options: dict[str, Any], counts: dict[Any, int] | None
) -> Callable[[str], Awaitable[Database]]:
    """How the app opens its database here (``create_app(open_database=...)``): with
    ``options`` (the migrations keep theirs), and each ``transact`` counted in ``counts``
    by the operation (``fn``) it runs, when given."""

    class BenchDatabase(Database):
        def __init__(self, *args: Any, **given: Any) -> None:
            super().__init__(*args, **{**options, **given})

        # Not a coroutine of its own, and keyed by the function (named at shutdown): the
        # counting is charged to the server's CPU, so it must cost next to nothing.
        def transact(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            if counts is not None:
                counts[fn] = counts.get(fn, 0) + 1
            return super().transact(fn, *args, **kwargs)

    return BenchDatabase.connect


def _write_counts(app: web.Application, counts: dict[Any, int], path: str) -> None:
    async def stop(_: web.Application) -> None:
        named: Counter[str] = Counter()
        for fn, count in counts.items():
            named[getattr(fn, "__qualname__", repr(fn))] += count
        _write_json(Path(path), named)  # at shutdown: nothing else waits for the loop

    app.on_shutdown.append(stop)


def _write_json(path: Path, value: object) -> None:
    path.write_text(json.dumps(value))


def _profile_serving(app: web.Application, path: str) -> None:
    """Profile the serving phase only (not the imports and start-up), in the event loop
    thread's CPU time: wall time on a shared machine charges a function for the moments
    the process was not even running (a syscall preempted looks 100x slower)."""
    profiler = cProfile.Profile(time.thread_time)

    async def start(_: web.Application) -> None:
        profiler.enable()

    async def stop(_: web.Application) -> None:
        profiler.disable()
        profiler.dump_stats(path)

    app.on_startup.append(start)
    app.on_shutdown.append(stop)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--database-url", help="instead of DATABASE_URL")
    parser.add_argument("--owner", help="this process's name in the message ledger")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    options = json.loads(os.environ.get("BENCH_DB_OPTIONS") or "{}")
    count_to = os.environ.get("BENCH_TRANSACTIONS")
    counts: dict[Any, int] | None = {} if count_to else None
    settings = load_settings(**({"database_url": args.database_url} if args.database_url else {}))
    # The no-op agent: an instant model and no connectors (no tools, no tool selection).
    app = create_app(
        settings,
        llm=InstantLLM(),
        connectors=ConnectorsConfig(explicit=True),
        owner=args.owner,
        open_database=bench_database(options, counts),
    )
    if count_to and counts is not None:
        _write_counts(app, counts, count_to)
    profile_to = os.environ.get("BENCH_CPROFILE")
    if profile_to:
        _profile_serving(app, profile_to)
    if not os.environ.get("BENCH_NO_GC_FREEZE"):  # set: compare with a collector that walks all
        freeze_after_startup(app)  # as larkgate serve does
    # The loop larkgate serve would run on (LARKGATE_EVENT_LOOP=asyncio compares).
    loop = serving_event_loop(settings.larkgate_event_loop)
    serve(app, host="127.0.0.1", port=args.port, shutdown_timeout=65.0, loop=loop)


if __name__ == "__main__":
    main()

"""The real larkgate server with a no-op agent, for ``bench/webhook.py``.

Settings come from the environment exactly as for ``larkgate serve``; only the LLM is
replaced by one that answers at once, so what is measured is the webhook, the ledger,
the conversation machinery and the replies, not a model.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from aiohttp import web

from bot.app import create_app
from bot.config import load_settings
from bot.engine import LLMResponse, StreamDelta, Usage
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


def _profile_serving(app: web.Application, path: str) -> None:
    """Profile the serving phase only (not the imports and start-up)."""
    profiler = cProfile.Profile()

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
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    settings = load_settings()
    # The no-op agent: an instant model and no connectors (no tools, no tool selection).
    app = create_app(settings, llm=InstantLLM(), connectors=ConnectorsConfig(explicit=True))
    profile_to = os.environ.get("BENCH_CPROFILE")
    if profile_to:
        _profile_serving(app, profile_to)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()

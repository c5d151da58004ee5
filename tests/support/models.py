"""Fake models (handlers of ``FakeOpenAIServer``) shared by the end-to-end tests."""

from __future__ import annotations

import asyncio
from typing import Any

from e2e.harness import answering
from fakes.openai_server import Reply
from support.model_calls import is_synthesis


class HoldFirstLoopCall:
    """A slow model: holds its first tool-loop call until ``release`` is set (``entered`` is
    set once it holds it), and answers every call as ``e2e.harness.answering`` does."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.calls = 0  # tool-loop calls (not synthesis)

    async def __call__(self, body: dict[str, Any]) -> Reply:
        if not is_synthesis(body):
            self.calls += 1
            if self.calls == 1:
                self.entered.set()
                await self.release.wait()
        return answering(body)

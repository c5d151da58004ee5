"""Shared pytest fixtures. Add new fixtures next to the existing ones, one per concern."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from e2e.harness import BOT_OPEN_ID
from fakes.feishu_server import FakeFeishu
from fakes.openai_server import FakeOpenAIServer
from support.deploy import Deployer


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAIServer]:
    """A started, empty-scripted fake OpenAI-compatible server (see tests/fakes)."""
    async with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
async def feishu() -> AsyncIterator[FakeFeishu]:
    """A started fake Feishu whose bot is ``e2e.harness.BOT_OPEN_ID`` (see tests/fakes)."""
    async with FakeFeishu(bot_open_id=BOT_OPEN_ID) as fake:
        yield fake


@pytest.fixture
def deployer() -> Deployer:
    """The write tool of the approval tests; ``deployer.runs`` lists what really ran."""
    return Deployer()

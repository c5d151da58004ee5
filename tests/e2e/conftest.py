"""Fixtures for end-to-end tests: the fakes, and a running bot wired to them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from e2e.harness import BOT_OPEN_ID, Bot, answering, running_bot, settings_for
from fakes.feishu_server import FakeFeishu
from fakes.openai_server import FakeOpenAIServer


@pytest.fixture
async def feishu() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu(bot_open_id=BOT_OPEN_ID) as fake:
        yield fake


@pytest.fixture
async def llm_server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as server:
        server.handler = answering
        yield server


@pytest.fixture
async def bot(tmp_path, feishu, llm_server) -> AsyncIterator[Bot]:
    async with running_bot(settings_for(tmp_path, feishu, llm_server), feishu, llm_server) as b:
        yield b

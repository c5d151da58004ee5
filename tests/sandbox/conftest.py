"""The sandbox of ``larkgate dev`` on the fake model, and its chat page's API as the browser
calls it (``support.sandbox.Page``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from bot.sandbox.runner import Sandbox

from fakes.openai_server import FakeOpenAIServer
from support.sandbox import Page, model, running_sandbox


@pytest.fixture
def llm_server(fake_openai: FakeOpenAIServer) -> FakeOpenAIServer:
    fake_openai.handler = model
    return fake_openai


@pytest.fixture
async def sandbox(tmp_path, llm_server, deployer) -> AsyncIterator[Sandbox]:
    async with running_sandbox(tmp_path, llm_server, deployer) as running:
        yield running


@pytest.fixture
async def page(sandbox) -> AsyncIterator[Page]:
    async with aiohttp.ClientSession() as session:
        yield Page(sandbox.page_url, session)

"""Shared pytest fixtures. Add new fixtures next to the existing ones, one per concern."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest

# Imported where a fixture is used, not here: this file is read before anything is
# printed, and by xdist's controller too, which runs no test (e2e.harness alone imports
# the whole bot, seconds on a busy machine).
if TYPE_CHECKING:
    from fakes.feishu_server import FakeFeishu
    from fakes.openai_server import FakeOpenAIServer
    from support.deploy import Deployer


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAIServer]:
    """A started, empty-scripted fake OpenAI-compatible server (see tests/fakes)."""
    from fakes.openai_server import FakeOpenAIServer

    async with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
async def feishu() -> AsyncIterator[FakeFeishu]:
    """A started fake Feishu whose bot is ``e2e.harness.BOT_OPEN_ID`` (see tests/fakes)."""
    from e2e.harness import BOT_OPEN_ID
    from fakes.feishu_server import FakeFeishu

    async with FakeFeishu(bot_open_id=BOT_OPEN_ID) as fake:
        yield fake


@pytest.fixture
def deployer() -> Deployer:
    """The write tool of the approval tests; ``deployer.runs`` lists what really ran."""
    from support.deploy import Deployer

    return Deployer()


if os.environ.get("LARKGATE_TEST_EVENT_LOOP") == "uvloop":
    # The tests on uvloop's loop, the one ``larkgate serve`` runs on by default (CI runs
    # the end-to-end tests on both loops).
    import uvloop

    def pytest_asyncio_loop_factories(config: Any, item: Any) -> dict[str, Any]:
        return {"uvloop": uvloop.new_event_loop}

"""Shared pytest fixtures. Add new fixtures next to the existing ones, one per concern."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from fakes.openai_server import FakeOpenAIServer


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAIServer]:
    """A started, empty-scripted fake OpenAI-compatible server (see tests/fakes)."""
    async with FakeOpenAIServer() as server:
        yield server

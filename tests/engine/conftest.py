"""Fixtures for engine tests."""

from __future__ import annotations

import pytest

from bot.engine import Tool

from engine.support import make_tool


@pytest.fixture
def echo() -> Tool:
    return make_tool("echo")

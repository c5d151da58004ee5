"""The one-scan registration's clock, for tests of ``larkgate setup`` and dev's setup panel.

lark-oapi's registration flow waits with its module's ``asyncio.sleep`` and reads its
module's ``time.monotonic``: :func:`registration_clock` replaces both with a
:class:`FakeClock`, so polling takes no real time.
"""

from __future__ import annotations

import asyncio
import logging
import types

import pytest
from lark_oapi.scene import registration as sdk_registration


class FakeClock:
    """The SDK's ``time.monotonic`` and ``asyncio.sleep``: a sleep advances the time at
    once, unless the clock is held (``hold``), when it waits for ``release``."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self._running = asyncio.Event()
        self._running.set()

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await self._running.wait()
        self.now += seconds
        await asyncio.sleep(0)

    def hold(self) -> None:
        self._running.clear()

    def release(self) -> None:
        self._running.set()


def registration_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(sdk_registration, "time", types.SimpleNamespace(monotonic=fake.monotonic))
    monkeypatch.setattr(sdk_registration, "asyncio", types.SimpleNamespace(sleep=fake.sleep))
    return fake


def every_log_line(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every log line at every level, whatever earlier tests set the SDKs' loggers to."""
    for name in (None, "httpx", "httpcore", "Lark", "bot", "aiohttp"):
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog

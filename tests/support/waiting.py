"""Waiting for something observable to happen, instead of sleeping and hoping it did."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def wait_until(
    condition: Callable[[], T | Awaitable[T]],
    within: float = 5.0,
    *,
    every: float = 0.005,
    failure: str | Callable[[], str] = "condition not met in time",
) -> T:
    """Poll ``condition`` (a function, or a coroutine function) until what it returns is true,
    and return that; raise AssertionError with ``failure`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(failure() if callable(failure) else failure)
        await asyncio.sleep(every)

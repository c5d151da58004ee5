"""The brief cache the workspace's permission checks keep Feishu's answers in: an answer
is trusted for its time and no longer, a failure is never kept, and callers asking at
once share one call, also when the caller that made it is cancelled."""

from __future__ import annotations

import asyncio

import pytest

from connectors.feishu.brief_cache import BriefCache


class Fetches:
    """A fetch the test answers: each call waits until ``answer`` is set."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.started = asyncio.Event()
        self.answer = asyncio.Event()
        self.fail = False

    async def __call__(self, key: str) -> str:
        self.calls.append(key)
        self.started.set()
        await self.answer.wait()
        if self.fail:
            raise RuntimeError("Feishu said no")
        return f"{key}#{len(self.calls)}"


async def test_an_answer_is_kept_for_its_time_only() -> None:
    now = [0.0]
    fetches = Fetches()
    fetches.answer.set()
    cache = BriefCache(fetches, ttl=60.0, clock=lambda: now[0])
    assert await cache.get("a") == "a#1"
    now[0] = 59.9
    assert await cache.get("a") == "a#1"
    now[0] = 60.0
    assert await cache.get("a") == "a#2"


async def test_a_failure_is_not_kept() -> None:
    fetches = Fetches()
    fetches.answer.set()
    fetches.fail = True
    cache = BriefCache(fetches, clock=lambda: 0.0)
    with pytest.raises(RuntimeError):
        await cache.get("a")
    fetches.fail = False
    assert await cache.get("a") == "a#2"


async def test_callers_at_once_share_one_call_and_its_failure() -> None:
    fetches = Fetches()
    cache = BriefCache(fetches, clock=lambda: 0.0)
    first = asyncio.create_task(cache.get("a"))
    await fetches.started.wait()
    second = asyncio.create_task(cache.get("a"))
    await asyncio.sleep(0)  # let the second caller reach the shared call
    fetches.fail = True
    fetches.answer.set()
    for task in (first, second):
        with pytest.raises(RuntimeError):
            await task
    assert fetches.calls == ["a"]


async def test_a_waiter_fetches_itself_when_the_fetching_caller_is_cancelled() -> None:
    fetches = Fetches()
    cache = BriefCache(fetches, clock=lambda: 0.0)
    first = asyncio.create_task(cache.get("a"))
    await fetches.started.wait()
    second = asyncio.create_task(cache.get("a"))
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    fetches.answer.set()
    assert await second == "a#2"


async def test_the_oldest_answers_make_room() -> None:
    fetches = Fetches()
    fetches.answer.set()
    cache = BriefCache(fetches, clock=lambda: 0.0, max_entries=2)
    for key in ("a", "b", "c"):
        await cache.get(key)
    assert await cache.get("c") == "c#3"  # kept
    assert await cache.get("a") == "a#4"  # made room for c

"""One deadline per turn bounds the retries of a failing model, across calls and levels.

Against the fake OpenAI server through the real SDK. Time is injected: the deadline's
clock is a counter the test moves (a hung reply "takes" 60 s of it), and backoff
delays are recorded instead of waited out; only the client's own per-attempt timeout
is real, and short.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from bot.engine import (
    LLMDeadlineExceeded,
    LLMTransientError,
    Message,
    ModelDeadline,
    ReActAgent,
    model_deadline,
    openai_compat,
    structured_llm_call,
)
from bot.engine.openai_compat import OpenAICompatibleLLM
from bot.engine.selection import select_tools

from engine.support import make_tool
from fakes.openai_server import FakeOpenAIServer, Reply

QUESTION = [Message.user("What is the weather?")]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
HUNG = Reply(content="never in time", delay=30.0)  # past any client timeout below


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> list[float]:
    """Backoff delays, recorded and added to the clock instead of waited out."""
    delays: list[float] = []

    async def record(seconds: float) -> None:
        delays.append(seconds)
        clock.now += seconds
        await asyncio.sleep(0)

    monkeypatch.setattr(openai_compat, "_sleep", record)
    return delays


@pytest.fixture
async def llm(fake_openai: FakeOpenAIServer) -> AsyncIterator[OpenAICompatibleLLM]:
    client = OpenAICompatibleLLM(
        fake_openai.base_url,
        "sk-test",
        "hung-model",
        timeout=0.1,
        max_retries=3,
        backoff_base=0.5,
        backoff_max=8.0,
        http_client=httpx2.AsyncClient(),
    )
    yield client
    await client.aclose()


def hung_for(clock: Clock, seconds: float = 60.0) -> Any:
    """A server that never answers in time; each attempt costs ``seconds`` of the clock."""

    def handle(body: dict[str, Any]) -> Reply:
        clock.now += seconds
        return HUNG

    return handle


# -- the deadline alone -------------------------------------------------------------------


def test_an_unarmed_deadline_leaves_the_timeout_alone(clock: Clock) -> None:
    deadline = ModelDeadline(120, clock=clock)
    assert deadline.attempt_timeout(60, "m") == 60
    assert deadline.allows_wait(1000)


def test_a_failure_arms_the_window_from_the_failed_attempts_start(clock: Clock) -> None:
    deadline = ModelDeadline(120, clock=clock)
    started = clock.now
    clock.now += 60  # the attempt timed out after 60 s
    deadline.failed(started)
    assert deadline.attempt_timeout(60, "m") == 60  # 60 s left of 120
    clock.now += 30
    assert deadline.attempt_timeout(60, "m") == 30  # the retry is cut to what is left
    assert not deadline.allows_wait(30)
    clock.now += 30
    with pytest.raises(LLMDeadlineExceeded):
        deadline.attempt_timeout(60, "m")


def test_an_answer_disarms_it_and_a_later_failure_gets_the_whole_window(clock: Clock) -> None:
    deadline = ModelDeadline(120, clock=clock)
    deadline.failed(clock.now)
    clock.now += 100
    deadline.answered()
    clock.now += 500  # a long turn goes on
    deadline.failed(clock.now)
    assert deadline.attempt_timeout(60, "m") == 60


def test_once_passed_it_stays_passed(clock: Clock) -> None:
    deadline = ModelDeadline(10, clock=clock)
    deadline.failed(clock.now)
    clock.now += 11
    with pytest.raises(LLMDeadlineExceeded) as raised:
        deadline.attempt_timeout(60, "hung-model")
    assert raised.value.seconds == 10
    assert "hung-model" in str(raised.value)
    with pytest.raises(LLMDeadlineExceeded):
        deadline.attempt_timeout(60, "hung-model")


def test_a_turn_has_one_deadline_the_outer_one() -> None:
    with model_deadline(120) as outer, model_deadline(5) as inner:
        assert inner is outer
    with model_deadline(None) as none:
        assert none is None


# -- against the server -------------------------------------------------------------------


async def test_without_a_deadline_a_timeout_is_retried_per_call_only(
    fake_openai: FakeOpenAIServer, llm: OpenAICompatibleLLM, sleeps: list[float]
) -> None:
    fake_openai.handler = lambda body: HUNG
    with pytest.raises(LLMTransientError, match="timed out"):
        await llm.chat(QUESTION)
    assert len(fake_openai.requests) == 4  # max_retries=3


async def test_a_timeout_does_not_walk_the_structured_levels(
    fake_openai: FakeOpenAIServer, llm: OpenAICompatibleLLM, sleeps: list[float]
) -> None:
    fake_openai.handler = lambda body: HUNG
    result = await structured_llm_call(
        llm, QUESTION, SCHEMA, function_name="where", default_value=None
    )
    assert result.level == "default"
    # One level's retries (1 + 3), not native, JSON mode and plain text (and their
    # reformat retries) each with theirs: 20 attempts before.
    assert len(fake_openai.requests) == 4
    assert all(request.body.get("tools") for request in fake_openai.requests)


async def test_the_turn_deadline_ends_the_retries_of_a_hung_model(
    fake_openai: FakeOpenAIServer, llm: OpenAICompatibleLLM, clock: Clock, sleeps: list[float]
) -> None:
    fake_openai.handler = hung_for(clock, 60)
    with model_deadline(120, clock=clock), pytest.raises(LLMDeadlineExceeded) as raised:
        await llm.chat(QUESTION)
    # 0-60 s the first attempt, a short backoff, then the retry, cut to what is left of
    # the two minutes; at its end no retry starts.
    assert len(fake_openai.requests) == 2
    assert len(sleeps) == 1
    assert raised.value.seconds == 120


async def test_after_the_deadline_every_call_of_the_turn_fails_at_once(
    fake_openai: FakeOpenAIServer, llm: OpenAICompatibleLLM, clock: Clock, sleeps: list[float]
) -> None:
    fake_openai.handler = hung_for(clock, 60)
    tools = [make_tool(f"t{i:02d}") for i in range(14)]
    with model_deadline(120, clock=clock):
        agent = ReActAgent(llm, tools)
        result = await agent.run("What is the weather?")
    # Tool selection spent the deadline (and kept the full set); the loop's first call
    # then failed without a request.
    assert len(fake_openai.requests) == 2
    assert result.status == "error"
    assert "LLMDeadlineExceeded" in (result.error or "")


async def test_selection_over_a_hung_model_falls_back_within_the_deadline(
    fake_openai: FakeOpenAIServer, llm: OpenAICompatibleLLM, clock: Clock, sleeps: list[float]
) -> None:
    fake_openai.handler = hung_for(clock, 60)
    registry = ReActAgent(llm, [make_tool(f"t{i:02d}") for i in range(14)]).tools
    with model_deadline(120, clock=clock):
        selection = await select_tools(llm, registry, "q", max_tools=6)
    assert selection.selected is False
    assert len(fake_openai.requests) == 2


async def test_an_answer_in_between_gives_a_later_failure_a_new_window(
    fake_openai: FakeOpenAIServer, llm: OpenAICompatibleLLM, clock: Clock, sleeps: list[float]
) -> None:
    answered = Reply(content="here")
    script = iter([HUNG, answered, HUNG, HUNG, answered])

    def handle(body: dict[str, Any]) -> Reply:
        clock.now += 50
        return next(script)

    fake_openai.handler = handle
    with model_deadline(120, clock=clock):
        assert (await llm.chat(QUESTION)).content == "here"  # failed once, then answered
        clock.now += 1000  # a long turn: tools, a person's approval
        assert (await llm.chat(QUESTION)).content == "here"  # two failures, in its window
    assert len(fake_openai.requests) == 5


async def test_a_slow_stream_that_answers_is_never_cut(
    fake_openai: FakeOpenAIServer, llm: OpenAICompatibleLLM, clock: Clock
) -> None:
    def handle(body: dict[str, Any]) -> Reply:
        clock.now += 500  # far past the deadline, but the model is answering
        return Reply(content="a long and slow answer")

    fake_openai.handler = handle
    with model_deadline(120, clock=clock):
        deltas = [delta async for delta in llm.stream_chat(QUESTION)]
    assert "".join(d.content for d in deltas) == "a long and slow answer"

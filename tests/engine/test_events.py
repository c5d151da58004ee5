"""Run events: step / answer / compact / done, delivered in order without holding up the run."""

from __future__ import annotations

import asyncio
import gc
import json
import warnings
from collections.abc import Awaitable
from typing import Any

import pytest

from bot.engine import (
    AnswerEvent,
    AnswerWithdrawnEvent,
    CompactEvent,
    DoneEvent,
    LLMResponse,
    LLMTransientError,
    Message,
    ReActAgent,
    RunEvent,
    StepEvent,
    Tool,
    ToolError,
    Usage,
)
from bot.engine.events import EventCallback, EventSink
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response

STEP_KEYS = {
    "type",
    "phase",
    "index",
    "iteration",
    "call_id",
    "tool",
    "arguments",
    "observation",
    "status",
    "duration",
}
DONE_KEYS = {"type", "status", "iterations", "usage", "elapsed", "tool_calls", "model", "error"}
COMPACT_KEYS = {
    "type",
    "tokens_before",
    "tokens_after",
    "messages_summarized",
    "summarized_by_model",
}
ANSWER_KEYS = {"type", "delta"}


async def lookup(key: str, verbose: bool = False) -> str:
    return f"value of {key}" + (" (verbose)" if verbose else "")


async def explode(**arguments: Any) -> str:
    raise ToolError("backend said 404")


LOOKUP = Tool(
    name="lookup",
    description="Look a key up.",
    parameters={
        "type": "object",
        "properties": {"key": {"type": "string"}, "verbose": {"type": "boolean", "default": False}},
        "required": ["key"],
    },
    handler=lookup,
    side_effect="read",
)
EXPLODE = Tool(
    name="explode",
    description="Always fails.",
    parameters={"type": "object", "properties": {}},
    handler=explode,
    side_effect="read",
)


def two_step_llm(**kwargs: Any) -> ScriptedLLM:
    return ScriptedLLM(
        [
            tool_calls_response(tool_call("lookup", {"key": "a"}, id="c1"), usage=Usage(10, 1, 11)),
            tool_calls_response(tool_call("explode", {}, id="c2"), usage=Usage(20, 2, 22)),
            LLMResponse("the answer", usage=Usage(30, 3, 33)),
        ],
        **kwargs,
    )


def agent(llm: ScriptedLLM, **kwargs: Any) -> ReActAgent:
    return ReActAgent(llm, [LOOKUP, EXPLODE], **kwargs)


def collecting(events: list[RunEvent], kind: str) -> EventCallback:
    """An ``on_event`` that appends to ``events``: a plain function, or a coroutine one."""

    async def async_consumer(event: RunEvent) -> None:
        events.append(event)

    return events.append if kind == "sync" else async_consumer


def summary(events: list[RunEvent]) -> list[tuple[Any, ...]]:
    """Events in order; the answer's deltas in a row, joined into one entry."""
    out: list[tuple[Any, ...]] = []
    for e in events:
        if isinstance(e, StepEvent):
            out.append((e.type, e.phase, e.tool))
        elif isinstance(e, AnswerEvent):
            if out and out[-1][0] == "answer":
                out[-1] = ("answer", out[-1][1] + e.delta)
            else:
                out.append(("answer", e.delta))
        else:
            out.append((e.type,))
    return out


# The final reply, "the answer", streams in as three deltas ("the ", "answ", "er").
ANSWER_DELTAS = 3


# -- order and content -------------------------------------------------------------------


async def test_events_arrive_in_order_with_their_details() -> None:
    events: list[RunEvent] = []
    result = await agent(two_step_llm()).run("q", on_event=events.append)

    assert summary(events) == [
        ("step", "started", "lookup"),
        ("step", "finished", "lookup"),
        ("step", "started", "explode"),
        ("step", "finished", "explode"),
        ("answer", "the answer"),
        ("done",),
    ]
    started, finished, started2, finished2, *answer, done = events
    assert "".join(e.delta for e in answer if isinstance(e, AnswerEvent)) == "the answer"
    assert isinstance(started, StepEvent)
    assert isinstance(finished, StepEvent)
    assert isinstance(started2, StepEvent)
    assert isinstance(finished2, StepEvent)
    assert isinstance(done, DoneEvent)

    assert started.call_id == finished.call_id == "c1"
    assert dict(started.arguments) == {"key": "a"}
    assert started.observation is None
    assert started.status is None
    assert finished.arguments["key"] == "a"
    assert finished.observation == "value of a"
    assert finished.status == "ok"
    assert finished.duration is not None
    assert finished.duration >= 0
    assert (started.index, started.iteration) == (0, 1)
    assert (finished2.index, finished2.iteration) == (1, 2)
    assert finished2.status == "error"
    assert "backend said 404" in (finished2.observation or "")

    assert done.status == "completed"
    assert done.iterations == result.iterations == 3
    assert done.usage == result.usage == Usage(60, 6, 66)
    assert done.elapsed == result.elapsed
    assert done.elapsed >= 0
    assert done.tool_calls == len(result.steps) == 2
    assert done.model == "scripted"
    assert done.error is None


async def test_finished_event_matches_the_recorded_step() -> None:
    events: list[RunEvent] = []
    result = await agent(two_step_llm()).run("q", on_event=events.append)
    finished = [e for e in events if isinstance(e, StepEvent) and e.phase == "finished"]
    assert [(e.call_id, e.tool, e.observation, e.status) for e in finished] == [
        (s.call_id, s.tool, s.observation, s.status) for s in result.steps
    ]


async def test_parallel_calls_each_start_before_they_finish() -> None:
    llm = ScriptedLLM(
        [
            tool_calls_response(
                tool_call("lookup", {"key": "x"}, id="p1"),
                tool_call("lookup", {"key": "y"}, id="p2"),
                tool_call("explode", {}, id="p3"),
            ),
            "done",
        ]
    )
    events: list[RunEvent] = []
    await agent(llm).run("q", on_event=events.append)
    steps = [e for e in events if isinstance(e, StepEvent)]
    assert len(steps) == 6
    for call_id in ("p1", "p2", "p3"):
        phases = [e.phase for e in steps if e.call_id == call_id]
        assert phases == ["started", "finished"]
    assert sorted(e.index for e in steps if e.phase == "finished") == [0, 1, 2]
    assert isinstance(events[-1], DoneEvent)


async def test_done_event_for_a_failed_run_carries_status_and_error() -> None:
    llm = ScriptedLLM([LLMTransientError("rate limited for good")])
    events: list[RunEvent] = []
    result = await agent(llm).run("q", on_event=events.append)
    (done,) = events
    assert isinstance(done, DoneEvent)
    assert done.status == result.status == "error"
    assert done.error == result.error
    assert "rate limited" in (done.error or "")
    assert done.tool_calls == 0


async def test_run_without_consumer_works() -> None:
    result = await agent(two_step_llm()).run("q")
    assert result.answer == "the answer"


# -- consumers ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_sync_and_async_consumers_receive_the_same_events(kind: str) -> None:
    events: list[RunEvent] = []

    def sync_consumer(event: RunEvent) -> None:
        events.append(event)

    async def async_consumer(event: RunEvent) -> None:
        await asyncio.sleep(0)
        events.append(event)

    consumer = sync_consumer if kind == "sync" else async_consumer
    result = await agent(two_step_llm()).run("q", on_event=consumer)
    assert result.answer == "the answer"
    assert summary(events) == [
        ("step", "started", "lookup"),
        ("step", "finished", "lookup"),
        ("step", "started", "explode"),
        ("step", "finished", "explode"),
        ("answer", "the answer"),
        ("done",),
    ]


async def test_callable_object_returning_a_coroutine_is_awaited() -> None:
    events: list[RunEvent] = []

    class Consumer:
        async def __call__(self, event: RunEvent) -> None:
            await asyncio.sleep(0)
            events.append(event)

    await agent(two_step_llm()).run("q", on_event=Consumer())
    assert len(events) == 5 + ANSWER_DELTAS
    assert isinstance(events[-1], DoneEvent)


async def test_a_plain_consumer_that_starts_answering_awaitables_keeps_the_order() -> None:
    """Called inline while it answers None; once it answers an awaitable, that event and
    every later one go through a task, still in order, all delivered before run returns."""
    delivered: list[str] = []

    async def later(label: str) -> None:
        await asyncio.sleep(0.01)
        delivered.append(label)

    def consumer(event: RunEvent) -> Awaitable[None] | None:
        label = f"{event.type}:{getattr(event, 'phase', '')}"
        if len(delivered) < 1:
            delivered.append(label)
            return None
        return later(label)  # from the second event on

    await agent(two_step_llm()).run("q", on_event=consumer)
    assert delivered == [
        "step:started",
        "step:finished",
        "step:started",
        "step:finished",
        *["answer:"] * ANSWER_DELTAS,
        "done:",
    ]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_raising_consumer_does_not_break_the_run(kind: str) -> None:
    received: list[RunEvent] = []

    def sync_consumer(event: RunEvent) -> None:
        received.append(event)
        if isinstance(event, StepEvent):
            raise RuntimeError("consumer bug")

    async def async_consumer(event: RunEvent) -> None:
        sync_consumer(event)

    consumer = sync_consumer if kind == "sync" else async_consumer
    result = await agent(two_step_llm()).run("q", on_event=consumer)
    assert result.status == "completed"
    assert result.answer == "the answer"
    # every later event still arrived, done included
    assert len(received) == 5 + ANSWER_DELTAS
    assert isinstance(received[-1], DoneEvent)


async def test_a_slow_consumer_does_not_block_the_loop() -> None:
    llm = two_step_llm()
    release = asyncio.Event()
    received: list[RunEvent] = []

    async def slow(event: RunEvent) -> None:
        await release.wait()
        received.append(event)

    task = asyncio.create_task(agent(llm).run("q", on_event=slow))
    for _ in range(10_000):
        if len(llm.calls) == 3 or task.done():
            break
        await asyncio.sleep(0)
    # The loop made all its model calls (and ran its tools) while the consumer was blocked...
    assert len(llm.calls) == 3
    assert received == []
    # ...but run() only returns after every event was delivered.
    for _ in range(50):
        await asyncio.sleep(0)
    assert not task.done()
    release.set()
    result = await task
    assert result.answer == "the answer"
    assert summary(received) == [
        ("step", "started", "lookup"),
        ("step", "finished", "lookup"),
        ("step", "started", "explode"),
        ("step", "finished", "explode"),
        ("answer", "the answer"),
        ("done",),
    ]


# -- compact events ----------------------------------------------------------------------


async def big(n: int = 0) -> str:
    return f"result {n} " + "y" * 2000


BIG = Tool(
    name="big",
    description="Returns a lot of text.",
    parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
    handler=big,
    side_effect="read",
)


def compacting_llm() -> ScriptedLLM:
    state = {"loop": 0}

    def reply(messages: list[Message]) -> Any:
        if not any(m.kind == "query" for m in messages):  # the summarisation call
            return "SUMMARY of earlier work"
        state["loop"] += 1
        if state["loop"] <= 3:
            return tool_calls_response(tool_call("big", {"n": state["loop"]}))
        return "final"

    return ScriptedLLM([reply] * 30)


async def test_compaction_emits_a_compact_event_before_done() -> None:
    events: list[RunEvent] = []
    result = await ReActAgent(compacting_llm(), [BIG], context_budget=1200).run(
        "q", on_event=events.append
    )
    assert result.status == "completed"
    compacts = [e for e in events if isinstance(e, CompactEvent)]
    assert result.compactions >= 1
    assert len(compacts) == result.compactions
    for event in compacts:
        assert event.tokens_before > event.tokens_after
        assert event.messages_summarized >= 1
        assert event.summarized_by_model is True
        as_dict = event.to_dict()
        assert set(as_dict) == COMPACT_KEYS
        assert as_dict["type"] == "compact"
        json.dumps(as_dict)
    assert isinstance(events[-1], DoneEvent)
    assert events.index(compacts[0]) < len(events) - 1


# -- to_dict -----------------------------------------------------------------------------


async def test_to_dict_of_run_events_is_json_with_the_documented_keys() -> None:
    events: list[RunEvent] = []
    await agent(two_step_llm()).run("q", on_event=events.append)
    for event in events:
        as_dict = event.to_dict()
        assert json.loads(json.dumps(as_dict)) == as_dict
        assert as_dict["type"] == event.type
        if isinstance(event, StepEvent):
            assert set(as_dict) == STEP_KEYS
            assert as_dict["type"] == "step"
            assert as_dict["tool"] == event.tool
            assert as_dict["phase"] in ("started", "finished")
        elif isinstance(event, AnswerEvent):
            assert set(as_dict) == ANSWER_KEYS
            assert as_dict["delta"] == event.delta
        else:
            assert set(as_dict) == DONE_KEYS
            assert as_dict["type"] == "done"
            assert as_dict["usage"] == {
                "prompt_tokens": 60,
                "completion_tokens": 6,
                "total_tokens": 66,
            }
            assert as_dict["iterations"] == 3
            assert as_dict["tool_calls"] == 2
            assert as_dict["status"] == "completed"


def test_to_dict_of_each_event_type() -> None:
    step = StepEvent("finished", 2, 1, "c9", "lookup", {"key": "中文"}, "obs", "ok", 0.25)
    answer = AnswerEvent("Hello, 世界")
    withdrawn = AnswerWithdrawnEvent("Let me check.")
    compact = CompactEvent(1000, 400, 7, False)
    done = DoneEvent("completed", 4, Usage(1, 2, 3), 1.23456, 3, "model-x", None)
    cases = [
        (step, STEP_KEYS, {"tool": "lookup", "arguments": {"key": "中文"}, "duration": 0.25}),
        (answer, ANSWER_KEYS, {"delta": "Hello, 世界"}),
        (withdrawn, {"type", "text"}, {"text": "Let me check."}),
        (compact, COMPACT_KEYS, {"tokens_before": 1000, "summarized_by_model": False}),
        (done, DONE_KEYS, {"elapsed": 1.235, "model": "model-x", "iterations": 4}),
    ]
    for event, keys, some_values in cases:
        as_dict = event.to_dict()
        assert set(as_dict) == keys
        assert json.loads(json.dumps(as_dict, ensure_ascii=False)) == as_dict
        for key, value in some_values.items():
            assert as_dict[key] == value
    assert [e.to_dict()["type"] for e, _, _ in cases] == [
        "step",
        "answer",
        "answer_withdrawn",
        "compact",
        "done",
    ]
    assert done.to_dict()["usage"] == {
        "prompt_tokens": 1,
        "completion_tokens": 2,
        "total_tokens": 3,
    }


# -- answer events -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_stream_answer_emits_answer_events_that_join_to_the_text(kind: str) -> None:
    text = "The answer is **42**, as the lookup showed. 答案是四十二。"
    llm = ScriptedLLM(["draft answer"], stream_script=[text], chunk_chars=5)
    bot = agent(llm, synthesis="always")
    result = await bot.run("q")
    events: list[RunEvent] = []

    consumer = collecting(events, kind)
    deltas = [d async for d in bot.stream_answer("q", result, on_event=consumer)]
    assert "".join(deltas) == text
    assert len(deltas) > 1
    assert all(isinstance(e, AnswerEvent) for e in events)
    assert [e.delta for e in events if isinstance(e, AnswerEvent)] == deltas


async def test_stream_answer_fallback_is_also_an_answer_event() -> None:
    llm = ScriptedLLM(["draft answer"], stream_script=[LLMTransientError("stream failed")])
    bot = agent(llm, synthesis="always")
    result = await bot.run("q")
    events: list[RunEvent] = []
    deltas = [d async for d in bot.stream_answer("q", result, on_event=events.append)]
    assert deltas == ["draft answer"]
    assert [e.to_dict() for e in events] == [{"type": "answer", "delta": "draft answer"}]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_stream_answer_of_a_streamed_reply_gives_it_at_once_as_one_event(kind: str) -> None:
    llm = ScriptedLLM(["The answer is **42**."])
    bot = agent(llm)
    result = await bot.run("q")
    events: list[RunEvent] = []

    consumer = collecting(events, kind)
    deltas = [d async for d in bot.stream_answer("q", result, on_event=consumer)]
    assert result.answer_streamed
    assert deltas == ["The answer is **42**."]
    assert [e.to_dict() for e in events] == [{"type": "answer", "delta": "The answer is **42**."}]
    assert len(llm.calls) == 1  # no synthesis call


async def test_an_abort_before_the_delivery_task_starts_leaves_no_coroutine_unawaited() -> None:
    """A plain consumer answered a coroutine, so its delivery went to a task; the run is
    cancelled before that task ever ran: the coroutine is closed, not left to warn."""
    ran: list[str] = []

    async def deliver(event: RunEvent) -> None:
        ran.append(event.type)

    sink = EventSink(lambda event: deliver(event))
    sink.emit(AnswerEvent("partial"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sink.abort()
        for _ in range(3):  # the cancelled task's turns
            await asyncio.sleep(0)
        del sink
        gc.collect()
    assert ran == []
    assert not [w for w in caught if "never awaited" in str(w.message)], caught

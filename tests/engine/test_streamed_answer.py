"""A final reply is the answer: the loop's calls stream, and its text reaches the reader as
it arrives, with no second call to write it again.

Against the fake OpenAI server through the real SDK. What a reader shows is rebuilt from
the events (``shown``): ``answer`` deltas add text, ``answer_withdrawn`` takes back exactly
the text it names, from the end.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.engine import (
    AnswerEvent,
    AnswerWithdrawnEvent,
    InterruptQueue,
    OpenAICompatibleLLM,
    ReActAgent,
    RunEvent,
    StepEvent,
    StreamDelta,
    ToolCall,
    Usage,
)
from bot.engine.testing import ScriptedLLM

from engine.support import make_tool
from fakes.openai_server import FakeOpenAIServer, Reply

QUESTION = "What is the weather in Paris?"


def provider(server: FakeOpenAIServer, **abilities: bool) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM(
        server.base_url,
        "sk-test",
        "fake-model",
        abilities=abilities or None,
        backoff_base=0.001,
        backoff_max=0.01,
    )


def shown(events: Sequence[RunEvent]) -> str:
    """The answer a reader of these events shows at the end."""
    text = ""
    for event in events:
        if isinstance(event, AnswerEvent):
            text += event.delta
        elif isinstance(event, AnswerWithdrawnEvent):
            assert text.endswith(event.text), (text, event.text)
            text = text[: len(text) - len(event.text)]
    return text


def kinds(events: Sequence[RunEvent]) -> list[str]:
    """Event types in order, a run of answer deltas as one "answer"."""
    out: list[str] = []
    for event in events:
        if event.type == "answer" and out and out[-1] == "answer":
            continue
        out.append(event.type)
    return out


async def weather(x: int) -> str:
    return "sunny, 21°C"


WEATHER = make_tool("weather", weather)


# -- a final reply is the answer --------------------------------------------------------


async def test_a_final_reply_streams_as_the_answer_in_one_call(fake_openai):
    fake_openai.push_text("It is **sunny** in Paris today.", usage={"prompt_tokens": 40})
    llm = provider(fake_openai)
    agent = ReActAgent(llm, [WEATHER])
    events: list[RunEvent] = []
    result = await agent.run(QUESTION, on_event=events.append)
    given_back = [d async for d in agent.stream_answer(QUESTION, result)]
    await llm.aclose()

    deltas = [e.delta for e in events if isinstance(e, AnswerEvent)]
    assert len(deltas) > 1  # as it arrived, in pieces
    assert "".join(deltas) == result.answer == "It is **sunny** in Paris today."
    assert result.answer_streamed
    assert kinds(events) == ["answer", "done"]
    # Not written again: one request, streamed with the tools; stream_answer gives it back.
    assert len(fake_openai.requests) == 1
    request = fake_openai.requests[0].body
    assert request["stream"] is True
    assert [t["function"]["name"] for t in request["tools"]] == ["weather"]
    assert given_back == [result.answer]
    assert result.usage.prompt_tokens == 40
    assert result.synthesis_usage == Usage()


async def test_a_reply_that_is_tool_calls_shows_nothing(fake_openai):
    fake_openai.push_tool_calls([("c1", "weather", {"x": 1})])
    fake_openai.push_text("Sunny, 21°C.")
    llm = provider(fake_openai)
    events: list[RunEvent] = []
    result = await ReActAgent(llm, [WEATHER]).run(QUESTION, on_event=events.append)
    await llm.aclose()

    assert kinds(events) == ["step", "step", "answer", "done"]
    assert shown(events) == result.answer == "Sunny, 21°C."
    assert all(request.body["stream"] for request in fake_openai.requests)
    assert len(fake_openai.requests) == 2


async def test_text_then_tool_calls_in_one_reply_is_taken_back(fake_openai):
    # Some providers write a note and then call tools, in one streamed reply.
    fake_openai.push_tool_calls([("c1", "weather", {"x": 1})], content="Let me check that.")
    fake_openai.push_text("Sunny, 21°C.")
    llm = provider(fake_openai)
    events: list[RunEvent] = []
    result = await ReActAgent(llm, [WEATHER]).run(QUESTION, on_event=events.append)
    await llm.aclose()

    assert kinds(events) == ["answer", "answer_withdrawn", "step", "step", "answer", "done"]
    withdrawn = next(e for e in events if isinstance(e, AnswerWithdrawnEvent))
    assert withdrawn.text == "Let me check that."
    assert shown(events) == result.answer == "Sunny, 21°C."
    assert result.answer_streamed
    # The model's own context keeps its note beside the calls, as it wrote them.
    second = fake_openai.requests[1].body["messages"]
    assert second[-2]["content"] == "Let me check that."
    assert second[-2]["tool_calls"][0]["id"] == "c1"


async def test_a_broken_stream_is_taken_back_and_asked_again_without_repeating(fake_openai):
    fake_openai.push_stream_drop("It is sunny in Par", after_chunks=4)  # role + 3 pieces
    fake_openai.push_text("It is sunny in Paris.")
    llm = provider(fake_openai)
    events: list[RunEvent] = []
    result = await ReActAgent(llm, [WEATHER]).run(QUESTION, on_event=events.append)
    await llm.aclose()

    withdrawn = [e.text for e in events if isinstance(e, AnswerWithdrawnEvent)]
    assert withdrawn == ["It is sunny "]
    assert shown(events) == result.answer == "It is sunny in Paris."
    assert len(fake_openai.requests) == 2


# -- interrupts and /stop during a streamed reply ----------------------------------------


async def test_a_message_during_the_final_reply_replaces_it(fake_openai):
    queue = InterruptQueue()
    fake_openai.push_text("It is 70°F.")
    fake_openai.push_text("It is 21°C.")
    events: list[RunEvent] = []

    def on_event(event: RunEvent) -> None:
        events.append(event)
        if isinstance(event, AnswerEvent) and len(events) == 1:
            queue.put_nowait("in Celsius please")  # the user writes while it streams

    llm = provider(fake_openai)
    result = await ReActAgent(llm, [WEATHER]).run(
        QUESTION, interrupt_queue=queue, on_event=on_event
    )
    await llm.aclose()

    # The stale answer is dropped (the reference design), so the card takes it back and
    # the answer written with the message replaces it.
    assert [e.text for e in events if isinstance(e, AnswerWithdrawnEvent)] == ["It is 70°F."]
    assert shown(events) == result.answer == "It is 21°C."
    assert result.answer_streamed
    last = fake_openai.requests[1].body["messages"][-1]
    assert last["role"] == "user" and "in Celsius please" in last["content"]


async def test_a_reply_is_not_shown_while_a_message_already_waits(fake_openai):
    queue = InterruptQueue()
    queue.put_nowait("in Celsius please")  # sent before the model answered
    fake_openai.push_text("It is 70°F.")
    fake_openai.push_text("It is 21°C.")
    events: list[RunEvent] = []
    llm = provider(fake_openai)
    result = await ReActAgent(llm, [WEATHER]).run(
        QUESTION, interrupt_queue=queue, on_event=events.append
    )
    await llm.aclose()

    assert "answer_withdrawn" not in kinds(events)  # the stale reply never showed
    assert "".join(e.delta for e in events if isinstance(e, AnswerEvent)) == "It is 21°C."
    assert result.answer == "It is 21°C."


async def test_stop_during_a_streamed_reply_keeps_what_was_shown(fake_openai):
    queue = InterruptQueue()
    long_answer = "Paris is sunny. " * 50
    fake_openai.push(Reply(content=long_answer, chunk_interval=0.01))
    events: list[RunEvent] = []

    def on_event(event: RunEvent) -> None:
        events.append(event)
        if isinstance(event, AnswerEvent) and len(events) == 3:
            queue.stop("stopped by user")

    llm = provider(fake_openai)
    result = await ReActAgent(llm, [WEATHER]).run(
        QUESTION, interrupt_queue=queue, on_event=on_event
    )
    await llm.aclose()

    assert result.status == "cancelled"
    assert not result.answer_streamed
    # What the person already read stays (the bot marks the card stopped); the stream
    # was not read to its end.
    assert "answer_withdrawn" not in kinds(events)
    assert 0 < len(shown(events)) < len(long_answer)
    assert long_answer.startswith(shown(events))
    assert kinds(events)[-1] == "done"


# -- where synthesis stays ----------------------------------------------------------------


async def test_the_completion_checklist_reply_is_not_shown_and_the_next_one_is(fake_openai):
    for i in range(3):
        fake_openai.push_tool_calls([(f"c{i}", "weather", {"x": i})])
    fake_openai.push_text("Draft: sunny.")
    fake_openai.push_text("Sunny everywhere, 21°C.")
    events: list[RunEvent] = []
    llm = provider(fake_openai)
    result = await ReActAgent(llm, [WEATHER]).run(QUESTION, on_event=events.append)
    await llm.aclose()

    assert "answer_withdrawn" not in kinds(events)
    answer = "".join(e.delta for e in events if isinstance(e, AnswerEvent))
    assert answer == result.answer == "Sunny everywhere, 21°C."
    assert len(fake_openai.requests) == 5


async def test_a_run_without_a_final_reply_gets_synthesis(fake_openai):
    fake_openai.push_tool_calls([("c1", "weather", {"x": 1})])
    fake_openai.push_text("Paris: sunny so far.")  # the synthesis call
    llm = provider(fake_openai)
    agent = ReActAgent(llm, [WEATHER], max_iterations=1)
    result = await agent.run(QUESTION)
    answer = "".join([d async for d in agent.stream_answer(QUESTION, result)])
    await llm.aclose()

    assert result.status == "max_iterations"
    assert not result.answer_streamed
    assert answer == "Paris: sunny so far."
    synthesis = fake_openai.requests[-1].body
    assert synthesis["stream"] is True and "tools" not in synthesis


async def test_json_mode_gets_synthesis(fake_openai):
    fake_openai.push_text(json.dumps({"type": "final_answer", "answer": "sunny"}))
    fake_openai.push_text("It is sunny in Paris.")
    llm = provider(fake_openai, tool_call=False)
    agent = ReActAgent(llm, [WEATHER])
    events: list[RunEvent] = []
    result = await agent.run(QUESTION, on_event=events.append)
    answer = "".join([d async for d in agent.stream_answer(QUESTION, result)])
    await llm.aclose()

    assert result.mode == "json"
    assert not result.answer_streamed
    assert "answer" not in kinds(events)  # its JSON reply is never shown
    assert answer == "It is sunny in Paris."
    loop, synthesis = (r.body for r in fake_openai.requests)
    assert "stream" not in loop and synthesis["stream"] is True


async def test_an_answer_only_in_reasoning_gets_synthesis(fake_openai):
    fake_openai.push_reasoning("The user wants the weather; it is sunny.", content="")
    fake_openai.push_text("It is sunny.")
    llm = provider(fake_openai)
    agent = ReActAgent(llm, [WEATHER])
    events: list[RunEvent] = []
    result = await agent.run(QUESTION, on_event=events.append)
    answer = "".join([d async for d in agent.stream_answer(QUESTION, result)])
    await llm.aclose()

    assert not result.answer_streamed
    assert "answer" not in kinds(events)  # reasoning is never shown as the answer
    assert answer == "It is sunny."
    assert len(fake_openai.requests) == 2


async def test_a_model_without_streaming_answers_with_one_call_and_synthesis(fake_openai):
    fake_openai.push_text("Sunny.")
    fake_openai.push_text("It is sunny in Paris.")
    llm = provider(fake_openai, streaming=False)
    agent = ReActAgent(llm, [WEATHER])
    result = await agent.run(QUESTION)
    answer = "".join([d async for d in agent.stream_answer(QUESTION, result)])
    await llm.aclose()
    assert not result.answer_streamed
    assert answer == "It is sunny in Paris."
    assert "stream" not in fake_openai.requests[0].body


# -- hostile streams ----------------------------------------------------------------------


class PiecesLLM(ScriptedLLM):
    """Streams its first turn in exactly the given pieces; then answers "done"."""

    def __init__(self, pieces: Sequence[str], reasoning: str, calls: bool) -> None:
        super().__init__()
        self.pieces, self.reasoning, self.with_calls = pieces, reasoning, calls
        self.turns = 0

    async def stream_chat(
        self, messages: Sequence[Any], **options: Any
    ) -> AsyncIterator[StreamDelta]:
        self.turns += 1
        if self.turns > 1:
            yield StreamDelta(content="done")
            yield StreamDelta(usage=Usage(1, 1, 2), finish_reason="stop")
            return
        if self.reasoning:
            yield StreamDelta(reasoning_content=self.reasoning)
        for piece in self.pieces:
            yield StreamDelta(content=piece)
        calls: tuple[ToolCall, ...] = ()
        if self.with_calls:
            calls = (ToolCall("c1", "echo", {"x": 1}, '{"x": 1}'),)
        yield StreamDelta(tool_calls=calls, usage=Usage(1, 1, 2), finish_reason="stop")


@given(
    pieces=st.lists(st.text(max_size=12), max_size=12),
    reasoning=st.text(max_size=20),
    calls=st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_whatever_a_stream_holds_the_reader_ends_with_exactly_the_answer(
    pieces: list[str], reasoning: str, calls: bool
) -> None:
    async def run() -> tuple[Any, list[RunEvent]]:
        events: list[RunEvent] = []
        llm = PiecesLLM(pieces, reasoning, calls)
        result = await ReActAgent(llm, [make_tool("echo")]).run("q", on_event=events.append)
        return result, events

    result, events = asyncio.run(run())
    assert result.status == "completed"
    if result.answer_streamed:
        assert shown(events).strip() == result.answer
    else:
        assert shown(events) == ""  # nothing left on the reader's side: synthesis writes it
    steps = [e for e in events if isinstance(e, StepEvent)]
    assert bool(steps) == calls

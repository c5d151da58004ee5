"""OpenAICompatibleLLM against the fake OpenAI server, through the real openai SDK."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
import traceback
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import httpx2
import pytest

from bot.engine import openai_compat
from bot.engine.llm import (
    DEFAULT_ABILITIES,
    LLM,
    LLMContextOverflow,
    LLMRequestError,
    LLMResponseError,
    LLMStreamInterrupted,
    LLMTransientError,
    StreamDelta,
)
from bot.engine.messages import Message, ToolCall, Usage
from bot.engine.openai_compat import OpenAICompatibleLLM

from fakes.openai_server import FakeOpenAIServer, Reply

API_KEY = "sk-test-SECRET-0123456789abcdef"
MODEL = "test-model"
QUESTION = [Message.system("You are terse."), Message.user("What is the weather?")]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
LONG_TEXT = "The quick brown fox jumps over the lazy dog, twice."
# Loading the CA bundle costs ~50 ms per HTTP client; load it once for the whole module.
TLS_CONTEXT = ssl.create_default_context()

MakeLLM = Callable[..., OpenAICompatibleLLM]


@pytest.fixture
async def make_llm(fake_openai: FakeOpenAIServer) -> AsyncIterator[MakeLLM]:
    """Build LLMs pointed at the fake server, with backoff small enough to keep tests fast."""
    made: list[OpenAICompatibleLLM] = []

    def make(**options: Any) -> OpenAICompatibleLLM:
        options = {
            "max_retries": 2,
            "backoff_base": 0.001,
            "backoff_max": 0.01,
            "http_client": httpx2.AsyncClient(verify=TLS_CONTEXT),
            **options,
        }
        llm = OpenAICompatibleLLM(fake_openai.base_url, API_KEY, MODEL, **options)
        made.append(llm)
        return llm

    yield make
    for llm in made:
        await llm.aclose()


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record backoff delays instead of waiting them out."""
    delays: list[float] = []

    async def record(seconds: float) -> None:
        delays.append(seconds)
        await asyncio.sleep(0)

    monkeypatch.setattr(openai_compat, "_sleep", record)
    return delays


async def collect(stream: AsyncIterator[StreamDelta]) -> list[StreamDelta]:
    return [delta async for delta in stream]


async def raw_stream_chunks(server: FakeOpenAIServer, body: dict[str, Any]) -> list[Any]:
    """The decoded SSE chunks the fake sends for ``body``, read without the SDK."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{server.base_url}/chat/completions", json=body) as response,
    ):
        text = await response.text()
    events = [line.removeprefix("data: ") for line in text.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    return [json.loads(event) for event in events[:-1]]


# -- construction ------------------------------------------------------------------------------


async def test_defaults_abilities_and_satisfies_protocol(make_llm: MakeLLM) -> None:
    llm = make_llm(http_client=None)  # the SDK's own HTTP client
    assert llm.model == MODEL
    assert dict(llm.abilities) == dict(DEFAULT_ABILITIES)
    assert isinstance(llm, LLM)
    assert API_KEY not in repr(llm)


async def test_given_abilities_merge_over_defaults(make_llm: MakeLLM) -> None:
    llm = make_llm(abilities={"json_mode": False, "vision": True})
    assert llm.abilities["json_mode"] is False
    assert llm.abilities["vision"] is True
    assert llm.abilities["tool_call"] is True  # untouched default


# -- chat -------------------------------------------------------------------------------------


async def test_plain_completion_with_usage(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push_text("Sunny, 21°C.", usage={"prompt_tokens": 12, "completion_tokens": 5})

    response = await make_llm().chat(QUESTION)

    assert response.content == "Sunny, 21°C."
    assert response.tool_calls == ()
    assert response.reasoning_content is None
    assert response.usage == Usage(12, 5, 17)
    assert response.finish_reason == "stop"
    assert response.model == MODEL
    (request,) = fake_openai.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["Authorization"] == f"Bearer {API_KEY}"
    assert request.body["model"] == MODEL
    assert "stream" not in request.body


async def test_missing_usage_and_null_content_become_zero_and_empty(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push(Reply(content=None, usage=None))

    response = await make_llm().chat(QUESTION)

    assert response.content == ""
    assert response.usage == Usage(0, 0, 0)


async def test_parallel_tool_calls_are_parsed_to_dicts(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push_tool_calls(
        [
            ("call_1", "get_weather", {"city": "Paris"}),
            ("call_2", "get_weather", {"city": "Zürich", "days": 3}),
        ],
        usage={"prompt_tokens": 40, "completion_tokens": 20},
    )

    response = await make_llm().chat(QUESTION, tools=[WEATHER_TOOL])

    assert response.finish_reason == "tool_calls"
    assert response.content == ""
    first, second = response.tool_calls
    assert (first.id, first.name, dict(first.arguments)) == (
        "call_1",
        "get_weather",
        {"city": "Paris"},
    )
    assert (second.id, dict(second.arguments)) == ("call_2", {"city": "Zürich", "days": 3})
    assert first.parse_error is None
    assert json.loads(second.raw_arguments) == {"city": "Zürich", "days": 3}


@pytest.mark.parametrize(
    ("raw", "error_words"),
    [
        ('{"city": "Paris"', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('"Paris"', "must be a JSON object"),
    ],
)
async def test_bad_argument_text_sets_parse_error(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM, raw: str, error_words: str
) -> None:
    fake_openai.push_tool_calls([("call_1", "get_weather", raw)])

    (call,) = (await make_llm().chat(QUESTION)).tool_calls

    assert call.arguments == {}
    assert call.raw_arguments == raw
    assert call.parse_error is not None
    assert error_words in call.parse_error


async def test_empty_argument_text_means_no_arguments(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push_tool_calls([("call_1", "list_cities", "")])

    (call,) = (await make_llm().chat(QUESTION)).tool_calls

    assert call.arguments == {}
    assert call.parse_error is None


async def test_reasoning_content_is_passed_through(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push_reasoning("The user wants weather; answer briefly.", "Sunny.")

    response = await make_llm().chat(QUESTION)

    assert response.reasoning_content == "The user wants weather; answer briefly."
    assert response.content == "Sunny."


async def test_request_carries_options_exactly_and_omits_unset_ones(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push(Reply(content="{}"), times=2)
    llm = make_llm()
    tool_choice = {"type": "function", "function": {"name": "get_weather"}}
    response_format = {"type": "json_object"}

    await llm.chat(
        QUESTION,
        tools=[WEATHER_TOOL],
        tool_choice=tool_choice,
        response_format=response_format,
        temperature=0.2,
        max_tokens=256,
    )
    await llm.chat(QUESTION, tools=[])

    full, bare = (request.body for request in fake_openai.requests)
    assert full["tools"] == [WEATHER_TOOL]
    assert full["tool_choice"] == tool_choice
    assert full["response_format"] == response_format
    assert full["temperature"] == 0.2
    assert full["max_tokens"] == 256
    assert set(bare) == {"model", "messages"}


async def test_messages_are_serialised_to_the_wire_format(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    paris = ToolCall("call_1", "get_weather", {"city": "Paris"}, raw_arguments='{"city":"Paris"}')
    zurich = ToolCall("call_2", "get_weather", {"city": "Zürich"})
    transcript = [
        Message.system("You are terse."),
        Message.user("Weather in Paris and Zürich?", pinned=True, kind="query"),
        Message.assistant("", (paris, zurich), reasoning_content="Two cities: two calls."),
        Message.tool(paris, "18°C"),
        Message.tool(zurich, "12°C"),
        Message.assistant("Paris 18°C, Zürich 12°C.", reasoning_content="Done."),
        Message.user("Thanks", kind="interrupt"),
    ]
    fake_openai.push_text("You're welcome.")

    await make_llm().chat(transcript)

    def wire_call(call_id: str, arguments: str) -> dict[str, Any]:
        function = {"name": "get_weather", "arguments": arguments}
        return {"id": call_id, "type": "function", "function": function}

    assert fake_openai.requests[0].body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris and Zürich?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                wire_call("call_1", '{"city":"Paris"}'),  # raw text kept as the model sent it
                wire_call("call_2", '{"city": "Zürich"}'),  # not \u-escaped
            ],
        },
        {"role": "tool", "content": "18°C", "tool_call_id": "call_1"},
        {"role": "tool", "content": "12°C", "tool_call_id": "call_2"},
        {"role": "assistant", "content": "Paris 18°C, Zürich 12°C."},
        {"role": "user", "content": "Thanks"},
    ]


async def test_response_without_choices_is_a_response_error(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push(Reply(body={"id": "x", "object": "chat.completion", "choices": []}))

    with pytest.raises(LLMResponseError, match="choices"):
        await make_llm().chat(QUESTION)
    assert len(fake_openai.requests) == 1


# -- streaming ----------------------------------------------------------------------------------


async def test_stream_yields_text_in_several_deltas_then_usage(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push_text(LONG_TEXT, usage={"prompt_tokens": 9, "completion_tokens": 11})

    deltas = await collect(make_llm().stream_chat(QUESTION))

    *text_deltas, last = deltas
    assert len(text_deltas) > 1
    assert "".join(d.content for d in text_deltas) == LONG_TEXT
    assert all(d.usage is None and d.finish_reason is None for d in text_deltas)
    assert last.usage == Usage(9, 11, 20)
    assert last.finish_reason == "stop"
    assert (last.content, last.tool_calls) == ("", ())
    body = fake_openai.requests[0].body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


async def test_stream_assembles_tool_calls_from_split_arguments(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    calls = [
        ("call_a", "get_weather", {"city": "Paris", "unit": "celsius"}),
        ("call_b", "get_time", {"timezone": "Europe/Zurich"}),
    ]
    fake_openai.handler = lambda body: Reply(tool_calls=calls, usage={"prompt_tokens": 3})

    # The fake really splits the arguments and names each call only once.
    chunks = await raw_stream_chunks(fake_openai, {"model": MODEL, "stream": True})
    fragments = [
        call for chunk in chunks for call in chunk["choices"][0]["delta"].get("tool_calls", [])
    ]
    assert sum(1 for f in fragments if f["index"] == 0) > 2
    assert [f["id"] for f in fragments if "id" in f] == ["call_a", "call_b"]

    deltas = await collect(make_llm().stream_chat(QUESTION, tools=[WEATHER_TOOL]))

    assert all(d.tool_calls == () for d in deltas[:-1])
    last = deltas[-1]
    assert [(c.id, c.name, dict(c.arguments)) for c in last.tool_calls] == [
        ("call_a", "get_weather", {"city": "Paris", "unit": "celsius"}),
        ("call_b", "get_time", {"timezone": "Europe/Zurich"}),
    ]
    assert all(c.parse_error is None for c in last.tool_calls)
    assert last.finish_reason == "tool_calls"
    assert last.usage == Usage(3, 0, 3)
    assert fake_openai.requests[-1].body["tools"] == [WEATHER_TOOL]


async def test_stream_passes_reasoning_before_content(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push_reasoning("Think about the weather first.", "Sunny.")

    deltas = await collect(make_llm().stream_chat(QUESTION))

    reasoning = "".join(d.reasoning_content for d in deltas)
    assert reasoning == "Think about the weather first."
    assert "".join(d.content for d in deltas) == "Sunny."
    first_content = next(i for i, d in enumerate(deltas) if d.content)
    assert all(not d.content for d in deltas[:first_content])
    assert deltas[0].reasoning_content


# -- retries ------------------------------------------------------------------------------------


async def test_rate_limited_twice_then_success(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push_error(429, times=2)
    fake_openai.push_text("finally")

    response = await make_llm(max_retries=3).chat(QUESTION)

    assert response.content == "finally"
    assert len(fake_openai.requests) == 3
    assert fake_openai.pending == 0


async def test_retry_after_header_is_honoured_in_real_time(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push_error(429, retry_after=0.2)
    fake_openai.push_text("ok")
    started = time.monotonic()

    response = await make_llm(backoff_base=0.001, backoff_max=5.0).chat(QUESTION)

    assert response.content == "ok"
    assert time.monotonic() - started >= 0.2


@pytest.mark.parametrize(("retry_after", "expected"), [(0.25, 0.25), (30, 0.5)])
async def test_retry_after_is_capped_at_backoff_max(
    fake_openai: FakeOpenAIServer,
    make_llm: MakeLLM,
    sleeps: list[float],
    retry_after: float,
    expected: float,
) -> None:
    fake_openai.push_error(429, retry_after=retry_after)
    fake_openai.push_text("ok")

    await make_llm(backoff_max=0.5).chat(QUESTION)

    assert sleeps == [expected]


async def test_backoff_grows_exponentially_with_jitter(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM, sleeps: list[float]
) -> None:
    fake_openai.push_error(503, times=3)
    fake_openai.push_text("ok")

    await make_llm(max_retries=3, backoff_base=0.1, backoff_max=0.3).chat(QUESTION)

    # Steps 0.1, 0.2, then capped at 0.3; each delay is between half a step and a step.
    assert len(sleeps) == 3
    for delay, step in zip(sleeps, (0.1, 0.2, 0.3), strict=True):
        assert step / 2 <= delay <= step


async def test_server_error_exhausts_retries(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push_error(500, times=10)

    with pytest.raises(LLMTransientError, match="HTTP 500") as caught:
        await make_llm(max_retries=2).chat(QUESTION)

    assert len(fake_openai.requests) == 3
    assert "3 attempts" in str(caught.value)


async def test_timeout_is_retried(fake_openai: FakeOpenAIServer, make_llm: MakeLLM) -> None:
    fake_openai.push(Reply(content="too late", delay=1.0))
    fake_openai.push_text("in time")

    response = await make_llm(timeout=0.2).chat(QUESTION)

    assert response.content == "in time"
    assert len(fake_openai.requests) == 2


async def test_dropped_connections_are_transient(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push(Reply(content="never sent", drop_after=0), times=5)

    with pytest.raises(LLMTransientError, match="connection error"):
        await make_llm(max_retries=1).chat(QUESTION)
    assert len(fake_openai.requests) == 2


async def test_context_overflow_is_not_retried(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push_error(
        400,
        message="This model's maximum context length is 8192 tokens. However, you requested 9000.",
        code="context_length_exceeded",
        times=3,
    )

    with pytest.raises(LLMContextOverflow) as caught:
        await make_llm().chat(QUESTION)

    assert caught.value.status_code == 400
    assert "maximum context length" in str(caught.value)
    assert len(fake_openai.requests) == 1


async def test_other_bad_request_is_a_plain_request_error(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push_error(400, message="Invalid value for 'tool_choice'.", times=3)

    with pytest.raises(LLMRequestError) as caught:
        await make_llm().chat(QUESTION)

    assert not isinstance(caught.value, LLMContextOverflow)
    assert caught.value.status_code == 400
    assert len(fake_openai.requests) == 1


async def test_unauthorized_is_not_retried_and_hides_the_key(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    # Real servers echo the key they rejected.
    fake_openai.push_error(401, message=f"Incorrect API key provided: {API_KEY}.", times=3)

    with pytest.raises(LLMRequestError) as caught:
        await make_llm().chat(QUESTION)

    assert caught.value.status_code == 401
    assert "HTTP 401" in str(caught.value)
    assert API_KEY not in str(caught.value)
    assert API_KEY not in "".join(traceback.format_exception(caught.value))
    assert len(fake_openai.requests) == 1


# -- streaming failures -------------------------------------------------------------------------


@pytest.mark.parametrize("after_chunks", [0, 1])  # 1: only the empty role chunk got through
async def test_stream_broken_before_any_delta_is_retried(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM, after_chunks: int
) -> None:
    fake_openai.push_stream_drop("lost answer", after_chunks=after_chunks)
    fake_openai.push_text(LONG_TEXT)

    deltas = await collect(make_llm().stream_chat(QUESTION))

    assert "".join(d.content for d in deltas) == LONG_TEXT
    assert len(fake_openai.requests) == 2


async def test_stream_rate_limited_before_start_is_retried(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push_error(429)
    fake_openai.push_text("streamed")

    deltas = await collect(make_llm().stream_chat(QUESTION))

    assert "".join(d.content for d in deltas) == "streamed"
    assert len(fake_openai.requests) == 2


async def test_stream_broken_after_deltas_raises_interrupted(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push_stream_drop(LONG_TEXT, after_chunks=4)  # role chunk + 3 text pieces
    fake_openai.push_text("a retry would wrongly start over")
    llm = make_llm()
    yielded: list[str] = []

    async def read_stream() -> None:
        async for delta in llm.stream_chat(QUESTION):
            yielded.append(delta.content)

    with pytest.raises(LLMStreamInterrupted) as caught:
        await read_stream()

    assert len(yielded) == 3
    assert caught.value.delivered == "".join(yielded)
    assert LONG_TEXT.startswith(caught.value.delivered)
    assert len(fake_openai.requests) == 1


async def test_stream_context_overflow_is_not_retried(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM
) -> None:
    fake_openai.push_error(400, message="context_length_exceeded", times=3)

    with pytest.raises(LLMContextOverflow):
        await collect(make_llm().stream_chat(QUESTION))
    assert len(fake_openai.requests) == 1


# -- logging ------------------------------------------------------------------------------------


async def test_api_key_never_appears_in_logs(
    fake_openai: FakeOpenAIServer, make_llm: MakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    llm = make_llm(max_retries=1)
    fake_openai.push_error(429, message=f"Slow down, {API_KEY}")
    fake_openai.push_text("ok")
    await llm.chat(QUESTION)
    fake_openai.push_error(500, message=f"Upstream rejected {API_KEY}", times=2)
    with pytest.raises(LLMTransientError):
        await llm.chat(QUESTION)
    fake_openai.push_stream_drop(LONG_TEXT, after_chunks=3)
    with pytest.raises(LLMStreamInterrupted):
        await collect(llm.stream_chat(QUESTION))

    ours = [r for r in caplog.records if r.name == openai_compat.__name__]
    assert len(ours) >= 3  # the retries and the interruption were logged...
    assert API_KEY not in caplog.text  # ...without the key, from us or the SDK
    assert "***" in caplog.text
    assert any(r.name.startswith("openai") for r in caplog.records)

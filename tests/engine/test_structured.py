"""structured_llm_call: native function call, then JSON mode, then plain text, then default."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from bot.engine import (
    LLMContextOverflow,
    LLMDeadlineExceeded,
    LLMRequestError,
    LLMResponse,
    LLMResponseError,
    LLMTransientError,
    Message,
    StructuredCallResult,
    StructuredOutputError,
    ToolCall,
    Usage,
    structured_llm_call,
)
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}
MESSAGES = [Message.system("You extract travel plans."), Message.user("3 days in Hangzhou")]
JSON_MODE = {"type": "json_object"}
NO_NATIVE = {"tool_call": False}
TEXT_ONLY = {"tool_call": False, "json_mode": False}


def text(content: str, usage: Usage | None = None) -> LLMResponse:
    return LLMResponse(content=content, usage=usage or Usage(10, 5, 15))


def native_answer(arguments: dict[str, Any], name: str = "plan") -> LLMResponse:
    return tool_calls_response(tool_call(name, arguments), usage=Usage(7, 3, 10))


async def call(llm: ScriptedLLM, **kwargs: Any) -> StructuredCallResult[Any]:
    kwargs.setdefault("function_name", "plan")
    return await structured_llm_call(llm, MESSAGES, SCHEMA, **kwargs)


def levels_of(llm: ScriptedLLM) -> list[str]:
    """What each recorded call was: native, json_mode or plain_text."""
    kinds = []
    for c in llm.calls:
        if c.tools:
            kinds.append("native")
        elif c.response_format == JSON_MODE:
            kinds.append("json_mode")
        else:
            kinds.append("plain_text")
    return kinds


# -- native ------------------------------------------------------------------------------


async def test_native_level_when_the_model_answers_the_forced_call() -> None:
    llm = ScriptedLLM([native_answer({"city": "Hangzhou", "days": 3})])
    result = await call(llm)
    assert isinstance(result, StructuredCallResult)
    assert result.level == "native"
    assert result.value == {"city": "Hangzhou", "days": 3}
    assert json.loads(result.raw) == {"city": "Hangzhou", "days": 3}
    assert result.usage == Usage(7, 3, 10)
    assert len(llm.calls) == 1

    request = llm.calls[0]
    assert request.tools is not None
    assert len(request.tools) == 1
    function = request.tools[0]
    assert function["type"] == "function"
    assert function["function"]["name"] == "plan"
    assert function["function"]["parameters"] == SCHEMA
    assert request.tool_choice == {"type": "function", "function": {"name": "plan"}}
    # Native mode sends the caller's messages as they are.
    assert list(request.messages) == MESSAGES


async def test_native_answer_in_content_is_accepted_when_the_server_ignores_tool_choice() -> None:
    llm = ScriptedLLM([text('```json\n{"city": "Suzhou"}\n```')])
    result = await call(llm)
    assert result.level == "native"
    assert result.value == {"city": "Suzhou"}
    assert len(llm.calls) == 1


async def test_native_without_tool_call_moves_to_json_mode() -> None:
    llm = ScriptedLLM([text("I think Hangzhou."), text('{"city": "Hangzhou"}')])
    result = await call(llm)
    assert result.level == "json_mode"
    assert result.value == {"city": "Hangzhou"}
    assert result.raw == '{"city": "Hangzhou"}'
    assert levels_of(llm) == ["native", "json_mode"]
    json_request = llm.calls[1]
    assert json_request.response_format == JSON_MODE
    assert not json_request.tools
    # The original conversation is kept, followed by an instruction carrying the schema.
    assert list(json_request.messages[: len(MESSAGES)]) == MESSAGES
    assert json.dumps(SCHEMA, ensure_ascii=False) in json_request.messages[-1].content


async def test_native_parse_error_moves_to_json_mode() -> None:
    broken = ToolCall("c1", "plan", {}, '{"city": "Hang', parse_error="unterminated string")
    llm = ScriptedLLM([LLMResponse(tool_calls=(broken,)), text('{"city": "Ningbo"}')])
    result = await call(llm)
    assert result.level == "json_mode"
    assert result.value == {"city": "Ningbo"}
    assert levels_of(llm) == ["native", "json_mode"]


async def test_native_call_to_another_function_is_not_accepted() -> None:
    llm = ScriptedLLM([native_answer({"city": "X"}, name="other"), text('{"city": "Y"}')])
    result = await call(llm)
    assert result.level == "json_mode"
    assert result.value == {"city": "Y"}


async def test_native_is_not_retried() -> None:
    llm = ScriptedLLM([text("no"), text('{"city": "A"}')])
    await call(llm)
    assert levels_of(llm).count("native") == 1


# -- json_mode ---------------------------------------------------------------------------


async def test_json_mode_gets_exactly_one_reformat_retry() -> None:
    llm = ScriptedLLM([text("hmm"), text("first bad reply"), text('{"city": "Xian"}')])
    result = await call(llm)
    assert result.level == "json_mode"
    assert result.value == {"city": "Xian"}
    assert levels_of(llm) == ["native", "json_mode", "json_mode"]
    retry = llm.calls[2].messages
    assert len(retry) == len(llm.calls[1].messages) + 2
    assert list(retry[: len(llm.calls[1].messages)]) == list(llm.calls[1].messages)
    assert retry[-2].role == "assistant"
    assert retry[-2].content == "first bad reply"
    assert retry[-1].role == "user"
    assert "could not be parsed" in retry[-1].content
    assert json.dumps(SCHEMA, ensure_ascii=False) in retry[-1].content


async def test_json_mode_twice_bad_moves_on_to_plain_text() -> None:
    llm = ScriptedLLM(
        [text("no"), text("bad 1"), text("bad 2"), text('Sure: {"city": "Lhasa", "days": 9}')]
    )
    result = await call(llm)
    assert levels_of(llm) == ["native", "json_mode", "json_mode", "plain_text"]
    assert result.level == "plain_text"
    assert result.value == {"city": "Lhasa", "days": 9}
    assert llm.calls[3].response_format is None
    assert not llm.calls[3].tools


async def test_plain_text_has_exactly_one_retry() -> None:
    llm = ScriptedLLM(
        ["bad 1", "still prose", 'never requested: {"city": "Dali"}'], abilities=TEXT_ONLY
    )
    with pytest.raises(StructuredOutputError):
        await call(llm)
    assert levels_of(llm) == ["plain_text", "plain_text"]
    assert llm.remaining == 1


async def test_plain_text_success_on_retry() -> None:
    llm = ScriptedLLM([text("prose only"), text('ok {"city": "Dali"}')], abilities=TEXT_ONLY)
    result = await call(llm)
    assert result.level == "plain_text"
    assert result.value == {"city": "Dali"}
    assert len(llm.calls) == 2
    assert llm.calls[1].messages[-2].content == "prose only"


# -- regex_fallback ----------------------------------------------------------------------


def city_regex(content: str) -> dict[str, Any] | None:
    match = re.search(r"city:\s*(\w+)", content)
    return {"city": match.group(1)} if match else None


async def test_regex_fallback_used_at_plain_text_level() -> None:
    llm = ScriptedLLM([text("city: Kunming")], abilities=TEXT_ONLY)
    result = await call(llm, regex_fallback=city_regex)
    assert result.level == "plain_text"
    assert result.value == {"city": "Kunming"}
    assert result.raw == "city: Kunming"


async def test_regex_fallback_is_not_used_at_json_mode_level() -> None:
    llm = ScriptedLLM(
        [text("city: One"), text("city: Two"), text("city: Three")], abilities=NO_NATIVE
    )
    seen: list[str] = []

    def fallback(content: str) -> dict[str, Any] | None:
        seen.append(content)
        return city_regex(content)

    result = await call(llm, regex_fallback=fallback)
    assert levels_of(llm) == ["json_mode", "json_mode", "plain_text"]
    assert result.level == "plain_text"
    assert result.value == {"city": "Three"}
    assert seen == ["city: Three"]


async def test_regex_fallback_not_used_when_json_was_found() -> None:
    called: list[str] = []

    def fallback(content: str) -> dict[str, Any] | None:
        called.append(content)
        return {"city": "WRONG"}

    llm = ScriptedLLM(['{"city": "Right"}'], abilities=TEXT_ONLY)
    result = await call(llm, regex_fallback=fallback)
    assert result.value == {"city": "Right"}
    assert called == []


async def test_raising_regex_fallback_is_just_no_result() -> None:
    def fallback(content: str) -> dict[str, Any] | None:
        raise RuntimeError("bad regex")

    llm = ScriptedLLM(["nothing", "nothing again"], abilities=TEXT_ONLY)
    result = await call(llm, regex_fallback=fallback, default_value={"city": "?"})
    assert result.level == "default"
    assert result.value == {"city": "?"}


# -- parse_fn ----------------------------------------------------------------------------


async def test_parse_fn_transforms_the_value() -> None:
    llm = ScriptedLLM([native_answer({"city": "hangzhou", "days": 3})])
    result = await call(llm, parse_fn=lambda d: (d["city"].title(), d["days"]))
    assert result.level == "native"
    assert result.value == ("Hangzhou", 3)


async def test_parse_fn_returning_none_moves_to_the_next_level() -> None:
    def needs_days(data: dict[str, Any]) -> int | None:
        return data.get("days")

    llm = ScriptedLLM(
        [
            native_answer({"city": "A"}),  # no days: rejected
            text('{"city": "B", "days": 4}'),
        ]
    )
    result = await call(llm, parse_fn=needs_days)
    assert result.level == "json_mode"
    assert result.value == 4
    assert levels_of(llm) == ["native", "json_mode"]


async def test_parse_fn_raising_moves_to_the_next_level_and_retries_there() -> None:
    def strict(data: dict[str, Any]) -> int:
        return int(data["days"])  # KeyError / ValueError on bad data

    llm = ScriptedLLM(
        [
            native_answer({"city": "A", "days": "many"}),
            text('{"city": "B"}'),
            text('{"city": "B", "days": "5"}'),
        ]
    )
    result = await call(llm, parse_fn=strict)
    assert result.level == "json_mode"
    assert result.value == 5
    assert levels_of(llm) == ["native", "json_mode", "json_mode"]


async def test_falsy_but_not_none_parse_result_is_accepted() -> None:
    llm = ScriptedLLM([native_answer({"city": "A", "days": 0})])
    result = await call(llm, parse_fn=lambda d: d["days"])
    assert result.level == "native"
    assert result.value == 0


# -- abilities ---------------------------------------------------------------------------


async def test_without_tool_call_ability_native_is_skipped() -> None:
    llm = ScriptedLLM(['{"city": "Xiamen"}'], abilities=NO_NATIVE)
    result = await call(llm)
    assert result.level == "json_mode"
    assert levels_of(llm) == ["json_mode"]
    assert llm.calls[0].tool_choice is None


async def test_without_tool_choice_ability_native_is_skipped() -> None:
    llm = ScriptedLLM(['{"city": "Xiamen"}'], abilities={"tool_choice": False})
    result = await call(llm)
    assert result.level == "json_mode"
    assert levels_of(llm) == ["json_mode"]


async def test_without_json_mode_ability_json_mode_is_skipped() -> None:
    llm = ScriptedLLM(["prose", 'Answer: {"city": "Harbin"}'], abilities={"json_mode": False})
    result = await call(llm)
    assert levels_of(llm) == ["native", "plain_text"]
    assert result.level == "plain_text"
    assert result.value == {"city": "Harbin"}
    assert all(c.response_format is None for c in llm.calls)


async def test_text_only_model_goes_straight_to_plain_text() -> None:
    llm = ScriptedLLM(['{"city": "Harbin"}'], abilities=TEXT_ONLY)
    result = await call(llm)
    assert result.level == "plain_text"
    assert levels_of(llm) == ["plain_text"]
    request = llm.calls[0]
    assert request.response_format is None
    assert not request.tools
    assert request.tool_choice is None


# -- everything fails --------------------------------------------------------------------


async def test_all_levels_fail_returns_default() -> None:
    llm = ScriptedLLM(["n1", "j1", "j2", "p1", "p2"])
    result = await call(llm, default_value="fallback")
    assert result.level == "default"
    assert result.value == "fallback"
    assert result.raw == "p2"
    assert levels_of(llm) == ["native", "json_mode", "json_mode", "plain_text", "plain_text"]


async def test_default_value_none_is_a_real_default() -> None:
    llm = ScriptedLLM(["x", "x", "x", "x", "x"])
    result = await call(llm, default_value=None)
    assert result.level == "default"
    assert result.value is None


async def test_all_levels_fail_without_default_raises() -> None:
    llm = ScriptedLLM(["n1", "j1", "j2", "p1", "the very last reply"])
    with pytest.raises(StructuredOutputError, match="plan") as info:
        await call(llm)
    assert "the very last reply" in str(info.value)
    assert isinstance(info.value, ValueError)


# -- usage and errors --------------------------------------------------------------------


async def test_usage_is_summed_across_every_call() -> None:
    llm = ScriptedLLM(
        [
            text("n", Usage(1, 2, 3)),
            text("j1", Usage(10, 20, 30)),
            text("j2", Usage(100, 200, 300)),
            text('{"city": "Z"}', Usage(1000, 2000, 3000)),
        ]
    )
    result = await call(llm)
    assert result.level == "plain_text"
    assert result.usage == Usage(1111, 2222, 3333)


async def test_usage_is_summed_when_falling_back_to_default() -> None:
    llm = ScriptedLLM([text("x", Usage(1, 1, 2)) for _ in range(5)])
    result = await call(llm, default_value=0)
    assert result.level == "default"
    assert result.usage == Usage(5, 5, 10)


# -- failed requests: not parse failures --------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        LLMTransientError("timed out, retries spent"),
        LLMDeadlineExceeded("no answer within the deadline", seconds=120),
        LLMRequestError("HTTP 401: bad key", status_code=401),
        LLMRequestError("HTTP 429", status_code=429),
        LLMContextOverflow("HTTP 400: maximum context length", status_code=400),
    ],
    ids=["transient", "deadline", "auth", "rate-limit", "context"],
)
async def test_a_failed_request_ends_the_call_without_walking_the_levels(error: Exception) -> None:
    llm = ScriptedLLM([error, text('{"city": "Qingdao"}')])
    result = await call(llm, default_value="dflt")
    assert result.level == "default"
    assert result.value == "dflt"
    assert levels_of(llm) == ["native"]  # one request: no other level, no retry


async def test_a_failed_request_without_default_raises_structured_output_error() -> None:
    down = LLMTransientError("down")
    llm = ScriptedLLM([down] * 3)
    with pytest.raises(StructuredOutputError) as raised:
        await call(llm)
    assert raised.value.__cause__ is down
    assert len(llm.calls) == 1


async def test_a_failed_request_at_json_mode_ends_the_call_too() -> None:
    llm = ScriptedLLM([LLMTransientError("down"), '{"city": "Wuhan"}'], abilities=NO_NATIVE)
    result = await call(llm, default_value=None)
    assert result.level == "default"
    assert levels_of(llm) == ["json_mode"]


@pytest.mark.parametrize("status", [400, 422])
async def test_a_refused_feature_moves_on_to_the_level_without_it(status: int) -> None:
    refused = LLMRequestError(f"HTTP {status}: tool_choice is not supported", status_code=status)
    json_refused = LLMRequestError(f"HTTP {status}: response_format", status_code=status)
    llm = ScriptedLLM([refused, json_refused, text('{"city": "Qingdao"}', Usage(4, 4, 8))])
    result = await call(llm)
    assert levels_of(llm) == ["native", "json_mode", "plain_text"]
    assert result.level == "plain_text"
    assert result.value == {"city": "Qingdao"}
    assert result.usage == Usage(4, 4, 8)


async def test_an_endpoint_saying_it_takes_no_tools_moves_on_to_json_mode() -> None:
    refused = LLMRequestError(
        "HTTP 500: tools param requires --jinja flag", status_code=500
    )  # llama.cpp's words
    llm = ScriptedLLM([refused, text('{"city": "Qingdao"}')])
    result = await call(llm)
    assert levels_of(llm) == ["native", "json_mode"]
    assert result.value == {"city": "Qingdao"}


async def test_a_refusal_at_plain_text_ends_the_call() -> None:
    llm = ScriptedLLM(
        [LLMRequestError("HTTP 400: bad", status_code=400), '{"city": "X"}'], abilities=TEXT_ONLY
    )
    result = await call(llm, default_value=None)
    assert result.level == "default"
    assert len(llm.calls) == 1


async def test_an_answer_that_is_not_a_completion_counts_as_unparsed() -> None:
    llm = ScriptedLLM(
        [LLMResponseError("not a completion"), '{"city": "Wuhan"}'], abilities=NO_NATIVE
    )
    result = await call(llm)
    assert levels_of(llm) == ["json_mode", "plain_text"]
    assert result.level == "plain_text"
    assert result.value == {"city": "Wuhan"}

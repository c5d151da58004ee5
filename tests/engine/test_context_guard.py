"""ContextGuard: token estimates, and compaction that keeps the transcript well-formed."""

from __future__ import annotations

import json

import pytest

from bot.engine import ContextGuard, LLMResponse, LLMTransientError, Message, Usage, estimate_tokens
from bot.engine.testing import ScriptedLLM, tool_call

SUMMARY_TEXT = "SUMMARY: found ticket T-1 and T-2; owner is amy; still need the due date."


# -- estimate_tokens ---------------------------------------------------------------------


def test_empty_text_is_zero_tokens() -> None:
    assert estimate_tokens("") == 0


def test_ascii_is_about_four_chars_a_token() -> None:
    assert 90 <= estimate_tokens("a" * 400) <= 110
    assert 240 <= estimate_tokens("The quick brown fox jumps over the lazy dog. " * 22) <= 260
    assert 1 <= estimate_tokens("a") <= 2


def test_cjk_is_about_one_token_a_char() -> None:
    assert 80 <= estimate_tokens("飞书机器人帮助团队处理日常事务" * 6 + "查询日历信息一下子") <= 120
    assert 80 <= estimate_tokens("中" * 100) <= 120


def test_mixed_text() -> None:
    mixed = "中" * 50 + "a" * 200  # ~50 + ~50
    assert 80 <= estimate_tokens(mixed) <= 120
    # CJK counts far more per character than ASCII.
    assert estimate_tokens("中" * 100) > 2 * estimate_tokens("a" * 100)


def test_estimate_grows_with_length() -> None:
    assert estimate_tokens("word " * 10) < estimate_tokens("word " * 100)


# -- tokens / needs_compaction / calibrate -----------------------------------------------


def test_budget_must_be_sensible() -> None:
    with pytest.raises(ValueError, match="budget"):
        ContextGuard(100)


def test_tokens_grow_as_messages_are_appended_to_the_same_list() -> None:
    guard = ContextGuard(10_000)
    messages = [Message.system("You are helpful."), Message.user("What is up?")]
    first = guard.tokens(messages)
    assert first > 0
    messages.append(Message.assistant("a" * 400))
    second = guard.tokens(messages)
    assert 95 <= second - first <= 115
    messages.append(Message.user("中" * 200))
    third = guard.tokens(messages)
    assert 190 <= third - second <= 215
    assert guard.tokens(messages) == third  # stable when nothing changed


def test_tokens_of_a_different_list_are_counted_afresh() -> None:
    guard = ContextGuard(10_000)
    big = [Message.user("x" * 4000)]
    small = [Message.user("x")]
    assert guard.tokens(big) > 900
    assert guard.tokens(small) < 20


def test_tool_call_arguments_count() -> None:
    guard = ContextGuard(10_000)
    call = tool_call("search", {"query": "q" * 800})
    with_args = guard.tokens([Message.assistant("", (call,))])
    without = ContextGuard(10_000).tokens([Message.assistant("")])
    assert with_args - without >= 190


def test_needs_compaction() -> None:
    guard = ContextGuard(1000)
    messages = [Message.system("s"), Message.user("x" * 2000)]  # ~500 tokens
    assert not guard.needs_compaction(messages)
    messages.append(Message.assistant("y" * 1600))  # ~+400 → ~900 > 850
    assert guard.needs_compaction(messages)


def test_calibrate_with_reported_prompt_tokens_changes_the_estimate() -> None:
    guard = ContextGuard(10_000)
    messages = [Message.system("s" * 400), Message.user("u" * 400)]
    estimated = guard.tokens(messages)
    guard.calibrate(messages, len(messages), estimated * 3)
    assert guard.tokens(messages) == estimated * 3
    # Later messages add to the calibrated figure.
    messages.append(Message.assistant("a" * 400))
    assert guard.tokens(messages) > estimated * 3


def test_calibrate_never_lowers_the_estimate() -> None:
    # Some proxies report made-up prompt tokens; underestimating is what overflows a window.
    guard = ContextGuard(1000)
    messages = [Message.system("s"), Message.user("x" * 3600)]  # ~905 estimated
    before = guard.tokens(messages)
    guard.calibrate(messages, len(messages), 10)
    assert guard.tokens(messages) >= before
    assert guard.needs_compaction(messages)


def test_calibration_applies_to_the_tracked_list_only() -> None:
    guard = ContextGuard(10_000)
    messages = [Message.user("x" * 400)]
    estimated = guard.tokens(messages)
    guard.calibrate([Message.user("x" * 400)], 1, estimated * 5)  # another list: ignored
    assert guard.tokens(messages) == estimated


def test_calibrate_ignores_zero_prompt_tokens() -> None:
    guard = ContextGuard(10_000)
    messages = [Message.user("x" * 400)]
    before = guard.tokens(messages)
    guard.calibrate(messages, 1, 0)
    assert guard.tokens(messages) == before


# -- a realistic transcript --------------------------------------------------------------


def group(call_id: str, name: str, arguments: dict, results: list[str]) -> list[Message]:
    """An assistant turn requesting len(results) calls, and their tool results."""
    calls = tuple(
        tool_call(name, {**arguments, "i": i}, id=f"{call_id}_{i}") for i in range(len(results))
    )
    return [
        Message.assistant(f"Calling {name}.", calls),
        *(Message.tool(c, r) for c, r in zip(calls, results, strict=True)),
    ]


def realistic_transcript() -> list[Message]:
    filler = "lorem ipsum dolor sit amet " * 45  # ~1200 chars, ~300 tokens
    return [
        Message.system("You are larkgate. Use tools."),
        Message.user(
            "Which tickets does amy own, and when are they due?", pinned=True, kind="query"
        ),
        *group("g1", "search_tickets", {"owner": "amy"}, ["T-1 T-2 " + filler, "page2 " + filler]),
        *group("g2", "get_ticket", {"id": "T-1"}, ["T-1 details " + filler]),
        Message.user("[USER INTERRUPT] also include T-9 please", pinned=True, kind="interrupt"),
        *group("g3", "get_ticket", {"id": "T-2"}, ["T-2 details " + filler, "T-2 links " + filler]),
        Message.user("[Self-check] reflect", kind="reflection"),
        *group("g4", "get_ticket", {"id": "T-9"}, ["T-9 details: due Friday"]),
        *group("g5", "calendar", {"who": "amy"}, ["amy is out Monday", "amy back Tuesday"]),
    ]


def assert_tool_messages_are_paired(messages: list[Message]) -> None:
    """Every tool message follows its assistant; every requested call has its result."""
    for index, message in enumerate(messages):
        if message.role != "tool":
            continue
        j = index - 1
        while j >= 0 and messages[j].role == "tool":
            j -= 1
        assert j >= 0, f"tool message {message.tool_call_id} has no assistant before it"
        owner = messages[j]
        assert owner.role == "assistant", f"{message.tool_call_id} follows a {owner.role}"
        ids = [c.id for c in owner.tool_calls]
        assert message.tool_call_id in ids
    for index, message in enumerate(messages):
        if message.role == "assistant" and message.tool_calls:
            following = []
            for m in messages[index + 1 :]:
                if m.role != "tool":
                    break
                following.append(m.tool_call_id)
            assert following == [c.id for c in message.tool_calls]


async def test_compact_a_realistic_transcript() -> None:
    messages = realistic_transcript()
    original = list(messages)
    guard = ContextGuard(2000)
    assert guard.needs_compaction(messages)
    llm = ScriptedLLM([LLMResponse(content=SUMMARY_TEXT, usage=Usage(300, 40, 340))])

    compaction = await guard.compact(messages, llm)

    assert compaction is not None
    result = compaction.messages
    assert messages == original  # the caller's list is untouched
    # System prompt first.
    assert result[0] == original[0]
    assert result[0].role == "system"
    # Every pinned message, verbatim and in the original relative order.
    pinned_before = [m for m in original if m.pinned]
    pinned_after = [m for m in result if m.pinned]
    assert pinned_after == pinned_before
    # Tool messages never orphaned, and calls never without results.
    assert_tool_messages_are_paired(result)
    # The most recent group is kept as it was, at the end.
    assert result[-3:] == original[-3:]
    # Kept non-summary messages stay in their original order.
    kept = [m for m in result if m in original]
    assert kept == [m for m in original if m in kept]
    # One summary message with the model's text.
    summaries = [m for m in result if SUMMARY_TEXT in m.content]
    assert len(summaries) == 1
    assert summaries[0].role != "tool"
    assert summaries[0] not in original
    # Exactly one LLM call, which saw the old work (not only the recent turns).
    assert len(llm.calls) == 1
    prompt = "\n".join(m.content for m in llm.calls[0].messages)
    assert "T-1 details" in prompt
    assert "search_tickets" in prompt
    # Accounting.
    assert compaction.tokens_before > compaction.tokens_after
    assert compaction.tokens_after <= guard.budget
    dropped = [m for m in original if m not in result]
    assert dropped
    assert all(not m.pinned and m.role != "system" for m in dropped)
    assert compaction.messages_summarized == len(dropped)
    assert compaction.summarized_by_model is True
    assert compaction.usage == Usage(300, 40, 340)
    assert not guard.needs_compaction(result)


async def test_compaction_that_keeps_several_recent_groups_keeps_them_whole() -> None:
    messages = realistic_transcript()
    llm = ScriptedLLM([SUMMARY_TEXT])
    compaction = await ContextGuard(2000, keep_recent=0.5).compact(messages, llm)
    assert compaction is not None
    assert_tool_messages_are_paired(compaction.messages)
    # The g4 group (small) fits into the recent part too.
    assert messages[-6:] == compaction.messages[-6:]


async def test_summarisation_failure_gives_a_mechanical_summary() -> None:
    messages = realistic_transcript()
    guard = ContextGuard(2000)
    llm = ScriptedLLM([LLMTransientError("summary model down")])
    compaction = await guard.compact(messages, llm)
    assert compaction is not None
    assert compaction.summarized_by_model is False
    assert compaction.tokens_after < compaction.tokens_before
    assert compaction.usage == Usage()
    assert len(llm.calls) == 1
    result = compaction.messages
    assert_tool_messages_are_paired(result)
    assert [m for m in result if m.pinned] == [m for m in messages if m.pinned]
    added = [m for m in result if m not in messages]
    assert len(added) == 1
    # The mechanical summary says what was removed and which tools ran meanwhile.
    assert "search_tickets" in added[0].content
    assert "get_ticket" in added[0].content


async def test_empty_summary_reply_also_gives_a_mechanical_summary() -> None:
    messages = realistic_transcript()
    llm = ScriptedLLM([LLMResponse(content="   ", usage=Usage(5, 0, 5))])
    compaction = await ContextGuard(2000).compact(messages, llm)
    assert compaction is not None
    assert compaction.summarized_by_model is False
    assert compaction.tokens_after < compaction.tokens_before
    assert "search_tickets" in "\n".join(m.content for m in compaction.messages)


async def test_compaction_in_json_mode_keeps_each_observation_after_its_assistant() -> None:
    filler = "data " * 300
    messages = [Message.system("json mode"), Message.user("q", pinned=True, kind="query")]
    for i in range(6):
        action = json.dumps({"type": "tool_call", "tool": "lookup", "arguments": {"i": i}})
        messages.append(Message.assistant(action))
        messages.append(
            Message(
                "user", f"Observation from lookup:\n{i} {filler}", name="lookup", kind="observation"
            )
        )
    compaction = await ContextGuard(1500).compact(messages, ScriptedLLM([SUMMARY_TEXT]))
    assert compaction is not None
    result = compaction.messages
    for index, message in enumerate(result):
        if message.kind == "observation":
            assert result[index - 1].role == "assistant"
            assert result[index - 1] in messages
            assert messages.index(result[index - 1]) == messages.index(message) - 1
    assert result[-2:] == messages[-2:]


# -- little or nothing to summarise ------------------------------------------------------


def only_one_group(result_text: str) -> list[Message]:
    return [
        Message.system("sys"),
        Message.user("question", pinned=True, kind="query"),
        *group("only", "read", {"p": 1}, [result_text]),
    ]


async def test_nothing_to_summarise_and_over_budget_is_trimmed_not_summarised() -> None:
    messages = only_one_group("z" * 20_000)
    guard = ContextGuard(1000)
    llm = ScriptedLLM([])
    compaction = await guard.compact(messages, llm)
    assert llm.calls == []  # nothing to summarise: no model call
    assert compaction is not None
    assert compaction.messages_summarized == 0
    assert compaction.tokens_after < compaction.tokens_before
    result = compaction.messages
    assert result[:2] == messages[:2]
    assert_tool_messages_are_paired(result)


async def test_nothing_to_summarise_within_budget_is_none_or_smaller() -> None:
    messages = only_one_group("y" * 3500)  # ~895 tokens: above 85 % of 1000, within 1000
    guard = ContextGuard(1000)
    assert guard.needs_compaction(messages)
    llm = ScriptedLLM([])
    compaction = await guard.compact(messages, llm)
    # Not a no-op "compaction" (the loop would count one and emit an event every turn).
    assert compaction is None or compaction.tokens_after < compaction.tokens_before
    assert llm.calls == []


async def test_huge_tool_result_in_the_tail_is_cut() -> None:
    huge = "HEAD-" + "x" * 40_000
    messages = [
        Message.system("sys"),
        Message.user("question", pinned=True, kind="query"),
        *group("old", "read", {"p": 1}, ["old result " * 50]),
        *group("new", "read", {"p": 2}, [huge]),
    ]
    guard = ContextGuard(2000)
    compaction = await guard.compact(messages, ScriptedLLM([SUMMARY_TEXT]))
    assert compaction is not None
    result = compaction.messages
    assert_tool_messages_are_paired(result)
    tool_message = result[-1]
    assert tool_message.role == "tool"
    assert tool_message.tool_call_id == messages[-1].tool_call_id
    assert tool_message.content.startswith("HEAD-")
    assert len(tool_message.content) < len(huge) // 4
    assert compaction.tokens_after < compaction.tokens_before // 4
    # Within a whisker of the budget (see the strict test below).
    assert compaction.tokens_after <= guard.budget * 1.05


async def test_cut_tool_result_fits_the_budget() -> None:
    messages = only_one_group("z" * 20_000)
    guard = ContextGuard(1000)
    compaction = await guard.compact(messages, ScriptedLLM([]))
    assert compaction is not None
    assert compaction.tokens_after <= guard.budget


async def test_pinned_messages_are_never_cut() -> None:
    huge_question = "Please read this log: " + "L" * 8_000
    messages = [
        Message.system("sys"),
        Message.user(huge_question, pinned=True, kind="query"),
        *group("g", "read", {"p": 1}, ["R" * 8_000]),
    ]
    compaction = await ContextGuard(1000).compact(messages, ScriptedLLM([]))
    assert compaction is not None
    result = compaction.messages
    assert result[1] == messages[1]  # verbatim, although it is the largest message
    assert result[-1].role == "tool"
    assert len(result[-1].content) < 8_000  # the unpinned tool result was cut instead
    assert_tool_messages_are_paired(result)


async def test_nothing_cuttable_returns_none() -> None:
    huge_question = "Please read this log: " + "L" * 20_000
    messages = [
        Message.system("sys"),
        Message.user(huge_question, pinned=True, kind="query"),
        *group("g", "read", {"p": 1}, ["short"]),
    ]
    llm = ScriptedLLM([])
    assert await ContextGuard(1000).compact(messages, llm) is None
    assert llm.calls == []

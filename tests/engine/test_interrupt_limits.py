"""Bounded interrupts: what one run takes in from its queue, and the cap on one message.

Pinned text survives compaction verbatim, so it is bounded where it is made: a run
reads at most ``max_messages`` interrupts and ``max_chars`` characters of them, each
message cut to the per-message cap (start and end kept, with a note of how much went),
and whatever it may not read stays queued, in order, to be handed back.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.engine import InterruptQueue, LLMResponse, ReActAgent
from bot.engine.interrupts import (
    CUT_NOTE,
    MIN_MESSAGE_CHARS,
    InterruptAllowance,
    InterruptLimits,
    cap_text,
)
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response

from engine.support import make_tool

# -- cap_text ----------------------------------------------------------------------------


def test_short_text_is_kept_as_it_is() -> None:
    assert cap_text("hello", 200) == "hello"
    assert cap_text("x" * 200, 200) == "x" * 200


def test_long_text_keeps_start_and_end_and_says_how_much_was_cut() -> None:
    text = "START " + "m" * 20_000 + " END?"
    capped = cap_text(text, 8_000)
    assert len(capped) <= 8_000
    assert capped.startswith("START ") and capped.endswith(" END?")
    kept = capped.replace(CUT_NOTE.format(cut=len(text) - 7_955), "")
    assert len(kept) == 7_955  # all but the room for the note
    assert f"{len(text) - 7_955:,} characters of this message cut" in capped


@given(st.text(min_size=0, max_size=3_000), st.integers(MIN_MESSAGE_CHARS, 2_000))
@settings(max_examples=200, deadline=None)
def test_capped_text_never_exceeds_the_limit(text: str, limit: int) -> None:
    capped = cap_text(text, limit)
    assert len(capped) <= limit
    assert capped == text or "characters of this message cut" in capped


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="max_messages"):
        InterruptLimits(max_messages=0)
    with pytest.raises(ValueError, match="character limits"):
        InterruptLimits(max_chars=50)
    # One message always fits a fresh run, whatever the two character limits are.
    assert InterruptLimits(max_chars=1_000, max_message_chars=8_000).message_cap == 1_000


# -- the allowance and the queue ---------------------------------------------------------


def test_the_allowance_counts_messages_and_capped_characters() -> None:
    allowance = InterruptAllowance(InterruptLimits(max_messages=3, max_chars=1_000))
    assert allowance.take("a" * 600) == "a" * 600
    assert allowance.take("b" * 500) is None  # 1,100 characters would be too many
    assert allowance.take("c" * 400) == "c" * 400
    assert allowance.take("d") is None  # 1,001
    assert (allowance.messages, allowance.chars) == (2, 1_000)


def test_one_long_message_fills_a_fresh_run_cut_to_the_message_cap() -> None:
    allowance = InterruptAllowance(InterruptLimits(max_chars=8_000, max_message_chars=8_000))
    shown = allowance.take("z" * 20_000)
    assert shown is not None and len(shown) <= 8_000
    assert "12," in shown and "characters of this message cut" in shown
    assert allowance.take("one more") is None


async def test_a_bound_run_reads_only_its_allowance_and_the_rest_stays_queued() -> None:
    queue = InterruptQueue()
    for i in range(300):
        queue.put_nowait(f"m{i} " + "x" * 20_000)
    task = asyncio.current_task()
    assert task is not None
    queue.bind(task, InterruptLimits(max_messages=10, max_chars=8_000))
    read = queue.drain()
    assert len(read) == 1 and read[0].startswith("m0 ") and len(read[0]) <= 8_000
    assert not queue.pending()  # the run may take no more
    assert queue.drain() == []
    queue.unbind(task)
    # Its owner gets every other message back, whole and in order.
    rest = queue.drain()
    assert [r.split()[0] for r in rest] == [f"m{i}" for i in range(1, 300)]
    assert all(len(r) == len(f"m{i} ") + 20_000 for i, r in enumerate(rest, 1))


async def test_many_short_interrupts_are_bounded_in_count() -> None:
    queue = InterruptQueue()
    task = asyncio.current_task()
    assert task is not None
    queue.bind(task, InterruptLimits(max_messages=10))
    for i in range(25):
        queue.put_nowait(f"note {i}")
    assert queue.drain() == [f"note {i}" for i in range(10)]
    assert queue.drain() == []
    queue.unbind(task)
    assert len(queue.drain()) == 15


@st.composite
def feeds(draw: st.DrawFn) -> tuple[InterruptLimits, list[list[str]]]:
    limits = InterruptLimits(
        max_messages=draw(st.integers(1, 12)),
        max_chars=draw(st.integers(MIN_MESSAGE_CHARS, 3_000)),
        max_message_chars=draw(st.integers(MIN_MESSAGE_CHARS, 3_000)),
    )
    sizes = st.integers(1, 4_000)
    batches = draw(st.lists(st.lists(sizes, max_size=8), max_size=8))
    texts = [
        [f"<{b}.{i}>" + "t" * size for i, size in enumerate(batch)]
        for b, batch in enumerate(batches)
    ]
    return limits, texts


@given(feeds())
@settings(max_examples=150, deadline=None)
def test_drained_pinned_text_stays_bounded_and_nothing_is_lost(
    feed: tuple[InterruptLimits, list[list[str]]],
) -> None:
    limits, batches = feed

    async def scenario() -> None:
        queue = InterruptQueue()
        task = asyncio.current_task()
        assert task is not None
        queue.bind(task, limits)
        drained: list[str] = []
        for batch in batches:  # messages arrive between the run's safe points
            for text in batch:
                queue.put_nowait(text)
            drained += queue.drain()
        queue.unbind(task)
        handed_back = queue.drain()

        assert len(drained) <= limits.max_messages
        assert all(len(text) <= limits.message_cap for text in drained)
        assert sum(len(text) for text in drained) <= limits.max_chars
        sent = [text for batch in batches for text in batch]
        # Nothing lost, nothing twice, order kept: what was read, then what is handed back.
        assert [t.split(">")[0] for t in drained + handed_back] == [t.split(">")[0] for t in sent]
        assert handed_back == sent[len(drained) :]

    asyncio.run(scenario())


# -- through the agent -------------------------------------------------------------------


async def test_the_merged_interrupt_message_of_a_flood_is_bounded() -> None:
    queue = InterruptQueue()

    async def flooded(x: int) -> str:
        for i in range(300):
            queue.put_nowait(f"flood {i} " + "w" * 20_000)
        return "done"

    llm = ScriptedLLM([tool_calls_response(tool_call("work", {"x": 1}, id="c1")), "ok", "ok"])
    agent = ReActAgent(llm, [make_tool("work", flooded)])
    result = await agent.run("go", interrupt_queue=queue)
    assert result.status == "completed"
    interrupts = [m for m in result.messages if m.kind == "interrupt"]
    assert len(interrupts) == 1
    assert len(interrupts[0].content) < 8_300  # header + one message cut to 8,000
    assert "flood 0 " in interrupts[0].content
    assert len(queue) == 299  # handed back to the owner, not dropped


async def test_a_long_question_is_pinned_cut_with_a_note() -> None:
    llm = ScriptedLLM([LLMResponse(content="fine")])
    question = "Q-START " + "p" * 20_000 + " what is wrong?"
    result = await ReActAgent(llm, []).run(question)
    (pinned,) = [m for m in llm.calls[0].messages if m.kind == "query"]
    assert pinned.pinned and len(pinned.content) <= 8_000
    assert pinned.content.startswith("Q-START ") and pinned.content.endswith("what is wrong?")
    assert "characters of this message cut" in pinned.content
    assert result.status == "completed"


async def test_the_limits_are_the_agents_to_choose() -> None:
    queue = InterruptQueue()

    async def chatty(x: int) -> str:
        for i in range(5):
            queue.put_nowait(f"extra {i}")
        return "done"

    llm = ScriptedLLM([tool_calls_response(tool_call("work", {"x": 1}, id="c1")), "ok", "ok"])
    agent = ReActAgent(
        llm, [make_tool("work", chatty)], interrupt_limits=InterruptLimits(max_messages=2)
    )
    result = await agent.run("go", interrupt_queue=queue)
    (interrupt,) = [m for m in result.messages if m.kind == "interrupt"]
    assert "extra 0" in interrupt.content and "extra 1" in interrupt.content
    assert "extra 2" not in interrupt.content
    assert queue.drain() == ["extra 2", "extra 3", "extra 4"]

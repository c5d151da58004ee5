"""The last check before a request is sent: a context over the budget is cut to fit it.

Compaction keeps pinned messages verbatim, so when pinned text alone is over the budget
only cutting it makes the request fit; ``ContextGuard.fit`` does that (oldest interrupts
first, then the question), and the loop calls it right before every ``chat()``.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.engine import CompactEvent, ContextGuard, InterruptQueue, Message, ReActAgent
from bot.engine.context_guard import FIT_MIN_KEPT_CHARS, message_tokens
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response

from engine.support import make_tool


def interrupt(text: str) -> Message:
    return Message.user(f"[USER INTERRUPT]\n{text}", pinned=True, kind="interrupt")


def assert_same_shape(before: list[Message], after: list[Message]) -> None:
    """Nothing removed or reordered; roles, kinds, pins and tool calls as they were."""
    assert [(m.role, m.kind, m.pinned, m.tool_calls, m.tool_call_id) for m in after] == [
        (m.role, m.kind, m.pinned, m.tool_calls, m.tool_call_id) for m in before
    ]


def test_a_context_within_the_budget_is_left_alone() -> None:
    guard = ContextGuard(1000)
    messages = [Message.system("sys"), Message.user("hello", pinned=True, kind="query")]
    assert guard.fit(messages) is None


def test_pinned_interrupts_over_the_budget_are_cut_oldest_first() -> None:
    messages = [
        Message.system("You are larkgate."),
        Message.user("Summarise the incident.", pinned=True, kind="query"),
        interrupt("OLDEST " + "a" * 4_000),
        interrupt("MIDDLE " + "b" * 4_000),
        interrupt("NEWEST please hurry"),
    ]
    guard = ContextGuard(1000)
    fitted = guard.fit(messages)
    assert fitted is not None
    result = fitted.messages
    assert guard.tokens(result) <= guard.budget
    assert fitted.tokens_before > guard.budget >= fitted.tokens_after
    assert_same_shape(messages, result)
    assert result[:2] == messages[:2]  # the system prompt and the short question stay
    assert result[-1] == messages[-1]  # the newest interrupt is what the user wants now
    oldest = result[2].content
    assert oldest.startswith("[USER INTERRUPT]\nOLDEST ")
    assert "characters cut to fit the context budget" in oldest
    assert len(oldest) < 1_000


def test_a_pinned_question_alone_over_the_budget_is_cut_too() -> None:
    question = "Please read this log: " + "L" * 20_000
    messages = [Message.system("sys"), Message.user(question, pinned=True, kind="query")]
    guard = ContextGuard(1000)
    fitted = guard.fit(messages)
    assert fitted is not None
    (system, pinned) = fitted.messages
    assert system == messages[0]
    assert pinned.pinned and pinned.content.startswith("Please read this log: ")
    assert "characters cut to fit the context budget" in pinned.content
    assert guard.tokens(fitted.messages) <= guard.budget


def test_cjk_text_is_cut_by_its_tokens_not_its_characters() -> None:
    # ~1 token a character: cutting as if it were English would leave it 4x too big.
    messages = [
        Message.system("sys"),
        Message.user("总结一下", pinned=True, kind="query"),
        interrupt("补充" * 1_500),
    ]
    guard = ContextGuard(1000)
    fitted = guard.fit(messages)
    assert fitted is not None
    assert guard.tokens(fitted.messages) <= guard.budget


def test_unpinned_results_are_cut_before_any_pinned_text() -> None:
    call = tool_call("read", {"p": 1}, id="c1")
    messages = [
        Message.system("sys"),
        Message.user("question", pinned=True, kind="query"),
        Message.assistant("", (call,)),
        Message.tool(call, "R" * 8_000),
        interrupt("also this"),
    ]
    guard = ContextGuard(1000)
    fitted = guard.fit(messages)
    assert fitted is not None
    assert [m for m in fitted.messages if m.pinned] == [m for m in messages if m.pinned]
    assert len(fitted.messages[3].content) < 8_000
    assert guard.tokens(fitted.messages) <= guard.budget


def test_what_the_model_reported_beyond_the_estimate_still_counts() -> None:
    messages = [
        Message.system("sys"),
        Message.user("q", pinned=True, kind="query"),
        interrupt("i" * 3_000),
    ]
    guard = ContextGuard(1000)
    estimated = guard.tokens(messages)
    guard.calibrate(messages, len(messages), estimated + 600)  # 600 tokens we did not see
    fitted = guard.fit(messages)
    assert fitted is not None
    assert guard.tokens(fitted.messages) <= guard.budget
    assert guard.tokens(fitted.messages) == sum(map(message_tokens, fitted.messages)) + 600


@st.composite
def contexts(draw: st.DrawFn) -> tuple[int, list[Message]]:
    budget = draw(st.integers(1_000, 6_000))
    alphabet = st.sampled_from(["a", "b ", "中", "é", "\n"])
    text = st.lists(alphabet, min_size=1, max_size=6_000).map("".join)
    messages = [
        Message.system("You are larkgate."),
        Message.user(draw(text), pinned=True, kind="query"),
    ]
    for index in range(draw(st.integers(0, 4))):
        call = tool_call("read", {"i": index}, id=f"c{index}")
        messages += [Message.assistant("", (call,)), Message.tool(call, draw(text))]
        if draw(st.booleans()):
            messages.append(interrupt(draw(text)))
    return budget, messages


@given(contexts())
@settings(max_examples=120, deadline=None)
def test_fit_always_brings_a_context_under_its_budget(case: tuple[int, list[Message]]) -> None:
    budget, messages = case
    guard = ContextGuard(budget)
    fitted = guard.fit(messages)
    result = messages if fitted is None else fitted.messages
    assert_same_shape(messages, result)
    # Floors: the system prompt and what is left of each message cut to the minimum.
    floor = message_tokens(messages[0]) + 40 * len(messages)
    if floor + FIT_MIN_KEPT_CHARS * len(messages) < budget * 0.7:
        assert guard.tokens(result) <= budget


# -- in the loop: right before every chat() ----------------------------------------------


def largest_request(llm: ScriptedLLM, budget: int) -> int:
    return max(ContextGuard(budget).tokens(list(call.messages)) for call in llm.calls)


async def test_a_pinned_question_over_the_budget_is_cut_before_it_is_sent() -> None:
    llm = ScriptedLLM(["the answer"])
    events: list[object] = []
    question = "Read this: " + "q" * 7_900  # under the pin cap, ~2,000 tokens
    agent = ReActAgent(llm, [], context_budget=1000)
    result = await agent.run(question, on_event=events.append)
    assert result.status == "completed"
    assert largest_request(llm, 1000) <= 1000
    assert any(isinstance(e, CompactEvent) for e in events)


async def test_tool_results_and_interrupts_of_the_same_iteration_are_counted() -> None:
    queue = InterruptQueue()

    async def big(x: int) -> str:
        queue.put_nowait("LATE " + "n" * 7_900)  # arrives while the tool runs
        return "RESULT " + "r" * 30_000

    first = tool_calls_response(tool_call("big", {"x": 1}, id="c1"))
    llm = ScriptedLLM([first, "SUMMARY of the big result", "done"])
    agent = ReActAgent(llm, [make_tool("big", big)], context_budget=2000)
    result = await agent.run("go", interrupt_queue=queue)
    assert result.status == "completed"
    loop_calls = [c for c in llm.calls if c.messages[0].content.startswith("You are larkgate")]
    assert len(loop_calls) == 2
    second = list(loop_calls[1].messages)
    assert ContextGuard(2000).tokens(second) <= 2000
    # Both arrived before that request: the result summarised, the interrupt pinned and cut.
    assert any("SUMMARY of the big result" in m.content for m in second)
    (late,) = [m for m in second if m.kind == "interrupt"]
    assert "LATE " in late.content and "characters cut to fit" in late.content

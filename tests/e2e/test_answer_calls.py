"""How many model calls an answer costs, and where the card's answer comes from.

The bot end to end (fake Feishu, fake OpenAI server, real SDKs). The model selects tools
when asked, calls the tools a question names one turn at a time, then answers with what
they said; ``model.calls`` counts what it was asked (the start-up probe is not counted:
the fake answers it apart, ``server.probes``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from bot.engine import Tool, tool_from_function

from e2e.harness import answer_of, running_bot, settings_for
from fakes.openai_server import Reply
from support.model_calls import is_synthesis, user_text

SELECTION_USAGE = {"prompt_tokens": 300, "completion_tokens": 6}
LOOP_USAGE = {"prompt_tokens": 120, "completion_tokens": 9}
SYNTHESIS_USAGE = {"prompt_tokens": 200, "completion_tokens": 11}
MENU_USAGE = {"prompt_tokens": 420, "completion_tokens": 7}


def lookups(n: int) -> list[Tool]:
    """``n`` read tools, ``lookup_00`` ... : more than 12 in all turn tool selection on."""

    def make(i: int) -> Tool:
        async def lookup(key: str) -> str:
            return f"value {i} of {key}"

        lookup.__doc__ = f"Look a key up in source number {i}."
        return tool_from_function(lookup, name=f"lookup_{i:02d}", side_effect="read")

    return [make(i) for i in range(n)]


@dataclass
class Model:
    """Selects the tools named in the question, calls them in turn, answers from them."""

    note: str = ""  # text written before each tool call, in the same reply
    calls: list[str] = field(default_factory=list)  # "select", "loop", "synthesis"

    def __call__(self, body: dict[str, Any]) -> Reply:
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and choice["function"]["name"] == "select_tools":
            self.calls.append("select")
            prompt = body["messages"][-1]["content"]
            question = prompt.split("User message: ", 1)[1].split("\n", 1)[0]
            wanted = re.findall(r"lookup_\d\d", question)
            return Reply(
                tool_calls=[("sel", "select_tools", {"tools": wanted})], usage=SELECTION_USAGE
            )
        if offered(body) == ["select_tools"]:  # the menu, in the answer's first call
            self.calls.append("menu")
            question = next(user_text(m) for m in body["messages"] if m["role"] == "user")
            wanted = re.findall(r"lookup_\d\d", question)
            if wanted:
                return Reply(
                    content=self.note or None,
                    tool_calls=[("sel", "select_tools", {"tools": wanted})],
                    usage=MENU_USAGE,
                )
            return Reply(content="The answer (no lookup needed).", usage=MENU_USAGE, chunk_size=3)
        if is_synthesis(body):
            self.calls.append("synthesis")
            return Reply(content="Synthesised answer.", usage=SYNTHESIS_USAGE)
        self.calls.append("loop")
        # A first turn: the first user message is the question.
        question = next(user_text(m) for m in body["messages"] if m["role"] == "user")
        wanted = re.findall(r"lookup_\d\d", question)
        done = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if len(done) < len(wanted):
            name = wanted[len(done)]
            return Reply(
                content=self.note or None,
                tool_calls=[(f"c{len(done)}", name, {"key": "k"})],
                usage=LOOP_USAGE,
            )
        found = "; ".join(done) or "no lookup needed"
        return Reply(content=f"The answer ({found}).", usage=LOOP_USAGE, chunk_size=3)


def footer_of(bot: Any, message_id: str) -> str:
    (message,) = bot.replies_to(message_id)
    return str(bot.feishu.cards[message.card_id].element("footer")["content"])


def offered(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or ()]


async def ask(tmp_path, feishu, llm_server, question: str, *, tools=(), model=None, **settings):
    model = model or Model()
    llm_server.handler = model
    config = settings_for(tmp_path, feishu, llm_server, **settings)
    async with running_bot(config, feishu, llm_server, tools=list(tools)) as bot:
        await bot.say("om_q", question)
        await bot.reply("om_q")
        await bot.settle()
        (message,) = bot.replies_to("om_q")
        return model, answer_of(message, feishu), footer_of(bot, "om_q")


# -- a plain question -------------------------------------------------------------------


async def test_a_plain_question_is_one_streamed_call(tmp_path, feishu, llm_server):
    model, answer, footer = await ask(tmp_path, feishu, llm_server, "What is the capital?")
    assert model.calls == ["loop"]
    (request,) = llm_server.requests
    assert request.body["stream"] is True
    assert 0 < len(offered(request.body)) <= 12  # the bot's own tools: no selection
    # The card's answer is that call's reply, as it streamed in; nothing wrote it again.
    assert answer == "The answer (no lookup needed)."
    assert footer.startswith("1 step · 129 tokens (120 prompt, 9 completion) · ")


async def test_over_twelve_tools_a_plain_question_is_one_call_with_the_menu(
    tmp_path, feishu, llm_server
):
    model, answer, footer = await ask(
        tmp_path, feishu, llm_server, "What is the capital?", tools=lookups(14)
    )
    assert model.calls == ["menu"]
    (request,) = (r.body for r in llm_server.requests)
    # One streamed call: the tools listed in the system prompt, select_tools offered.
    assert request["stream"] is True and "tool_choice" not in request
    system = request["messages"][0]["content"]
    assert "- lookup_13: Look a key up in source number 13." in system
    assert answer == "The answer (no lookup needed)."
    assert footer.startswith("1 step · 427 tokens (420 prompt, 7 completion) · ")


# -- questions needing tools ------------------------------------------------------------


async def test_a_question_needing_one_tool_is_three_calls(tmp_path, feishu, llm_server):
    model, answer, footer = await ask(
        tmp_path, feishu, llm_server, "What does lookup_03 say?", tools=lookups(14)
    )
    assert model.calls == ["menu", "loop", "loop"]
    menu, first, second = (r.body for r in llm_server.requests)
    assert offered(menu) == ["select_tools"]
    assert offered(first) == offered(second) == ["lookup_03"]
    # The choice is not a step: the next call does not hold it, nor the menu.
    assert all(m.get("tool_calls") is None for m in first["messages"])
    assert "lookup_13" not in first["messages"][0]["content"]
    assert answer == "The answer (value 3 of k)."
    assert footer.startswith("2 steps · 685 tokens (660 prompt, 25 completion) · ")


async def test_a_question_needing_three_tools(tmp_path, feishu, llm_server):
    model, answer, _ = await ask(
        tmp_path,
        feishu,
        llm_server,
        "Compare lookup_01, lookup_02 and lookup_05",
        tools=lookups(14),
        larkgate_mode="react",
    )
    # The menu, three tool turns, the answer the completion checklist asks to check
    # (not shown), the checked answer.
    assert model.calls == ["menu", "loop", "loop", "loop", "loop", "loop"]
    assert answer == "The answer (value 1 of k; value 2 of k; value 5 of k)."


async def test_a_note_before_a_tool_call_is_not_left_on_the_card(tmp_path, feishu, llm_server):
    model, answer, _ = await ask(
        tmp_path,
        feishu,
        llm_server,
        "What does lookup_03 say?",
        tools=lookups(14),
        model=Model(note="Let me look that up."),
    )
    assert model.calls == ["menu", "loop", "loop"]
    assert answer == "The answer (value 3 of k)."
    assert "Let me look that up." not in json.dumps(feishu.cards, default=str)[-2000:]


@pytest.mark.parametrize(
    ("choice", "offered_next"),
    [
        ({"tools": []}, []),  # no tool after all: the next call carries no schemas
        ({"tools": ["lookup_99", "nope"]}, "all"),  # only names not on the menu
        ({"tools": "lookup_03"}, "all"),  # not a list
        ({"tools": ["lookup_03", "lookup_04", "lookup_03"]}, ["lookup_03", "lookup_04"]),
    ],
    ids=["empty", "unknown", "not a list", "repeated"],
)
async def test_what_the_menu_choice_gives_the_run(
    tmp_path, feishu, llm_server, choice, offered_next
):
    bodies: list[dict[str, Any]] = []

    def model(body: dict[str, Any]) -> Reply:
        bodies.append(body)
        if offered(body) == ["select_tools"]:
            return Reply(tool_calls=[("sel", "select_tools", choice)])
        return Reply(content="answered")

    llm_server.handler = model
    config = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(config, feishu, llm_server, tools=lookups(14)) as bot:
        await bot.say("om_q", "what now?")
        await bot.reply("om_q")
        await bot.settle()
        assert answer_of(bot.replies_to("om_q")[0], feishu) == "answered"
    menu, after = bodies
    assert offered(menu) == ["select_tools"]
    names = offered(after)
    if offered_next == "all":
        assert len(names) > 14 and "select_tools" not in names
    else:
        assert names == offered_next


async def test_a_tool_called_from_the_menu_without_being_offered_runs_only_when_offered(
    tmp_path, feishu, llm_server
):
    """A model that calls a tool it read on the menu (not offered) does not run it: the
    run gets every tool, and the model calls it again where it is offered."""
    ran: list[str] = []

    async def lookup(key: str) -> str:
        ran.append(key)
        return "found"

    tool = tool_from_function(lookup, name="lookup_x", side_effect="read")

    def model(body: dict[str, Any]) -> Reply:
        if not any(m["role"] == "tool" for m in body["messages"]):
            return Reply(tool_calls=[("c1", "lookup_x", {"key": "k"})])
        return Reply(content="done")

    llm_server.handler = model
    config = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(config, feishu, llm_server, tools=[*lookups(14), tool]) as bot:
        await bot.say("om_q", "look it up")
        await bot.reply("om_q")
        await bot.settle()
        assert answer_of(bot.replies_to("om_q")[0], feishu) == "done"
    menu, offered_all, _ = (r.body for r in llm_server.requests)
    assert offered(menu) == ["select_tools"] and "lookup_x" in offered(offered_all)
    assert ran == ["k"]  # once, where it was offered


# -- LARKGATE_SYNTHESIS=always -----------------------------------------------------------


async def test_synthesis_always_writes_the_answer_with_one_call_more(tmp_path, feishu, llm_server):
    model, answer, footer = await ask(
        tmp_path, feishu, llm_server, "What is the capital?", larkgate_synthesis="always"
    )
    assert model.calls == ["loop", "synthesis"]
    loop, synthesis = (r.body for r in llm_server.requests)
    assert "stream" not in loop and synthesis["stream"] is True
    assert answer == "Synthesised answer."
    assert footer.startswith("1 step · 340 tokens (320 prompt, 20 completion) · ")


async def test_synthesis_always_keeps_the_separate_selection(tmp_path, feishu, llm_server):
    """Without a streamed first call there is no menu: selection is its own call."""
    model, answer, _ = await ask(
        tmp_path,
        feishu,
        llm_server,
        "What does lookup_03 say?",
        tools=lookups(14),
        larkgate_synthesis="always",
    )
    assert model.calls == ["select", "loop", "loop", "synthesis"]
    assert answer == "Synthesised answer."


# -- a model that does not answer -------------------------------------------------------


async def test_a_hung_model_is_reported_when_the_turn_deadline_passes(tmp_path, feishu, llm_server):
    llm_server.handler = lambda body: Reply(content="never in time", delay=30.0)
    config = settings_for(
        tmp_path,
        feishu,
        llm_server,
        llm_timeout_seconds=0.3,
        larkgate_turn_deadline_seconds=0.8,
    )
    async with running_bot(config, feishu, llm_server) as bot:
        await bot.say("om_q", "What is the capital?")
        await bot.reply("om_q", within=15)
        await bot.settle(within=15)
        (message,) = bot.replies_to("om_q")
        answer = answer_of(message, feishu)
    assert "did not answer within 0.8 seconds" in answer
    # Tried again only within the deadline (a retry's back-off may already outlast it on a
    # busy machine): not 4 attempts a call, times every level.
    assert 1 <= len(llm_server.requests) <= 4

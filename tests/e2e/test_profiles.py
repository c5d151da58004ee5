"""Agent profiles end to end (``bot/profiles.py``): larkgate.toml routes a group (or the
direct messages) to a profile, and that chat's runs get its instructions, only its tools,
its model, its mode and its approvers; a call of any other tool never runs, whatever the
model names, in native and JSON mode, in a plan's step and in a scheduled run.

The model is the fake OpenAI server, scripted by keywords in the question: ``WIPE`` calls
``delete_all``, ``LOOKUP`` calls ``lookup``, ``SHIP`` calls ``deploy``, in that order of
appearance; then it answers with what the tools said. Every tool records whether it ran.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.config import Settings, SettingsError
from bot.engine import (
    DAGAgent,
    ModelRegistry,
    OpenAICompatibleLLM,
    ReActAgent,
    Tool,
    ToolRegistry,
    tool_from_function,
)
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response
from bot.governance.profile_guard import ProfileGuard
from bot.profiles import Profile, Profiles
from bot.schedules import Schedule
from bot.store import RunStore
from bot.store.approvals import ApprovalStore
from bot.store.audit import AuditLog
from bot.turn_context import TurnContext

from e2e.harness import BOT_OPEN_ID, Bot, answering, running_bot, settings_for
from e2e.test_approvals import first_card, header, value_for
from e2e.test_schedules import Clock, headers
from engine.dag_support import PLANNER_MARK, STEP_MARK
from fakes.openai_server import FakeOpenAIServer, Reply
from support.cards import callback_values
from support.model_calls import is_synthesis, user_text
from support.plan_model import PlanModel, StepScript, plan_of
from support.schedules import daily_task

ADMIN = "ou_admin"
LEAD = "ou_lead"  # the ops profile's approver
USER = "ou_user"  # the sender of message_event's messages
MENTION = [("@_user_1", BOT_OPEN_ID, "larkgate")]
OPS_GROUP = "oc_ops"  # routed to ops (no mention needed there)
OTHER_GROUP = "oc_team"  # routed to no profile
QUICK_GROUP = "oc_quick"  # routed to quick (model "fast")
PLAN_GROUP = "oc_plan"  # routed to planner (mode "dag")
OPS_INSTRUCTIONS = "You are the operations desk."
HELPDESK_INSTRUCTIONS = "You are the helpdesk."
# The bot's own tools, offered to a run without a profile.
OWN_TOOLS = {
    "schedule_task", "list_scheduled_tasks", "cancel_scheduled_task", "ask_user", "remember",
    "forget",
}  # fmt: skip
OUR_TOOLS = {"lookup", "deploy", "delete_all"}

PROFILES = f"""
[models.fast]
model = "fake-small"

[profiles.ops]
instructions = "{OPS_INSTRUCTIONS}"
tools = ["lookup", "deploy"]
model = "ops-model"
approvers = ["{LEAD}"]

[profiles.helpdesk]
instructions = "{HELPDESK_INSTRUCTIONS}"
tools = ["lookup"]

[profiles.quick]
model = "fast"

[profiles.planner]
tools = ["lookup"]
mode = "dag"

[profiles.auditor]
read_only = true

[groups."{OPS_GROUP}"]
profile = "ops"
require_mention = false

[groups."{QUICK_GROUP}"]
profile = "quick"
require_mention = false

[groups."{PLAN_GROUP}"]
profile = "planner"
require_mention = false
"""
DM_ROUTE = '\n[dm]\nprofile = "helpdesk"\n'


class Tools:
    """``lookup`` (a read), ``deploy`` and ``delete_all`` (writes): each records its runs."""

    def __init__(self) -> None:
        self.looked_up: list[str] = []
        self.deployed: list[str] = []
        self.deleted: list[str] = []

    def all(self) -> list[Tool]:
        async def lookup(service: str) -> str:
            """Health of a service."""
            self.looked_up.append(service)
            return f"{service}: healthy"

        async def deploy(service: str) -> str:
            """Deploy a service to production."""
            self.deployed.append(service)
            return f"{service} deployed"

        async def delete_all(what: str) -> str:
            """Delete everything there is."""
            self.deleted.append(what)
            return f"{what} deleted"

        return [
            tool_from_function(lookup, side_effect="read"),
            tool_from_function(deploy, side_effect="write"),
            tool_from_function(delete_all, side_effect="write"),
        ]

    @property
    def ran(self) -> list[str]:
        return [
            *(f"lookup {s}" for s in self.looked_up),
            *(f"deploy {s}" for s in self.deployed),
            *(f"delete_all {w}" for w in self.deleted),
        ]


VERBS: dict[str, tuple[str, dict[str, Any]]] = {
    "WIPE": ("delete_all", {"what": "everything"}),
    "LOOKUP": ("lookup", {"service": "api"}),
    "SHIP": ("deploy", {"service": "api"}),
}
OBSERVATION = "Observation from "


def _is_observation(message: dict[str, Any]) -> bool:
    return message["role"] == "tool" or (
        message["role"] == "user" and user_text(message).startswith(OBSERVATION)
    )


def pending(messages: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """The run's question (the last user message that is no tool result) and the tool
    results it got since, in order (native: tool messages; JSON: observations)."""
    start = max(i for i, m in enumerate(messages) if m["role"] == "user" and not _is_observation(m))
    return user_text(messages[start]), [
        user_text(m) for m in messages[start + 1 :] if _is_observation(m)
    ]


def attacker(*, json_mode: bool = False):
    """A model that calls the tools the question's keywords name, one a turn, whether it
    was offered them or not; then answers with what they said."""

    def handler(body: dict[str, Any]) -> Reply:
        if is_synthesis(body):
            text = "Result: " + user_text(body["messages"][-1])
            return Reply(content=text, chunk_size=max(4, len(text) // 50))
        question, results = pending(body["messages"])
        calls = [VERBS[word] for word in re.findall(r"\b[A-Z]{4,}\b", question) if word in VERBS]
        if len(results) < len(calls):
            name, arguments = calls[len(results)]
            if json_mode:
                action = {"type": "tool_call", "tool": name, "arguments": arguments}
                return Reply(content=json.dumps(action))
            return Reply(tool_calls=[(f"c{len(results)}", name, arguments)])
        answer = "Result: " + " | ".join(results) if results else f"Answer to: {question}"
        if json_mode:
            return Reply(content=json.dumps({"type": "final_answer", "answer": answer}))
        return Reply(content=answer)

    return handler


def config(tmp_path: Path, *extra: str) -> Path:
    path = tmp_path / "larkgate.toml"
    path.write_text(PROFILES + "".join(extra), encoding="utf-8")
    return path


def start(
    tmp_path,
    feishu,
    llm_server,
    tools: Tools,
    *extra: str,
    clock: Callable[[], float] = time.time,
    **overrides: Any,
):
    """A bot with the profiles above (and ``extra`` TOML), an admin, the three tools; the
    model is the attacker unless the test scripted another."""
    if llm_server.handler is answering:
        llm_server.handler = attacker()
    settings = settings_of(tmp_path, feishu, llm_server, *extra, **overrides)
    return running_bot(settings, feishu, llm_server, tools=tools.all(), clock=clock)


def settings_of(tmp_path, feishu, llm_server, *extra: str, **overrides: Any) -> Settings:
    values = {"larkgate_admins": ADMIN, "larkgate_config": config(tmp_path, *extra), **overrides}
    return settings_for(tmp_path, feishu, llm_server, **values)


def in_group(chat_id: str) -> dict[str, Any]:
    if chat_id == OTHER_GROUP:
        return {"chat_type": "group", "chat_id": chat_id, "mentions": MENTION}
    return {"chat_type": "group", "chat_id": chat_id}


async def ask(bot: Bot, message_id: str, text: str, chat_id: str | None = None) -> str:
    """Send ``text`` (in the group ``chat_id``, else a DM), wait for the finished answer
    and for the bot to be idle; the requests the model got are in ``llm_server.requests``."""
    bot.llm_server.requests.clear()
    if chat_id is None:
        await bot.say(message_id, text)
    else:
        mention = "@_user_1 " if chat_id == OTHER_GROUP else ""
        await bot.say(message_id, mention + text, **in_group(chat_id))
    answer = await bot.reply(message_id)
    await bot.settle()
    return answer


def loop_calls(llm_server: FakeOpenAIServer) -> list[dict[str, Any]]:
    return [r.body for r in llm_server.requests if not is_synthesis(r.body)]


def offered(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or []}


def system(body: dict[str, Any]) -> str:
    (first,) = [m for m in body["messages"][:1] if m["role"] == "system"]
    return user_text(first)


def tool_results(body: dict[str, Any]) -> list[str]:
    return [user_text(m) for m in body["messages"] if _is_observation(m)]


def approval_cards_sent(bot: Bot) -> list[Any]:
    return [
        m
        for m in bot.feishu.sent
        if any("approval_id" in v for v in callback_values(m.content))
        or "Approval" in json.dumps(m.content.get("header", ""))
    ]


def refused_result(result: str, tool: str) -> bool:
    """A tool result that says ``tool`` did not run: through the bot the model is told
    "Error: unknown tool 'delete_all'. Available tools: lookup, deploy." (the run's tools
    are the profile's, so the executor knows no other); the profile guard's own refusal
    ("... it did not run") is what a call of a tool the run does have gets."""
    refused = f"unknown tool {tool!r}" in result or "did not run" in result
    return refused and "deleted" not in result


# 1. What each chat's model is told and offered ---------------------------------------


async def test_a_routed_group_gets_its_instructions_and_only_its_tools(
    tmp_path, feishu, llm_server
):
    tools = Tools()
    async with start(tmp_path, feishu, llm_server, tools, DM_ROUTE) as bot:
        await ask(bot, "om_ops", "is the api up? LOOKUP", OPS_GROUP)
        ops = loop_calls(llm_server)
        assert len(ops) == 2  # the lookup, then the answer
        for body in ops:
            assert OPS_INSTRUCTIONS in system(body)
            assert offered(body) == {"lookup", "deploy"}
        assert tools.looked_up == ["api"]

        await ask(bot, "om_team", "is the api up? LOOKUP", OTHER_GROUP)
        team = loop_calls(llm_server)
        assert team and all(offered(body) == OUR_TOOLS | OWN_TOOLS for body in team)
        assert not any(OPS_INSTRUCTIONS in system(body) for body in team)
        assert not any(HELPDESK_INSTRUCTIONS in system(body) for body in team)

        # [dm] profile = "helpdesk": every direct message gets that profile.
        await ask(bot, "om_dm", "is the api up? LOOKUP")
        dm = loop_calls(llm_server)
        assert dm and all(offered(body) == {"lookup"} for body in dm)
        assert all(HELPDESK_INSTRUCTIONS in system(body) for body in dm)
        assert not any(OPS_INSTRUCTIONS in system(body) for body in dm)
        assert tools.looked_up == ["api"] * 3


async def test_without_a_dm_route_direct_messages_get_the_default_agent(
    tmp_path, feishu, llm_server
):
    tools = Tools()
    async with start(tmp_path, feishu, llm_server, tools) as bot:
        await ask(bot, "om_dm", "is the api up?")
        (body,) = loop_calls(llm_server)
        assert offered(body) == OUR_TOOLS | OWN_TOOLS
        assert OPS_INSTRUCTIONS not in system(body)
        assert HELPDESK_INSTRUCTIONS not in system(body)
        # The routed group still gets its profile.
        await ask(bot, "om_ops", "is the api up?", OPS_GROUP)
        (body,) = loop_calls(llm_server)
        assert offered(body) == {"lookup", "deploy"} and OPS_INSTRUCTIONS in system(body)


# 2., 3. A model that names a tool its chat's profile does not have --------------------


async def test_a_native_call_of_a_tool_outside_the_profile_never_runs(tmp_path, feishu, llm_server):
    tools = Tools()
    async with start(tmp_path, feishu, llm_server, tools) as bot:
        await ask(bot, "om_1", "WIPE the database", OPS_GROUP)
        first, after = loop_calls(llm_server)
        assert "delete_all" not in offered(first)  # named anyway, below
        (result,) = tool_results(after)
        assert refused_result(result, "delete_all"), result
        assert approval_cards_sent(bot) == []
        # The same call in a group without a profile asks for an approval (a write): the
        # profile, not the approval rule, kept it from running above.
        await bot.say("om_2", "@_user_1 WIPE the database", **in_group(OTHER_GROUP))
        await bot.wait_for(lambda: bool(approval_cards_sent(bot)))
    assert tools.deleted == []


async def test_a_json_mode_call_of_a_tool_outside_the_profile_never_runs(
    tmp_path, feishu, llm_server
):
    llm_server.handler = attacker(json_mode=True)
    tools = Tools()
    async with start(tmp_path, feishu, llm_server, tools, llm_tool_calls="json") as bot:
        answer = await ask(bot, "om_1", "WIPE the database, then LOOKUP api", OPS_GROUP)
        first, second, third = loop_calls(llm_server)
        for body in (first, second, third):
            assert "tools" not in body  # JSON mode: the tools are told in the prompt
            prompt = system(body)
            assert set(re.findall(r"^### (\w+)$", prompt, re.M)) == {"lookup", "deploy"}
            assert "delete_all" not in prompt and prompt.endswith(OPS_INSTRUCTIONS)
        (result,) = tool_results(second)
        assert refused_result(result, "delete_all"), result
        assert tool_results(third)[1].endswith("api: healthy")
        assert "api: healthy" in answer
        assert approval_cards_sent(bot) == []
    assert tools.deleted == [] and tools.looked_up == ["api"]


# 4. At the mechanism: the guard itself, with delete_all in the run's registry -----------


def turn(chat_id: str, profile: Profile | None, chat_type: str = "group") -> TurnContext:
    return TurnContext(
        run_id=uuid.uuid4().hex,
        conversation_id=None,
        scope_key=f"{chat_id}:chat",
        message_id=f"om_{uuid.uuid4().hex[:8]}",
        chat_id=chat_id,
        chat_type=chat_type,
        sender_open_id=USER,
        thread_id="",
        generation=0,
        profile=profile,
    )


def profiles_in(tmp_path, feishu, llm_server) -> Profiles:
    """The profiles as the bot loads them from the larkgate.toml it runs with."""
    path = tmp_path / "larkgate.toml"
    return settings_for(tmp_path, feishu, llm_server, larkgate_config=path).profiles()


# delete_all and deploy need no approval here, so that what stops them is the profile.
NO_APPROVALS = '\n[approvals.tools]\ndelete_all = "never"\ndeploy = "never"\n'


async def test_the_profile_guard_refuses_a_call_the_registry_has(tmp_path, feishu, llm_server):
    tools = Tools()
    async with start(tmp_path, feishu, llm_server, tools, NO_APPROVALS) as bot:
        hooks = bot.services.governance.hooks
        assert isinstance(hooks[0], ProfileGuard)  # first: before anyone is asked anything
        profiles = profiles_in(tmp_path, feishu, llm_server)
        ops = profiles.for_chat(OPS_GROUP, "group")
        auditor = profiles.profiles["auditor"]
        assert ops is not None and ops.tools == ("lookup", "deploy")
        registry = ToolRegistry(tools.all())  # delete_all is in it: only the guard stops it

        async def run(profile: Profile | None, call: str, arguments: dict[str, Any]):
            llm = ScriptedLLM([tool_calls_response(tool_call(call, arguments)), "done"])
            agent = ReActAgent(llm, registry, hooks=hooks)
            result = await agent.run("go", deps=turn(OPS_GROUP, profile))
            (step,) = result.steps
            return step

        step = await run(ops, "delete_all", {"what": "everything"})
        assert step.status == "blocked" and tools.deleted == []
        assert step.error == ops.refusal("delete_all")
        assert "not one of the tools of this chat's agent (ops)" in step.observation
        assert "did not run" in step.observation

        step = await run(auditor, "deploy", {"service": "api"})
        assert step.status == "blocked" and tools.deployed == []
        assert "read-only" in step.observation and "(auditor)" in step.observation
        step = await run(auditor, "lookup", {"service": "api"})  # a read runs there
        assert step.status == "ok" and tools.looked_up == ["api"]

        step = await run(None, "delete_all", {"what": "everything"})  # no profile: it runs
        assert step.status == "ok" and tools.deleted == ["everything"]
        assert approval_cards_sent(bot) == []


async def test_the_profile_guard_refuses_a_plan_step_the_registry_has(tmp_path, feishu, llm_server):
    tools = Tools()
    plan = plan_of(("s1", "Wipe everything", ()), ("s2", "Check api", ()))
    steps = {
        "Wipe everything": StepScript.calling(("delete_all", {"what": "everything"})),
        "Check api": StepScript.calling(("lookup", {"service": "api"})),
    }
    async with start(tmp_path, feishu, llm_server, tools, NO_APPROVALS) as bot:
        hooks = bot.services.governance.hooks
        ops = profiles_in(tmp_path, feishu, llm_server).for_chat(OPS_GROUP, "group")
        registry = ToolRegistry(tools.all())
        llm = OpenAICompatibleLLM(llm_server.base_url, "sk-e2e-not-secret", "fake-model")
        try:
            for profile, deleted in ((ops, []), (None, ["everything"])):
                llm_server.handler = PlanModel(plans=[plan], steps=steps)
                llm_server.requests.clear()
                agent = DAGAgent(ModelRegistry(llm), registry, hooks=hooks)
                result = await agent.run("wipe and check", deps=turn(OPS_GROUP, profile))
                assert result.status == "completed"
                assert tools.deleted == deleted
                results = [r for body in loop_calls(llm_server) for r in tool_results(body)]
                refused = [r for r in results if "not one of the tools" in r]
                assert len(refused) == (1 if profile else 0), results
        finally:
            await llm.aclose()
        assert tools.looked_up == ["api", "api"]


async def test_a_plan_in_a_profiles_chat_cannot_run_a_tool_outside_it(tmp_path, feishu, llm_server):
    """Through the bot: the profile's mode "dag" plans, and /plan forces a plan in the ops
    group; a step that names delete_all never runs either way."""
    tools = Tools()
    plan = plan_of(("s1", "Wipe everything", ()), ("s2", "Check api", ()))
    steps = {
        "Wipe everything": StepScript.calling(("delete_all", {"what": "everything"})),
        "Check api": StepScript.calling(("lookup", {"service": "api"})),
    }
    model = PlanModel(plans=[plan], steps=steps)
    llm_server.handler = model
    async with start(tmp_path, feishu, llm_server, tools) as bot:
        for message_id, question, chat, allowed in (
            ("om_1", "wipe everything and check the api", PLAN_GROUP, {"lookup"}),
            ("om_2", "/plan wipe everything and check the api", OPS_GROUP, {"lookup", "deploy"}),
        ):
            model.seen.clear()
            await ask(bot, message_id, question, chat)
            assert model.seen[0] == "plan"  # the profile's mode; /plan in the ops group
            # The planner is shown the profile's tools only, and so is each step.
            (planner,) = [b for b in loop_calls(llm_server) if PLANNER_MARK in json.dumps(b)]
            assert set(re.findall(r"\b(lookup|deploy|delete_all)\b", json.dumps(planner))) == (
                allowed
            )
            stepped = [b for b in loop_calls(llm_server) if STEP_MARK in json.dumps(b)]
            assert stepped and all(offered(b) == allowed for b in stepped)
            results = [r for body in stepped for r in tool_results(body)]
            assert any(refused_result(r, "delete_all") for r in results), results
            assert "api: healthy" in results
        assert approval_cards_sent(bot) == []
    assert tools.deleted == [] and tools.looked_up == ["api", "api"]


# 5. A scheduled run in a profile's group ----------------------------------------------


async def test_a_scheduled_run_in_a_profiles_group_keeps_to_its_tools(tmp_path, feishu, llm_server):
    tools = Tools()
    clock = Clock(time.time())
    feishu.workspace.add_chat(OPS_GROUP, "Ops", members={USER})
    async with start(tmp_path, feishu, llm_server, tools, clock=clock) as bot:
        schedule = Schedule.stored("cron", "0 * * * *", "UTC")
        await daily_task(
            bot.services.schedules,
            creator=USER,
            chat_id=OPS_GROUP,
            prompt="WIPE the database, then LOOKUP api",
            name="Nightly",
            expression="0 * * * *",
            next_run_at=schedule.next_timestamp_after(clock.now),
        )
        (task,) = await bot.services.schedules.list(creator=USER)
        llm_server.requests.clear()
        clock.now = task.next_run_at + 1
        bot.services.scheduled_runs.wake()
        await bot.wait_for(lambda: bool(headers(bot)))
        (fired,) = headers(bot)
        assert fired.chat_id == OPS_GROUP
        answer = await bot.reply(fired.message_id)
        await bot.settle()
        first, second, third = loop_calls(llm_server)
        assert all(offered(b) == {"lookup", "deploy"} for b in (first, second, third))
        assert OPS_INSTRUCTIONS in system(first)
        (refused,) = tool_results(second)
        assert refused_result(refused, "delete_all"), refused
        assert tool_results(third)[1] == "api: healthy"
        assert "api: healthy" in answer
        assert approval_cards_sent(bot) == []
    assert tools.deleted == [] and tools.looked_up == ["api"]


# 6. A profile's approvers ---------------------------------------------------------------


async def test_a_profiles_approvers_decide_its_writes(tmp_path, feishu, llm_server):
    tools = Tools()
    async with start(tmp_path, feishu, llm_server, tools) as bot:
        await bot.say("om_1", "SHIP the api", **in_group(OPS_GROUP))
        card = await first_card(bot, "om_1")
        text = json.dumps(card.content, ensure_ascii=False)
        assert "deploy" in text and f"<at id={LEAD}></at>" in text
        assert f"<at id={ADMIN}></at>" not in text  # the org's approver is not this one's
        assert "**Agent** ops (this chat's profile)" in text
        approval_id = value_for(card, "approve")["approval_id"]
        record = await ApprovalStore(bot.services.database).get(approval_id)
        assert record is not None and record.approvers == (LEAD,) and record.profile == "ops"

        for somebody in (ADMIN, USER):
            refused = await bot.click(
                value_for(card, "approve"), by=somebody, card_message_id=card.message_id,
                chat_id=OPS_GROUP,
            )  # fmt: skip
            assert refused["toast"]["type"] == "error" and "card" not in refused
        record = await ApprovalStore(bot.services.database).get(approval_id)
        assert record is not None and record.state == "pending" and tools.deployed == []

        approved = await bot.click(
            value_for(card, "approve"), by=LEAD, card_message_id=card.message_id,
            chat_id=OPS_GROUP,
        )  # fmt: skip
        assert approved["toast"]["type"] == "success"
        assert header(approved["card"]["data"]) == "Approved"
        answer = await bot.reply("om_1")
        await bot.settle()
        assert "api deployed" in answer and tools.deployed == ["api"]
        (decided,) = await AuditLog(bot.services.database).recent(action="approval.")
        assert (decided.action, decided.actor) == ("approval.approved", LEAD)
        assert decided.detail["profile"] == "ops"

        # A group without a profile: the approver rule's approvers (the admin) decide.
        await bot.say("om_2", "@_user_1 SHIP the api", **in_group(OTHER_GROUP))
        card = await first_card(bot, "om_2")
        text = json.dumps(card.content, ensure_ascii=False)
        assert f"<at id={ADMIN}></at>" in text and f"<at id={LEAD}></at>" not in text
        assert "**Agent**" not in text
        refused = await bot.click(
            value_for(card, "approve"), by=LEAD, card_message_id=card.message_id,
            chat_id=OTHER_GROUP,
        )  # fmt: skip
        assert refused["toast"]["type"] == "error"
        denied = await bot.click(
            value_for(card, "deny"), by=ADMIN, card_message_id=card.message_id,
            chat_id=OTHER_GROUP,
        )  # fmt: skip
        assert denied["toast"]["type"] == "success"
        await bot.reply("om_2")
        await bot.settle()
    assert tools.deployed == ["api"]


# 7. A profile's model -------------------------------------------------------------------


async def test_a_profiles_model_answers_its_chats(tmp_path, feishu, llm_server):
    tools = Tools()
    async with start(tmp_path, feishu, llm_server, tools) as bot:
        models = {}
        for chat, question in (
            (OPS_GROUP, "LOOKUP api"),
            (QUICK_GROUP, "LOOKUP api"),
            (OTHER_GROUP, "LOOKUP api"),
            (None, "LOOKUP api"),
        ):
            await ask(bot, f"om_{chat}", question, chat)
            calls = loop_calls(llm_server)
            assert len(calls) == 2
            models[chat] = {body["model"] for body in calls}
        runs = await RunStore(bot.services.database).recent()
        # Each run records the profile it used (None: the default agent).
        assert [(run.profile, run.model) for run in reversed(runs)] == [
            ("ops", "ops-model"),
            ("quick", "fake-small"),
            (None, "fake-model"),
            (None, "fake-model"),
        ]
    assert models == {
        OPS_GROUP: {"ops-model"},  # a model name of its own, on LLM_BASE_URL
        QUICK_GROUP: {"fake-small"},  # "fast": the [models.fast] table's model
        OTHER_GROUP: {"fake-model"},
        None: {"fake-model"},  # no [dm] route here
    }
    assert tools.looked_up == ["api"] * 4


# 8. The admin card --------------------------------------------------------------------


async def test_the_admin_card_lists_the_profiles_and_where_each_is_used(
    tmp_path, feishu, llm_server
):
    tools = Tools()
    async with start(tmp_path, feishu, llm_server, tools, DM_ROUTE) as bot:
        await bot.say("om_a1", "/admin", sender_open_id=ADMIN)
        await bot.wait_for(lambda: bool(bot.replies_to("om_a1")))
        (card,) = bot.replies_to("om_a1")
        text = json.dumps(card.content, ensure_ascii=False)
        (listing,) = [
            e["content"]
            for e in card.content["body"]["elements"]
            if "Agent profiles" in str(e.get("content", ""))
        ]
        assert listing.splitlines() == [
            "**Agent profiles** (larkgate.toml)",
            "- **auditor**: no chat is routed to it",
            "- **helpdesk**: direct messages",
            f"- **ops**: group {OPS_GROUP}",
            f"- **planner**: group {PLAN_GROUP}",
            f"- **quick**: group {QUICK_GROUP}",
        ]
        assert "read_only" in text  # the card's toggle is still there
        # Not for anyone else.
        await bot.say("om_a2", "/admin")
        await bot.wait_for(lambda: bool(bot.replies_to("om_a2")))
        assert "Agent profiles" not in json.dumps(
            [m.content for m in bot.replies_to("om_a2")], ensure_ascii=False
        )


# A run waiting for an approval across a restart, its profile narrowed meanwhile ---------


async def test_a_run_resumed_after_its_profile_lost_the_tool_does_not_run_it(
    tmp_path, feishu, llm_server
):
    """turns.py resumes a saved run with its chat's profile as configured now: a deploy
    that waited for an approval does not run once the ops profile no longer has deploy,
    and its approval is closed (no click can release it)."""
    tools = Tools()
    async with start(tmp_path, feishu, llm_server, tools) as bot:
        await bot.say("om_1", "SHIP the api", **in_group(OPS_GROUP))
        card = await first_card(bot, "om_1")
        approve = value_for(card, "approve")
    # The operator takes deploy out of the ops profile and restarts the bot.
    narrowed = PROFILES.replace('tools = ["lookup", "deploy"]', 'tools = ["lookup"]')
    assert narrowed != PROFILES
    (tmp_path / "larkgate.toml").write_text(narrowed, encoding="utf-8")
    settings = settings_for(
        tmp_path,
        feishu,
        llm_server,
        larkgate_admins=ADMIN,
        larkgate_config=tmp_path / "larkgate.toml",
    )
    llm_server.requests.clear()
    async with running_bot(settings, feishu, llm_server, tools=tools.all(), owner="second") as bot:
        approvals = ApprovalStore(bot.services.database)

        async def closed() -> bool:
            record = await approvals.get(approve["approval_id"])
            return record is not None and record.state == "cancelled"

        await bot.wait_for(closed, within=30)
        await bot.wait_for(
            lambda: header(bot.feishu.message_by_id[card.message_id].content) == "Cancelled"
        )
        late = await bot.click(approve, by=LEAD, card_message_id=card.message_id, chat_id=OPS_GROUP)
        assert late["toast"]["type"] == "info"
        await bot.settle()
        (resumed,) = loop_calls(llm_server)  # the model goes on from where it was
        assert offered(resumed) == {"lookup"}
        (result,) = tool_results(resumed)
        assert refused_result(result, "deploy"), result
    assert tools.deployed == []


# larkgate.toml that cannot be used --------------------------------------------------------


async def test_a_groups_key_that_is_no_table_stops_start_up_saying_so(tmp_path, feishu, llm_server):
    path = tmp_path / "larkgate.toml"
    path.write_text("groups = 3\n", encoding="utf-8")
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_config=path)
    with pytest.raises(SettingsError, match=r"\[groups\]"):
        async with running_bot(settings, feishu, llm_server):
            pass

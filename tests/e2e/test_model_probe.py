"""The endpoint probe in the running bot: at start-up the bot asks its model server what it
can do, and the agent's loop follows what it found (or LLM_TOOL_CALLS); a server that
hangs does not hold start-up; the context length a server states bounds what is sent."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from bot.engine import tool_from_function
from bot.engine.testing import ScriptedLLM

from e2e.harness import running_bot, settings_for
from fakes.openai_server import Reply

ANSWER = "The api service is healthy."


class Lookup:
    """A read tool that records its calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def tool(self):
        async def lookup(service: str) -> str:
            """Look a service up."""
            self.calls.append(service)
            return f"{service} is healthy"

        return tool_from_function(lookup, side_effect="read")


def is_probe(body: dict[str, Any]) -> bool:
    tools = [t["function"]["name"] for t in body.get("tools") or ()]
    last = body["messages"][-1]["content"]
    return "get_current_time" in tools or 'Reply with the JSON object {"ok": true}' in str(last)


def ignoring_tools(body: dict[str, Any]) -> Reply:
    """A server that ignores ``tools`` (it answers in text), with a model that follows the
    JSON mode's instructions: it calls ``lookup``, then answers."""
    if body.get("tools"):
        return Reply(content="I would look that up.")
    text = json.dumps(body["messages"])
    if "lookup" not in text:  # the probe's JSON question
        return Reply(content='{"ok": true}')
    if "api is healthy" not in text:
        call = {"type": "tool_call", "tool": "lookup", "arguments": {"service": "api"}}
        return Reply(content=json.dumps(call))
    if body.get("response_format"):
        return Reply(content=json.dumps({"type": "final_answer", "answer": ANSWER}))
    return Reply(content=ANSWER)  # the streamed answer


def loop_requests(server) -> list[dict[str, Any]]:
    return [r.body for r in server.requests if not is_probe(r.body)]


async def test_a_server_that_ignores_tools_gets_json_mode_and_its_tools_are_called(
    tmp_path, feishu, llm_server
):
    llm_server.answers_probes = False
    llm_server.handler = ignoring_tools
    lookup = Lookup()
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(settings, feishu, llm_server, tools=[lookup.tool()]) as bot:
        await bot.say("om_q", "is the api up?")
        text = await bot.reply("om_q")
    assert lookup.calls == ["api"]
    assert ANSWER in text
    sent = loop_requests(llm_server)
    assert sent and all("tools" not in body for body in sent)
    assert sent[0]["response_format"] == {"type": "json_object"}


async def test_llm_tool_calls_native_overrides_what_the_probe_found(tmp_path, feishu, llm_server):
    llm_server.answers_probes = False
    llm_server.handler = ignoring_tools
    lookup = Lookup()
    settings = settings_for(tmp_path, feishu, llm_server, llm_tool_calls="native")
    async with running_bot(settings, feishu, llm_server, tools=[lookup.tool()]) as bot:
        await bot.say("om_q", "is the api up?")
        await bot.reply("om_q")
    first = loop_requests(llm_server)[0]
    assert "lookup" in [t["function"]["name"] for t in first["tools"]]
    assert lookup.calls == []  # as the check warns: this server never calls a tool


async def test_llm_tool_calls_json_overrides_a_server_with_native_tools(
    tmp_path, feishu, llm_server
):
    llm_server.handler = ignoring_tools  # the probe itself is answered natively by the fake
    lookup = Lookup()
    settings = settings_for(tmp_path, feishu, llm_server, llm_tool_calls="json")
    async with running_bot(settings, feishu, llm_server, tools=[lookup.tool()]) as bot:
        await bot.say("om_q", "is the api up?")
        text = await bot.reply("om_q")
    assert len(llm_server.probes) == 2  # it was probed, and native tool calls were found
    assert lookup.calls == ["api"] and ANSWER in text
    assert all("tools" not in body for body in loop_requests(llm_server))


async def test_the_probe_runs_at_start_up_and_not_for_a_model_given_by_a_test(
    tmp_path, feishu, llm_server
):
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(settings, feishu, llm_server):
        assert len(llm_server.probes) == 2  # a tool request and a JSON-mode request
        assert llm_server.requests == []  # nothing a test scripts was used up
    llm_server.probes.clear()
    given = ScriptedLLM([])
    async with running_bot(settings, feishu, llm_server, llm=given):
        pass
    assert llm_server.probes == []


async def test_a_server_that_hangs_on_the_probe_does_not_hold_start_up(
    tmp_path, feishu, llm_server, monkeypatch
):
    release = asyncio.Event()
    plain = llm_server.handler

    async def hangs_when_probed(body):
        if is_probe(body):
            await release.wait()
        return plain(body)

    llm_server.answers_probes = False
    llm_server.handler = hangs_when_probed
    monkeypatch.setattr("bot.wiring.models.STARTUP_WAIT", 0.05)
    settings = settings_for(tmp_path, feishu, llm_server)
    try:
        async with running_bot(settings, feishu, llm_server) as bot:
            await bot.say("om_q", "hello?")
            assert await bot.reply("om_q")  # answered on the defaults while it probes
        # Shutting down stopped the probe that was still waiting.
    finally:
        release.set()


async def test_the_context_length_a_llama_cpp_server_states_bounds_what_is_sent(
    tmp_path, feishu, llm_server
):
    llm_server.models = [
        {"id": "/models/q.gguf", "owned_by": "llamacpp", "meta": {"n_ctx_train": 131072}}
    ]
    llm_server.props = {"default_generation_settings": {"n_ctx": 4096}}
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(settings, feishu, llm_server) as bot:
        for turn in range(3):  # a history of ~40,000 characters, ~10,000 tokens
            await bot.say(f"om_{turn}", f"Note {turn}: " + "the roadmap has many parts. " * 230)
            await bot.reply(f"om_{turn}")
        await bot.say("om_last", "What did I say about the roadmap?")
        await bot.reply("om_last")
    asked = next(  # the loop's first call for the last question (streamed or not)
        json.dumps(r.body["messages"])
        for r in llm_server.requests
        if "What did I say about the roadmap?" in json.dumps(r.body["messages"])
    )
    # Fitted to the server's 4,096 tokens (3,072 for the prompt), not to LLM_CONTEXT_BUDGET's
    # 96,000, which the whole history fits.
    assert len(asked) < 4 * 4096

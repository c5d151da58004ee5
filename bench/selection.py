"""Tool-schema tokens per main-loop LLM call, with and without the tool-selection phase.

    python -m bench.selection

The hub is built with every built-in connector except MCP (utilities, SQL, HTTP and
the twenty-two Feishu workspace tools, eight of which act as the asking user: 30
tools). For a set of typical questions, an agent runs against a scripted model that
answers the selection call with the tools a model would plausibly pick, then answers.
What the engine sends is recorded: the ``tools`` parameter of the main-loop call (its
JSON, token-estimated with the engine's estimator) with selection on (the default above
12 tools) and off, and the size of the selection call itself, so the net saving is
visible too.

Then what an empty selection should mean, over the fake OpenAI server through the real
SDK: for plain questions the selection call answers ``{"tools": []}``, and the prompt
of the main call (its request body, token-estimated) is measured when that means "no
tools" (what the engine does) and when it means "the full set" (the alternative).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bot.engine import (
    LLMResponse,
    Message,
    OpenAICompatibleLLM,
    ReActAgent,
    ToolCall,
    estimate_tokens,
)
from bot.engine.testing import ScriptedLLM
from bot.feishu.client import FeishuClient
from bot.feishu.config import FeishuConfig
from connectors.base import ConnectorContext
from connectors.config import ConnectorsConfig
from connectors.hub import ConnectorHub

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fakes.openai_server import FakeOpenAIServer, Reply

TARGET_SAVING = 0.60
PLAIN_QUESTIONS = [
    "What is the capital of France?",
    "hi!",
    "Explain the difference between TCP and UDP in two sentences.",
    "谢谢，今天就到这里。",
]

QUESTIONS: list[tuple[str, list[str]]] = [
    ("What is on my calendar tomorrow?", ["feishu_my_calendar_events", "current_time"]),
    ("Which of my tasks are still open?", ["feishu_my_tasks"]),
    (
        "Book a meeting with Alice on Friday at 3pm",
        ["feishu_search_users", "feishu_create_calendar_event", "current_time"],
    ),
    (
        "How many orders did we get last week?",
        ["sql_list_tables", "sql_describe_table", "sql_query"],
    ),
    ("What is 17% of 2,340?", ["calculator"]),
    (
        "Summarise what the team said in the ops chat today",
        ["feishu_list_chats", "feishu_get_chat_history"],
    ),
    ("Create a task to renew the TLS certificate", ["feishu_create_task", "current_time"]),
    ("Read the onboarding doc and list the first-week steps", ["feishu_read_document"]),
    ("Is the status page of our API up?", ["http_get"]),
    (
        "Add a row for ACME to the customers base",
        ["feishu_search_bitable_records", "feishu_create_bitable_record"],
    ),
    ("Post the release notes to the eng channel", ["feishu_list_chats", "feishu_send_message"]),
]


def tokens_of_tools(tools: object) -> int:
    return estimate_tokens(json.dumps(tools, ensure_ascii=False)) if tools else 0


def messages_tokens(messages: list[Message]) -> int:
    return sum(estimate_tokens(m.content) for m in messages)


async def measure(hub: ConnectorHub, question: str, picks: list[str], select: bool) -> dict:
    selection = LLMResponse(
        tool_calls=(
            ToolCall("sel", "select_tools", {"tools": picks}, json.dumps({"tools": picks})),
        )
    )
    script = [selection, "answer"] if select else ["answer"]
    llm = ScriptedLLM(script)
    agent = ReActAgent(
        llm, hub.registry, selection_threshold=12 if select else 10_000, completion_check=False
    )
    result = await agent.run(question)
    assert result.status == "completed", result.error
    main = llm.calls[-1]
    out = {"main_tools": tokens_of_tools(main.tools), "offered": len(main.tools or [])}
    if select:
        call = llm.calls[0]
        out["selection_call"] = messages_tokens(list(call.messages)) + tokens_of_tools(call.tools)
    return out


async def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        config = ConnectorsConfig(
            {
                "utilities": {},
                "sql": {"url": f"sqlite:///{Path(tmp) / 'bench.db'}"},
                "http": {"allowed_hosts": "status.example.com"},
                "feishu": {},
            },
            explicit=True,
        )
        feishu = FeishuClient(FeishuConfig("cli_bench", "secret", "", "", "https://open.feishu.cn"))
        hub = await ConnectorHub.build(
            config, ConnectorContext(feishu=feishu), feishu_credentials=True
        )
        try:
            code = await report(hub)
            await report_empty_selection(hub)
            return code
        finally:
            await hub.aclose()
            await feishu.aclose()


async def report(hub: ConnectorHub) -> int:
    if hub.failures:
        print("connectors that failed to start:", hub.failures)
    print(f"tool-selection benchmark: {len(hub.registry)} tools, {len(QUESTIONS)} questions")
    print(f"{'question':<55} {'without':>8} {'with':>6} {'saved':>6} {'sel. call':>9}")
    without_all, with_all, selection_all = [], [], []
    for question, picks in QUESTIONS:
        off = await measure(hub, question, picks, select=False)
        on = await measure(hub, question, picks, select=True)
        without_all.append(off["main_tools"])
        with_all.append(on["main_tools"])
        selection_all.append(on["selection_call"])
        saved = 1 - on["main_tools"] / off["main_tools"]
        print(
            f"{question[:55]:<55} {off['main_tools']:>8} {on['main_tools']:>6} "
            f"{saved:>6.0%} {on['selection_call']:>9}"
        )
    mean_off, mean_on = statistics.mean(without_all), statistics.mean(with_all)
    saving = 1 - mean_on / mean_off
    print(
        f"mean tool-schema tokens per main-loop call: {mean_off:.0f} without selection, "
        f"{mean_on:.0f} with selection ({saving:.0%} fewer); the selection call itself "
        f"costs {statistics.mean(selection_all):.0f} tokens once per question"
    )
    ok = saving >= TARGET_SAVING and len(hub.registry) >= 20
    verdict = "PASS" if ok else "FAIL"
    count = len(hub.registry)
    print(f"  {verdict}  ≥ {TARGET_SAVING:.0%} fewer schema tokens with {count} tools")
    return 0


async def main_call_tokens(hub: ConnectorHub, question: str, *, full_set: bool) -> int:
    """The main call's prompt after ``{"tools": []}``, estimated from what was sent."""

    def answer(body: dict[str, Any]) -> Reply:
        if [t["function"]["name"] for t in body.get("tools") or ()] == ["select_tools"]:
            return Reply(tool_calls=[("s", "select_tools", {"tools": []})])
        return Reply(content="An answer.")

    async with FakeOpenAIServer() as server:
        server.handler = answer
        llm = OpenAICompatibleLLM(server.base_url, "sk-bench", "bench-model")
        try:
            # The full set is what the run gets when selection does not narrow it.
            threshold = 10_000 if full_set else 12
            agent = ReActAgent(llm, hub.registry, selection_threshold=threshold)
            result = await agent.run(question)
            assert result.status == "completed", result.error
        finally:
            await llm.aclose()
        main = server.requests[-1].body
        return estimate_tokens(json.dumps(main, ensure_ascii=False))


async def report_empty_selection(hub: ConnectorHub) -> None:
    print(f'empty selection ({{"tools": []}}), main-call prompt tokens, {len(hub.registry)} tools:')
    print(f"{'question':<62} {'no tools':>8} {'full set':>8}")
    none_all, full_all = [], []
    for question in PLAIN_QUESTIONS:
        none = await main_call_tokens(hub, question, full_set=False)
        full = await main_call_tokens(hub, question, full_set=True)
        none_all.append(none)
        full_all.append(full)
        print(f"{question[:62]:<62} {none:>8} {full:>8}")
    print(
        f"mean: {statistics.mean(none_all):.0f} without tools, {statistics.mean(full_all):.0f} "
        "with the full set: an empty selection means no tools (bot/engine/selection.py)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    raise SystemExit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()

"""The footer counts every model call of the answer: prompt and completion tokens, the call
that chose the tools included (its catalogue is part of what an answer costs)."""

from __future__ import annotations

import itertools
from typing import Any

from bot.engine import Tool, tool_from_function

from e2e.harness import running_bot, settings_for
from e2e.test_budgets import footer
from fakes.openai_server import Reply

TOOLS = 13  # more than 12: the first call offers the menu of tools


def many_tools() -> list[Tool]:
    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    return [
        tool_from_function(lookup, name=f"lookup_{i}", description=f"Looks up kind {i}.")
        for i in range(TOOLS)
    ]


async def test_the_footer_counts_prompt_and_completion_tokens_of_every_call(
    tmp_path, feishu, llm_server
):
    reported: list[dict[str, int]] = []
    sizes = itertools.count(1)

    def handler(body: dict[str, Any]) -> Reply:
        n = next(sizes)
        usage = {"prompt_tokens": 1000 * n + 7, "completion_tokens": 10 * n + 3}
        reported.append(usage)
        offered = [t["function"]["name"] for t in body.get("tools") or ()]
        if offered == ["select_tools"]:  # the menu, in the first call
            return Reply(tool_calls=[("sel", "select_tools", {"tools": ["lookup_1"]})], usage=usage)
        return Reply(content="Nothing to look up: Paris.", usage=usage)

    llm_server.handler = handler
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(settings, feishu, llm_server, tools=many_tools()) as bot:
        await bot.say("om_q", "what is the capital of France?")
        await bot.reply("om_q")
        await bot.settle()
        menu, answer = (r.body for r in llm_server.requests)
        assert [t["function"]["name"] for t in menu["tools"]] == ["select_tools"]
        assert [t["function"]["name"] for t in answer["tools"]] == ["lookup_1"]
        prompt = sum(u["prompt_tokens"] for u in reported)
        completion = sum(u["completion_tokens"] for u in reported)
        shown = footer(bot, "om_q")
        assert f"{prompt + completion} tokens ({prompt} prompt, {completion} completion)" in shown

"""Our engine on the benchmark workload, with every default feature left on.

A pass-through hook and an event consumer are attached so the hook and event paths run,
as they do in the bot. The tool registry is built once (as the bot builds it once); the
agent is built per run because the scripted LLM is consumed by a run.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from bench.workload import ANSWER, QUESTION, call_args, echo_text
from bot.engine import HookResult, ReActAgent, Tool, ToolRegistry
from bot.engine.llm import LLMResponse
from bot.engine.messages import ToolCall
from bot.engine.testing import ScriptedLLM

NAME = "ours"

_executed = 0


async def _echo(x: int) -> str:
    global _executed
    _executed += 1
    return echo_text(x)


class _PassThroughHook:
    async def pre_tool_use(self, call: ToolCall) -> HookResult:
        return HookResult()

    async def post_tool_use(self, call: ToolCall, observation: Any) -> HookResult:
        return HookResult()


async def _ignore_event(event: Any) -> None:
    return None


@cache
def _registry() -> ToolRegistry:
    tool = Tool(
        name="echo",
        description="Echo a number",
        parameters={
            "type": "object",
            "properties": {"x": {"type": "integer"}},
            "required": ["x"],
        },
        handler=_echo,
        side_effect="read",
    )
    return ToolRegistry([tool])


def _call(x: int) -> ToolCall:
    arguments = {"x": x}
    return ToolCall(
        id=f"call_{x}", name="echo", arguments=arguments, raw_arguments=json.dumps(arguments)
    )


@cache
def _script(iterations: int, parallel: int) -> tuple[LLMResponse, ...]:
    turns = [
        LLMResponse(tool_calls=tuple(_call(x) for x in xs), finish_reason="tool_calls")
        for xs in call_args(iterations, parallel)
    ]
    answer = LLMResponse(content=ANSWER, finish_reason="stop")
    # The completion checklist (on by default) asks once more after 3+ tool calls.
    return (*turns, answer, answer)


async def run_workload(iterations: int, parallel: int) -> int:
    global _executed
    _executed = 0
    agent = ReActAgent(
        # No call recording: the peers' fakes keep nothing either.
        ScriptedLLM(list(_script(iterations, parallel)), record=False),
        _registry(),
        hooks=[_PassThroughHook()],
        max_iterations=iterations + 5,
        completion_check=True,
    )
    result = await agent.run(QUESTION, on_event=_ignore_event)
    # The engine's own record must agree with what the handler saw.
    if result.status != "completed" or result.answer != ANSWER:
        raise RuntimeError(f"run ended {result.status}: {result.error}")
    if len(result.steps) != _executed:
        raise RuntimeError(f"engine recorded {len(result.steps)} steps, ran {_executed} calls")
    return _executed

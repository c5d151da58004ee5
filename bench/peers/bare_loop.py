"""The floor: a hand-written async ReAct loop over plain dict messages.

No validation, hooks or events; just what any engine must do per iteration: ask the
model, append its turn, run the requested tools, append their results.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from functools import cache
from typing import Any

from bench.workload import ANSWER, QUESTION, call_args, echo_text

NAME = "bare-loop"

_executed = 0


async def _echo(x: int) -> str:
    global _executed
    _executed += 1
    return echo_text(x)


_TOOLS = {"echo": _echo}


@cache
def _script(iterations: int, parallel: int) -> tuple[dict[str, Any], ...]:
    turns = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": f"call_{x}", "name": "echo", "arguments": {"x": x}} for x in xs],
        }
        for xs in call_args(iterations, parallel)
    ]
    return (*turns, {"role": "assistant", "content": ANSWER})


async def _model(messages: list[dict[str, Any]], script: Iterator[dict[str, Any]]) -> dict:
    # An awaitable model call, like every real engine makes, but with nothing behind it.
    return next(script)


async def _call(call: dict[str, Any]) -> str:
    return await _TOOLS[call["name"]](**call["arguments"])


async def run_workload(iterations: int, parallel: int) -> int:
    global _executed
    _executed = 0
    script = iter(_script(iterations, parallel))
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    while True:
        reply = await _model(messages, script)
        messages.append(reply)
        calls = reply.get("tool_calls")
        if not calls:
            break
        if len(calls) == 1:
            outputs = [await _call(calls[0])]
        else:
            outputs = await asyncio.gather(*(_call(c) for c in calls))
        for call, output in zip(calls, outputs, strict=True):
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    if messages[-1]["content"] != ANSWER:
        raise RuntimeError(f"unexpected final answer: {messages[-1]['content']!r}")
    return _executed

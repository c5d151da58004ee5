"""pydantic-ai peer: an ``Agent`` over a ``FunctionModel`` that replays precomputed turns.

The agent is built once and reused, as pydantic-ai intends. Each scripted response carries
a token usage so ``FunctionModel`` does not estimate one by walking the whole history on
every turn: that is work of the fake, not of the framework (real providers report usage).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

from pydantic_ai import Agent, Tool
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage, UsageLimits

from bench.workload import ANSWER, QUESTION, call_args, echo_text

NAME = "pydantic-ai"

_executed = 0
_script_iter: Iterator[ModelResponse] = iter(())
_USAGE = RequestUsage(input_tokens=1, output_tokens=1)


async def echo(x: int) -> str:
    """Echo a number."""
    global _executed
    _executed += 1
    return echo_text(x)


async def _respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    # Async on purpose: FunctionModel runs a plain function in a worker thread.
    return next(_script_iter)


@cache
def _script(iterations: int, parallel: int) -> tuple[ModelResponse, ...]:
    turns = [
        ModelResponse(
            parts=[ToolCallPart("echo", {"x": x}, tool_call_id=f"call_{x}") for x in xs],
            usage=_USAGE,
        )
        for xs in call_args(iterations, parallel)
    ]
    return (*turns, ModelResponse(parts=[TextPart(ANSWER)], usage=_USAGE))


@cache
def _agent() -> Agent[None, str]:
    return Agent(FunctionModel(_respond), tools=[Tool(echo, takes_ctx=False)])


async def run_workload(iterations: int, parallel: int) -> int:
    global _executed, _script_iter
    _script_iter = iter(_script(iterations, parallel))
    _executed = 0
    # The default request limit (50) would stop the 200-iteration run.
    limits = UsageLimits(request_limit=iterations + 5)
    result = await _agent().run(QUESTION, usage_limits=limits)
    if result.output != ANSWER:
        raise RuntimeError(f"unexpected final answer: {result.output!r}")
    return _executed

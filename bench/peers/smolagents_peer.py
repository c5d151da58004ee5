"""smolagents peer: a ``ToolCallingAgent`` over a scripted ``Model``.

smolagents is synchronous, so the run happens inline in the coroutine (a thread hop would
add cost that is not the framework's). Its last turn is a ``final_answer`` tool call, the
only way smolagents ends a run. Logging is off: its rich console output would dominate.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

from smolagents import ChatMessage, LogLevel, MessageRole, Model, Tool, ToolCallingAgent
from smolagents.models import ChatMessageToolCall, ChatMessageToolCallFunction

from bench.workload import ANSWER, QUESTION, call_args, echo_text

NAME = "smolagents"

_MAX_STEPS = 1000  # above the largest workload (200 iterations + the final answer)

_executed = 0


class _Echo(Tool):
    name = "echo"
    description = "Echo a number."
    inputs = {"x": {"type": "integer", "description": "The number to echo."}}  # noqa: RUF012
    output_type = "string"

    def forward(self, x: int) -> str:
        global _executed
        _executed += 1
        return echo_text(x)


class _ScriptedModel(Model):
    """Returns precomputed ``ChatMessage``s in order; does nothing else."""

    def __init__(self) -> None:
        super().__init__(model_id="scripted")
        self.script: Iterator[ChatMessage] = iter(())

    def generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> ChatMessage:
        return next(self.script)


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> ChatMessageToolCall:
    function = ChatMessageToolCallFunction(name=name, arguments=arguments)
    return ChatMessageToolCall(function=function, id=call_id, type="function")


@cache
def _script(iterations: int, parallel: int) -> tuple[ChatMessage, ...]:
    turns = [
        ChatMessage(
            role=MessageRole.ASSISTANT,
            content="",
            tool_calls=[_call(f"call_{x}", "echo", {"x": x}) for x in xs],
        )
        for xs in call_args(iterations, parallel)
    ]
    final = ChatMessage(
        role=MessageRole.ASSISTANT,
        content="",
        tool_calls=[_call("call_final", "final_answer", {"answer": ANSWER})],
    )
    return (*turns, final)


@cache
def _agent() -> tuple[ToolCallingAgent, _ScriptedModel]:
    model = _ScriptedModel()
    agent = ToolCallingAgent(
        tools=[_Echo()], model=model, max_steps=_MAX_STEPS, verbosity_level=LogLevel.OFF
    )
    return agent, model


async def run_workload(iterations: int, parallel: int) -> int:
    global _executed
    agent, model = _agent()
    model.script = iter(_script(iterations, parallel))
    _executed = 0
    output = agent.run(QUESTION, reset=True)
    if output != ANSWER:
        raise RuntimeError(f"unexpected final answer: {output!r}")
    return _executed

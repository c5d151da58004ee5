"""LangGraph peer: a ReAct agent graph driven by an in-process scripted chat model.

``langgraph.prebuilt.create_react_agent`` is deprecated since LangGraph 1.0 and points to
``langchain.agents.create_agent``, which builds the same model/tools LangGraph graph; that
is what runs here. The graph is compiled once and reused (as an application would); each
run only swaps in the precomputed script.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cache
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from bench.workload import ANSWER, QUESTION, call_args, echo_text

NAME = "langgraph"

_executed = 0


@tool
async def echo(x: int) -> str:
    """Echo a number."""
    global _executed
    _executed += 1
    return echo_text(x)


class _ScriptedChatModel(BaseChatModel):
    """Returns precomputed ``ChatResult``s in order; does nothing else."""

    script: Any = None  # Iterator[ChatResult], replaced before each run

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> _ScriptedChatModel:
        # The script already knows the tools; binding would only add work the fake caused.
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        return next(self.script)

    async def _agenerate(
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> ChatResult:
        # Overridden because the base class would run _generate in a worker thread.
        return next(self.script)


def _result(message: AIMessage) -> ChatResult:
    return ChatResult(generations=[ChatGeneration(message=message)])


@cache
def _script(iterations: int, parallel: int) -> tuple[ChatResult, ...]:
    # Ids are preset so the framework's id assignment does the same work on every run.
    turns = [
        _result(
            AIMessage(
                content="",
                id=f"turn_{turn}",
                tool_calls=[
                    {"name": "echo", "args": {"x": x}, "id": f"call_{x}", "type": "tool_call"}
                    for x in xs
                ],
            )
        )
        for turn, xs in enumerate(call_args(iterations, parallel))
    ]
    return (*turns, _result(AIMessage(content=ANSWER, id="final")))


@cache
def _agent() -> tuple[Any, _ScriptedChatModel]:
    model = _ScriptedChatModel()
    return create_agent(model, [echo]), model


async def run_workload(iterations: int, parallel: int) -> int:
    global _executed
    graph, model = _agent()
    script: Iterator[ChatResult] = iter(_script(iterations, parallel))
    model.script = script
    _executed = 0
    # About two supersteps (model, tools) per iteration; leave generous headroom.
    config = {"recursion_limit": 4 * iterations + 20}
    state = await graph.ainvoke({"messages": [("user", QUESTION)]}, config)
    final = state["messages"][-1]
    if final.content != ANSWER:
        raise RuntimeError(f"unexpected final answer: {final.content!r}")
    return _executed

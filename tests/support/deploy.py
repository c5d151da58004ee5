"""The write tool of the approval tests, and a model that calls it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.engine import Tool, tool_from_function

from fakes.openai_server import Reply
from support.model_calls import is_synthesis


class Deployer:
    """``deploy(service)``: a write tool (so it waits for an approval) that records each
    time it really runs."""

    def __init__(self) -> None:
        self.runs: list[str] = []

    def tool(self) -> Tool:
        async def deploy(service: str) -> str:
            """Deploy a service to production."""
            self.runs.append(service)
            return f"{service} deployed"

        return tool_from_function(deploy, side_effect="write")


def deploying(services: list[str]) -> Callable[[dict[str, Any]], Reply]:
    """A model that deploys each service in turn, then says what it saw."""

    def handler(body: dict[str, Any]) -> Reply:
        observations = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if is_synthesis(body):  # synthesis reads the trace as text: echo it
            text = "Result: " + body["messages"][-1]["content"]
            # At most ~200 chunks: a 60,000-character trace in 4-character chunks is 15,000
            # chunks for the openai SDK to parse, seconds that test nothing here.
            return Reply(content=text, chunk_size=max(4, len(text) // 200))
        if len(observations) < len(services):
            service = services[len(observations)]
            return Reply(tool_calls=[(f"c{len(observations)}", "deploy", {"service": service})])
        # The final reply is the answer: it says what the tools said.
        return Reply(content="Result: " + " | ".join(observations))

    return handler

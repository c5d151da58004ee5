"""Helpers for engine tests: small real tools and recording hooks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.engine import HookResult, Tool, ToolUse

NUMBER_SCHEMA = {
    "type": "object",
    "properties": {"x": {"type": "integer"}},
    "required": ["x"],
    "additionalProperties": False,
}


def make_tool(
    name: str,
    handler: Callable[..., Any] | None = None,
    *,
    side_effect: str = "read",
    timeout: float | None = None,
    parameters: dict[str, Any] | None = None,
    description: str | None = None,
) -> Tool:
    async def default(**arguments: Any) -> str:
        return f"{name} {arguments.get('x')}"

    return Tool(
        name=name,
        description=description or f"The {name} tool.",
        parameters=parameters or NUMBER_SCHEMA,
        handler=handler or default,
        side_effect=side_effect,  # type: ignore[arg-type]
        timeout=timeout,
    )


class RecordingHook:
    """Allows everything and records what it saw, in order."""

    def __init__(self, label: str, log: list[str]) -> None:
        self.label = label
        self.log = log
        self.calls: list[ToolUse] = []

    async def pre_tool_use(self, call: ToolUse) -> HookResult:
        self.log.append(f"{self.label}:pre:{call.name}")
        self.calls.append(call)
        return HookResult()

    async def post_tool_use(self, call: ToolUse, observation: str) -> HookResult:
        self.log.append(f"{self.label}:post:{call.name}")
        return HookResult()

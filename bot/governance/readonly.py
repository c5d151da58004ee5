"""Read-only org mode: write tools vanish from what the model is offered, and are
refused at dispatch.

The mode lives in the database (shared by every process, kept across restarts). The
catalogue is filtered when a run starts; the guard checks the mode again at each
write call, so a run already in progress is covered from its next tool call.
"""

from __future__ import annotations

from bot.engine import HookResult, ToolRegistry
from bot.engine.hooks import ToolUse
from bot.store.org import OrgSettingsStore

READ_ONLY_REFUSAL = (
    "the organisation is in read-only mode: an admin has disabled every tool that writes, "
    "so {tool} did not run"
)


def read_tools(tools: ToolRegistry) -> ToolRegistry:
    """Only the tools classified read (an unclassified tool counts as a write)."""
    return ToolRegistry([tool for tool in tools if tool.side_effect == "read"])


class ReadOnlyGuard:
    """A PreToolUse hook: in read-only mode, every call of a non-read tool is blocked."""

    def __init__(self, org: OrgSettingsStore) -> None:
        self._org = org

    async def pre_tool_use(self, call: ToolUse) -> HookResult:
        if call.side_effect == "read":
            return HookResult()
        mode = await self._org.read_only()
        if mode.on:
            return HookResult(False, READ_ONLY_REFUSAL.format(tool=call.name))
        return HookResult()


class ToolsForRun:
    """The registry a new run is offered: all tools, or only the read ones in read-only mode."""

    def __init__(self, tools: ToolRegistry, org: OrgSettingsStore) -> None:
        self._all = tools
        self._read = read_tools(tools)
        self._org = org

    async def __call__(self) -> ToolRegistry:
        return self._read if (await self._org.read_only()).on else self._all

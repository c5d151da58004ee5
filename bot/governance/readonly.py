"""Read-only org mode: no tool that writes runs while it is on, whatever is waiting.

The mode lives in the database (shared by every process, kept across restarts). It is
enforced at three points, so that no path around it exists:

- a new run is offered only the read tools (``ToolsForRun``);
- ``ReadOnlyGuard`` is both the first and the last PreToolUse hook: the first refuses a
  write before anyone is asked to approve it, the last checks again at the moment the call
  would run, after any wait for a human (an approval granted just before the switch);
- switching the mode on cancels every pending approval of a write (``ReadOnlySwitch``):
  their cards say "cancelled: read-only mode", the waiting calls end and the model is told
  why; a click on such a card, or the console, cannot approve it any more
  (``ApprovalDecisions``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from bot.engine import HookResult, ToolRegistry
from bot.engine.hooks import ToolUse
from bot.store.approvals import READ_ONLY_NOTE, ApprovalRecord, ApprovalStore
from bot.store.org import OrgSettingsStore, Switch

from .cards import ApprovalCards
from .person_wait import PersonWaits

logger = logging.getLogger(__name__)

READ_ONLY_REFUSAL = (
    "the organisation is in read-only mode: an admin has disabled every tool that writes, "
    "so {tool} did not run"
)
Spawn = Callable[[Coroutine[Any, Any, None]], object]


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
    """The registry a new run is offered: all tools, or only the read ones in read-only mode.

    What is offered may lag a switch by ``max_age_seconds`` (the mode is read at most that
    often, not once per message): a write offered just before the switch is refused anyway,
    by ``ReadOnlyGuard``, which reads the mode afresh whenever a write would run.
    """

    def __init__(
        self, tools: ToolRegistry, org: OrgSettingsStore, *, max_age_seconds: float = 1.0
    ) -> None:
        self._all = tools
        self._read = read_tools(tools)
        self._org = org
        self._max_age = max_age_seconds
        self._writes = len(self._read.names()) < len(tools.names())

    async def __call__(self) -> ToolRegistry:
        if not self._writes:  # nothing to hide: no need to know the mode
            return self._all
        mode = await self._org.recent_read_only(self._max_age)
        return self._read if mode.on else self._all


class ReadOnlySwitch:
    """Switches the mode; switching it on also ends every pending approval of a write."""

    def __init__(
        self,
        org: OrgSettingsStore,
        approvals: ApprovalStore,
        waits: PersonWaits[ApprovalRecord],
        cards: ApprovalCards,
        *,
        spawn: Spawn,
    ) -> None:
        self._org = org
        self._approvals = approvals
        self._waits = waits
        self._cards = cards
        self._spawn = spawn

    async def set(
        self,
        on: bool,
        *,
        actor: str,
        chat_id: str | None,
        via: str | None = None,
        expected_version: int | None = None,
    ) -> Switch:
        switch = await self._org.set_read_only(
            on, actor=actor, chat_id=chat_id, via=via, expected_version=expected_version
        )
        if switch.mode.on:
            # Also when this call found it on already: an approval created in the moment
            # between another switch and its sweep is caught here.
            cancelled = await self._approvals.cancel_pending_writes(READ_ONLY_NOTE)
            for record in cancelled:
                self._waits.resolve(record)  # waits elsewhere notice the state themselves
            if cancelled:
                logger.info("read-only mode: cancelled %d pending approvals", len(cancelled))
                # Card rewrites are Feishu calls: not on the path of a click's 3-second answer.
                self._spawn(self._rewrite(cancelled))
        return switch

    async def _rewrite(self, records: list[ApprovalRecord]) -> None:
        for record in records:
            await self._cards.refresh(record)

"""Which tools a run is offered, read without a transaction per message, and why that
never lets a write run in read-only mode: the guard reads the mode afresh."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from bot.engine import Tool, ToolRegistry
from bot.governance.readonly import ReadOnlyGuard, ToolsForRun
from bot.store import Database, OrgSettingsStore, upgrade_async


async def _noop(**_: object) -> str:
    return "ok"


READ = Tool("lookup", "reads", {"type": "object", "properties": {}}, _noop, side_effect="read")
WRITE = Tool("delete_all", "writes", {"type": "object", "properties": {}}, _noop)


class CountingOrg(OrgSettingsStore):
    reads = 0

    async def read_only(self):
        self.reads += 1
        return await super().read_only()


def _call(tool: Tool) -> SimpleNamespace:
    return SimpleNamespace(name=tool.name, side_effect=tool.side_effect)


async def test_offered_tools_lag_a_switch_elsewhere_briefly_and_the_guard_not_at_all(tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path}/org.db"
    await upgrade_async(url)
    here_db, there_db = await Database.connect(url), await Database.connect(url)
    try:
        here, there = CountingOrg(here_db), OrgSettingsStore(there_db)
        tools = ToolsForRun(ToolRegistry([READ, WRITE]), here, max_age_seconds=0.2)
        guard = ReadOnlyGuard(here)
        for _ in range(50):  # fifty messages: one read of the mode
            assert set((await tools()).names()) == {"lookup", "delete_all"}
        assert here.reads == 1

        await there.set_read_only(True, actor="ou_admin", chat_id=None)  # another process
        # A run starting now may still be offered the write, but it cannot run it.
        refused = await guard.pre_tool_use(_call(WRITE))
        assert not refused.allow and "read-only" in (refused.reason or "")
        assert (await guard.pre_tool_use(_call(READ))).allow
        await asyncio.sleep(0.25)
        assert (await tools()).names() == ["lookup"]

        await here.set_read_only(False, actor="ou_admin", chat_id=None)  # this process
        assert set((await tools()).names()) == {"lookup", "delete_all"}  # at once
    finally:
        await here_db.dispose()
        await there_db.dispose()


async def test_without_write_tools_the_mode_is_not_read(tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path}/org.db"
    await upgrade_async(url)
    db = await Database.connect(url)
    try:
        org = CountingOrg(db)
        tools = ToolsForRun(ToolRegistry([READ]), org)
        assert (await tools()).names() == ["lookup"]
        assert org.reads == 0
    finally:
        await db.dispose()

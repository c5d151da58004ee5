"""The Feishu API-call ledger: processes add up, and each budget step is told once."""

from __future__ import annotations

import asyncio

from bot.store import ApiCallLedger


async def test_processes_add_up_and_months_are_apart(db, other_db, clock):
    here, there = ApiCallLedger(db, clock=clock), ApiCallLedger(other_db, clock=clock)
    assert await here.add("cli_a", "2026-12", 0) == 0
    totals = await asyncio.gather(
        *(ledger.add("cli_a", "2026-12", 5) for ledger in (here, there) * 10)
    )
    assert max(totals) == 100 and len(set(totals)) == 20  # every increment counted once
    assert await here.total("cli_a", "2026-12") == 100
    assert await there.total("cli_a", "2027-01") == 0
    assert await there.total("cli_b", "2026-12") == 0


async def test_each_step_is_told_by_one_process_once_a_month(db, other_db, clock):
    here, there = ApiCallLedger(db, clock=clock), ApiCallLedger(other_db, clock=clock)
    await here.add("cli_a", "2026-12", 1)
    claims = await asyncio.gather(
        *(ledger.claim_notice("cli_a", "2026-12", 1) for ledger in (here, there) * 3)
    )
    assert claims.count(True) == 1
    assert not await here.claim_notice("cli_a", "2026-12", 1)
    assert await there.claim_notice("cli_a", "2026-12", 2)  # the next step is told too
    assert not await here.claim_notice("cli_a", "2026-12", 1)  # an older one never again

"""Runs: started, finished, listed newest first, and interrupted when their process is gone."""

from __future__ import annotations

import pytest

from bot.store import MessageLedger, RunStore
from bot.store.runs import _MARK_INTERRUPTED

USAGE = {
    "iterations": 3,
    "prompt_tokens": 1200,
    "completion_tokens": 300,
    "total_tokens": 1500,
    "tool_calls": 2,
    "feishu_calls": 5,
}


async def test_start_finish_and_recent_newest_first(db, clock):
    runs = RunStore(db, clock=clock)
    started = await runs.start("run_1", conversation_id="c1", message_id="om_1", model="m")
    assert (started.status, started.iterations, started.finished_at) == ("running", 0, None)
    clock.advance(5)
    await runs.start("run_2", conversation_id="c1", message_id="om_2", model="m")
    clock.advance(5)
    await runs.start("run_3", conversation_id="c2", message_id="om_3", model="m2")

    assert await runs.finish("run_1", status="completed", **USAGE)
    assert await runs.finish("run_2", status="error", error="boom", **USAGE)
    assert not await runs.finish("run_nope", status="completed", **USAGE)

    recent = await runs.recent()
    assert [run.id for run in recent] == ["run_3", "run_2", "run_1"]
    assert [run.id for run in await runs.recent(limit=2)] == ["run_3", "run_2"]
    first = recent[2]
    assert (first.status, first.total_tokens, first.feishu_calls, first.error) == (
        "completed",
        1500,
        5,
        None,
    )
    assert first.finished_at == clock.now
    assert (recent[1].status, recent[1].error) == ("error", "boom")
    assert recent[0].status == "running"
    assert await runs.get("run_2") == recent[1]
    assert await runs.get("run_nope") is None


async def test_finish_refuses_an_unknown_status(db, clock):
    runs = RunStore(db, clock=clock)
    await runs.start("run_1", conversation_id="c1", message_id="om_1", model="m")
    with pytest.raises(ValueError, match="status"):
        await runs.finish("run_1", status="running", **USAGE)


async def test_start_up_marks_runs_without_an_owner_interrupted(db, clock):
    runs = RunStore(db, clock=clock)
    await runs.start("run_1", conversation_id="c1", message_id="om_1", model="m")
    await runs.start("run_2", conversation_id="c1", message_id="om_2", model="m")
    await runs.finish("run_2", status="completed", **USAGE)

    assert await runs.mark_interrupted_running() == 1
    interrupted = await runs.get("run_1")
    assert (interrupted.status, interrupted.finished_at) == ("interrupted", clock.now)
    assert interrupted.error
    assert (await runs.get("run_2")).status == "completed"
    assert await runs.mark_interrupted_running() == 0


async def test_runs_whose_owner_still_holds_the_message_are_left_running(db, clock):
    runs, ledger = RunStore(db, clock=clock), MessageLedger(db, clock=clock)
    await ledger.claim("om_live", owner="p1", payload={}, lease_seconds=60)
    await ledger.claim("om_dead", owner="p0", payload={}, lease_seconds=60)
    await runs.start("run_live", conversation_id="c", message_id="om_live", model="m", owner="p1")
    await runs.start("run_dead", conversation_id="c", message_id="om_dead", model="m", owner="p0")

    assert await runs.mark_interrupted_running() == 0
    clock.advance(30)
    await ledger.renew("om_live", owner="p1", lease_seconds=60)
    clock.advance(30)
    assert await runs.mark_interrupted_running() == 1
    assert (await runs.get("run_dead")).status == "interrupted"
    assert (await runs.get("run_live")).status == "running"

    # A run interrupted by mistake that does finish records its real outcome.
    assert await runs.finish("run_dead", status="completed", **USAGE)
    assert (await runs.get("run_dead")).status == "completed"


async def test_a_taken_over_message_interrupts_the_old_holders_run(db, clock):
    runs, ledger = RunStore(db, clock=clock), MessageLedger(db, clock=clock)
    await ledger.claim("om_1", owner="p0", payload={}, lease_seconds=60)
    await runs.start("run_old", conversation_id="c", message_id="om_1", model="m", owner="p0")
    clock.advance(60)
    [claim] = await ledger.take_over_expired(owner="p1", lease_seconds=60)
    await runs.start(
        "run_new", conversation_id="c", message_id=claim.message_id, model="m", owner="p1"
    )

    assert await runs.mark_interrupted_running() == 1
    assert (await runs.get("run_old")).status == "interrupted"
    assert (await runs.get("run_new")).status == "running"


async def test_the_orphan_sweep_reads_only_the_index_of_running_runs(db):
    # The sweep runs at every start-up over a table that grows by a row a message: it must
    # find the running runs by their partial index, never by a scan of every run.
    def plan(connection):
        compiled = _MARK_INTERRUPTED.compile(connection)
        values = compiled.construct_params({"now": 1.0})
        params = tuple(values[name] for name in compiled.positiontup)
        if db.dialect == "sqlite":
            explained = connection.exec_driver_sql("EXPLAIN QUERY PLAN " + str(compiled), params)
            return " | ".join(str(row[-1]) for row in explained)
        # A planner free to choose would scan a table this small; forbid that to see
        # whether the index can serve the query at all.
        connection.exec_driver_sql("SET LOCAL enable_seqscan = off")
        explained = connection.exec_driver_sql("EXPLAIN " + str(compiled), params)
        return " | ".join(row[0] for row in explained)

    text = await db.transact(plan)
    assert "ix_runs_running" in text, text
    assert "SCAN runs " not in text.replace("SCAN runs USING INDEX", ""), text

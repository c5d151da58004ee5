"""The audit log: entries read back newest first, limited, filtered by action prefix."""

from __future__ import annotations

import pytest

from bot.store import AuditEntry, AuditLog, AuditRecord, write_audit


async def test_recent_is_newest_first_and_limited(db, clock):
    log = AuditLog(db, clock=clock)
    assert await log.recent() == []
    start = clock.now
    await log.record(AuditEntry("readonly.on", actor="ou_admin", chat_id="oc_1"))
    clock.advance(1)
    await log.record(
        AuditEntry(
            "approval.denied",
            actor="ou_boss",
            target="ap_1",
            chat_id="oc_1",
            detail={"tool": "sql_execute", "run_id": "run_1", "note": "不行"},
        )
    )
    clock.advance(1)
    await log.record(AuditEntry("budget.reset"))

    entries = await log.recent()
    assert [entry.action for entry in entries] == [
        "budget.reset",
        "approval.denied",
        "readonly.on",
    ]
    assert entries[1] == AuditRecord(
        id=entries[1].id,
        at=start + 1,
        action="approval.denied",
        actor="ou_boss",
        target="ap_1",
        chat_id="oc_1",
        detail={"tool": "sql_execute", "run_id": "run_1", "note": "不行"},
    )
    assert (entries[0].actor, entries[0].target, entries[0].chat_id, entries[0].detail) == (
        None,
        None,
        None,
        {},
    )
    assert [entry.action for entry in await log.recent(limit=2)] == [
        "budget.reset",
        "approval.denied",
    ]


async def test_entries_of_the_same_moment_keep_their_order(db, clock):
    log = AuditLog(db, clock=clock)
    for n in range(5):
        await log.record(AuditEntry(f"test.{n}"))
    assert [entry.action for entry in await log.recent()] == [f"test.{n}" for n in (4, 3, 2, 1, 0)]


async def test_the_action_filter_is_an_exact_prefix(db, clock):
    log = AuditLog(db, clock=clock)
    for action in (
        "approval.approved",
        "approval.expired",
        "approvals_x",
        "APPROVAL.DENIED",
        "readonly.on",
        "approval.cancelled",
    ):
        clock.advance(1)
        await log.record(AuditEntry(action))

    approvals = await log.recent(action="approval.")
    assert [entry.action for entry in approvals] == [
        "approval.cancelled",
        "approval.expired",
        "approval.approved",
    ]
    assert [entry.action for entry in await log.recent(action="approval.", limit=1)] == [
        "approval.cancelled"
    ]
    # `_` is no wildcard: "approvals_x" does not match "approval_".
    assert await log.recent(action="approval_") == []
    assert [entry.action for entry in await log.recent(action="readonly.on")] == ["readonly.on"]
    assert await log.recent(action="nothing.") == []


async def test_write_audit_commits_and_rolls_back_with_the_callers_transaction(db, clock):
    def fail_after_writing(connection):
        write_audit(connection, AuditEntry("test.rolled_back"), clock.now)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await db.transact(fail_after_writing)
    await db.transact(write_audit, AuditEntry("test.kept", detail={"n": 1}), clock.now)

    [entry] = await AuditLog(db, clock=clock).recent()
    assert (entry.action, entry.at, entry.detail) == ("test.kept", clock.now, {"n": 1})

"""Approvals: one transition each, grants per requester and conversation generation, orphans
closed, read-only mode cancelling writes, audited with the whole call."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib

import pytest

from bot.store import ApprovalStore, AuditLog, MessageLedger, NewApproval

TTL = 300.0
LEASE = 60.0


def new_approval(**changes) -> NewApproval:
    values = {
        "run_id": "run_1",
        "scope_key": "chat:oc_1",
        "generation": 1,
        "chat_id": "oc_1",
        "message_id": "om_1",
        "thread_id": "",
        "tool": "sql_execute",
        "connector": "sql",
        "arguments": 'query: "DELETE FROM t"',
        "reason": "the user asked to clean up",
        "requester": "ou_asker",
        "approvers": ("ou_admin", "ou_boss"),
        "owner": "p1",
        "ttl_seconds": TTL,
    }
    values.update(changes)
    return NewApproval(**values)


async def audit_actions(db, clock) -> list[str]:
    return [entry.action for entry in reversed(await AuditLog(db, clock=clock).recent())]


async def test_create_get_and_set_card(db, clock):
    approvals = ApprovalStore(db, clock=clock)
    created = await approvals.create(new_approval(connector=None, reason=None))
    assert len(created.id) == 32
    assert (created.state, created.session, created.card_message_id) == ("pending", False, None)
    assert (created.created_at, created.expires_at) == (clock.now, clock.now + TTL)
    assert (created.decided_at, created.decided_by, created.note) == (None, None, None)
    assert created.approvers == ("ou_admin", "ou_boss")
    assert (created.connector, created.reason, created.generation) == (None, None, 1)
    assert await approvals.get(created.id) == created

    await approvals.set_card(created.id, "om_card")
    assert await approvals.get(created.id) == dataclasses.replace(
        created, card_message_id="om_card"
    )
    assert await approvals.get("nope") is None
    assert await audit_actions(db, clock) == []  # creating is not a transition


async def test_approve_once_then_every_other_transition_changes_nothing(db, clock):
    approvals = ApprovalStore(db, clock=clock)
    created = await approvals.create(new_approval())
    clock.advance(10)

    won = await approvals.decide(created.id, "approve", actor="ou_admin")
    assert won.changed
    assert (won.record.state, won.record.session) == ("approved", False)
    assert (won.record.decided_by, won.record.decided_at) == ("ou_admin", clock.now)
    assert await approvals.get(created.id) == won.record

    clock.advance(1)
    for lost in (
        await approvals.decide(created.id, "deny", actor="ou_boss"),
        await approvals.decide(created.id, "approve", actor="ou_boss"),
        await approvals.expire(created.id),
        await approvals.cancel(created.id, "run stopped"),
    ):
        assert not lost.changed
        assert lost.record == won.record
    assert await approvals.cancel_run("run_1", "run stopped") == []
    # No session grant.
    assert not await approvals.granted("chat:oc_1", 1, "sql_execute", "ou_asker")

    [entry] = await AuditLog(db, clock=clock).recent()
    assert (entry.action, entry.actor, entry.target, entry.chat_id) == (
        "approval.approved",
        "ou_admin",
        created.id,
        "oc_1",
    )
    assert entry.detail == {
        "tool": "sql_execute",
        "run_id": "run_1",
        "requester": "ou_asker",
        "requesters": ["ou_asker"],
        "arguments": 'query: "DELETE FROM t"',
        "arguments_sha256": hashlib.sha256(b'query: "DELETE FROM t"').hexdigest(),
    }
    assert entry.at == won.record.decided_at


async def test_deny(db, clock):
    approvals = ApprovalStore(db, clock=clock)
    created = await approvals.create(new_approval())
    denied = await approvals.decide(created.id, "deny", actor="ou_boss")
    assert denied.changed
    assert (denied.record.state, denied.record.decided_by) == ("denied", "ou_boss")
    assert not (await approvals.decide(created.id, "approve", actor="ou_admin")).changed
    assert await audit_actions(db, clock) == ["approval.denied"]


async def test_unknown_approvals_and_decisions(db, clock):
    approvals = ApprovalStore(db, clock=clock)
    assert await approvals.decide("nope", "approve", actor="ou_admin") == (
        await approvals.expire("nope")
    )
    assert (await approvals.cancel("nope", "x")).record is None
    assert not (await approvals.decide("nope", "deny", actor="ou_admin")).changed
    created = await approvals.create(new_approval())
    with pytest.raises(ValueError, match="decision"):
        await approvals.decide(created.id, "maybe", actor="ou_admin")
    assert (await approvals.get(created.id)).state == "pending"
    assert await audit_actions(db, clock) == []


async def test_a_decision_after_the_expiry_fails_and_the_expiry_wins(db, clock):
    approvals = ApprovalStore(db, clock=clock)
    created = await approvals.create(new_approval())
    clock.advance(TTL)

    late = await approvals.decide(created.id, "approve", actor="ou_admin")
    assert not late.changed
    assert late.record == created  # still pending, untouched
    expired = await approvals.expire(created.id)
    assert expired.changed
    assert (expired.record.state, expired.record.decided_by) == ("expired", None)
    assert expired.record.decided_at == clock.now
    assert not (await approvals.expire(created.id)).changed
    assert await audit_actions(db, clock) == ["approval.expired"]


async def test_approve_session_grants_the_tool_for_this_scope_and_generation_only(db, clock):
    approvals = ApprovalStore(db, clock=clock)
    created = await approvals.create(new_approval())
    assert not await approvals.granted("chat:oc_1", 1, "sql_execute", "ou_asker")

    outcome = await approvals.decide(created.id, "approve_session", actor="ou_admin")
    assert outcome.changed
    assert (outcome.record.state, outcome.record.session) == ("approved", True)
    assert await approvals.granted("chat:oc_1", 1, "sql_execute", "ou_asker")
    assert not await approvals.granted("chat:oc_1", 2, "sql_execute", "ou_asker")  # after a /reset
    assert not await approvals.granted("chat:oc_2", 1, "sql_execute", "ou_asker")
    assert not await approvals.granted("chat:oc_1", 1, "sql_query", "ou_asker")
    # Nobody else in the conversation inherits the requester's grant.
    assert not await approvals.granted("chat:oc_1", 1, "sql_execute", "ou_carol")

    # A second session approval of the same tool keeps the grant (no conflict).
    again = await approvals.create(new_approval(run_id="run_2", message_id="om_2"))
    assert (await approvals.decide(again.id, "approve_session", actor="ou_boss")).changed
    assert await approvals.granted("chat:oc_1", 1, "sql_execute", "ou_asker")
    assert await audit_actions(db, clock) == [
        "approval.approved_session",
        "approval.approved_session",
    ]


async def test_an_approval_asked_by_several_records_and_audits_them_all(db, clock):
    approvals = ApprovalStore(db, clock=clock)
    alone = await approvals.create(new_approval())
    assert alone.requesters == ("ou_asker",)
    clock.advance(1)
    joined = await approvals.create(
        new_approval(run_id="run_2", requesters=("ou_asker", "ou_carol", ""))
    )
    assert (joined.requester, joined.requesters) == ("ou_asker", ("ou_asker", "ou_carol", ""))
    assert await approvals.get(joined.id) == joined
    assert [r.requesters for r in await approvals.pending()] == [joined.requesters, ("ou_asker",)]
    await approvals.decide(joined.id, "approve", actor="ou_admin")
    [entry] = await AuditLog(db, clock=clock).recent()
    assert (entry.detail["requester"], entry.detail["requesters"]) == (
        "ou_asker",
        ["ou_asker", "ou_carol", ""],
    )
    with pytest.raises(ValueError, match="first of the requesters"):
        await approvals.create(new_approval(requesters=("ou_carol", "ou_asker")))


async def test_a_session_approval_asked_by_several_grants_each_and_covers_only_them(db, clock):
    approvals = ApprovalStore(db, clock=clock)
    asked = ("ou_asker", "ou_carol", "")
    created = await approvals.create(new_approval(requesters=asked))
    assert not await approvals.granted_to_all("chat:oc_1", 1, "sql_execute", ["ou_asker"])
    assert (await approvals.decide(created.id, "approve_session", actor="ou_admin")).changed
    granted = {
        who: await approvals.granted_to_all("chat:oc_1", 1, "sql_execute", who)
        for who in [
            ("ou_asker",),
            ("ou_carol",),
            ("ou_asker", "ou_carol"),
            ("ou_carol", "ou_carol"),
            ("ou_asker", "ou_dave"),  # Dave was not on the card
            ("ou_asker", ""),  # an unknown asker is granted nothing, even when on the card
            ("",),
            (),
        ]
    }
    assert granted == {
        ("ou_asker",): True,
        ("ou_carol",): True,
        ("ou_asker", "ou_carol"): True,
        ("ou_carol", "ou_carol"): True,
        ("ou_asker", "ou_dave"): False,
        ("ou_asker", ""): False,
        ("",): False,
        (): False,
    }
    assert not await approvals.granted_to_all("chat:oc_1", 2, "sql_execute", ["ou_carol"])
    assert not await approvals.granted_to_all("chat:oc_1", 1, "sql_query", ["ou_carol"])


async def test_a_denied_or_late_session_approval_grants_nothing(db, clock):
    approvals = ApprovalStore(db, clock=clock)
    denied = await approvals.create(new_approval())
    await approvals.decide(denied.id, "deny", actor="ou_admin")
    assert not (await approvals.decide(denied.id, "approve_session", actor="ou_admin")).changed
    late = await approvals.create(new_approval(tool="sql_query"))
    clock.advance(TTL + 1)
    assert not (await approvals.decide(late.id, "approve_session", actor="ou_admin")).changed
    assert not await approvals.granted("chat:oc_1", 1, "sql_execute", "ou_asker")
    assert not await approvals.granted("chat:oc_1", 1, "sql_query", "ou_asker")


async def test_cancel(db, clock):
    approvals = ApprovalStore(db, clock=clock)
    created = await approvals.create(new_approval())
    cancelled = await approvals.cancel(created.id, "run stopped")
    assert cancelled.changed
    assert (cancelled.record.state, cancelled.record.note) == ("cancelled", "run stopped")
    assert cancelled.record.decided_by is None
    assert not (await approvals.decide(created.id, "approve", actor="ou_admin")).changed
    [entry] = await AuditLog(db, clock=clock).recent()
    assert (entry.action, entry.actor, entry.target) == ("approval.cancelled", None, created.id)
    assert {k: entry.detail[k] for k in ("tool", "run_id", "note")} == {
        "tool": "sql_execute",
        "run_id": "run_1",
        "note": "run stopped",
    }


async def test_cancel_run_cancels_only_the_runs_pending_approvals(db, clock):
    approvals = ApprovalStore(db, clock=clock)
    first = await approvals.create(new_approval())
    clock.advance(1)
    second = await approvals.create(new_approval(tool="sql_query"))
    decided = await approvals.create(new_approval(tool="http_post"))
    other = await approvals.create(new_approval(run_id="run_2"))
    await approvals.decide(decided.id, "deny", actor="ou_admin")

    cancelled = await approvals.cancel_run("run_1", "run stopped")
    assert [record.id for record in cancelled] == [first.id, second.id]
    assert {(record.state, record.note) for record in cancelled} == {("cancelled", "run stopped")}
    assert await approvals.states([first.id, second.id, decided.id, other.id]) == {
        first.id: "cancelled",
        second.id: "cancelled",
        decided.id: "denied",
        other.id: "pending",
    }
    assert await approvals.cancel_run("run_1", "again") == []
    assert await audit_actions(db, clock) == [
        "approval.denied",
        "approval.cancelled",
        "approval.cancelled",
    ]


async def test_states_and_pending(db, clock):
    approvals = ApprovalStore(db, clock=clock)
    assert await approvals.states([]) == {}
    ids = []
    for n in range(4):
        ids.append((await approvals.create(new_approval(run_id=f"run_{n}"))).id)
        clock.advance(1)
    await approvals.decide(ids[1], "approve", actor="ou_admin")

    assert await approvals.states([*ids, "nope"]) == {
        ids[0]: "pending",
        ids[1]: "approved",
        ids[2]: "pending",
        ids[3]: "pending",
    }
    assert [record.id for record in await approvals.pending()] == [ids[3], ids[2], ids[0]]
    assert [record.id for record in await approvals.pending(limit=2)] == [ids[3], ids[2]]


async def test_two_decisions_at_once_have_exactly_one_winner(db, other_db, clock):
    here, there = ApprovalStore(db, clock=clock), ApprovalStore(other_db, clock=clock)
    for _ in range(5):
        created = await here.create(new_approval())
        outcomes = await asyncio.gather(
            here.decide(created.id, "approve_session", actor="ou_admin"),
            there.decide(created.id, "deny", actor="ou_boss"),
            here.decide(created.id, "deny", actor="ou_boss"),
            there.expire(created.id),
        )
        winners = [outcome for outcome in outcomes if outcome.changed]
        assert len(winners) == 1
        final = await here.get(created.id)
        assert all(outcome.record == final for outcome in outcomes)
        assert final.state in ("approved", "denied", "expired")
    actions = await audit_actions(db, clock)
    assert len(actions) == 5
    grants = sum(action == "approval.approved_session" for action in actions)
    assert await here.granted("chat:oc_1", 1, "sql_execute", "ou_asker") == (grants > 0)


async def test_close_orphans_cancels_approvals_nobody_waits_for(db, clock):
    approvals, ledger = ApprovalStore(db, clock=clock), MessageLedger(db, clock=clock)
    await ledger.claim("om_live", owner="p1", payload={}, lease_seconds=LEASE)
    await ledger.claim("om_other", owner="p2", payload={}, lease_seconds=LEASE)
    await ledger.claim("om_lapsing", owner="p1", payload={}, lease_seconds=LEASE)
    await ledger.claim("om_done", owner="p1", payload={}, lease_seconds=LEASE)
    await ledger.complete("om_done", owner="p1")
    await ledger.claim("om_replied", owner="p1", payload={}, lease_seconds=LEASE)
    await ledger.mark_replied("om_replied", owner="p1", reply_message_id="om_reply")

    live = await approvals.create(new_approval(message_id="om_live"))
    replied = await approvals.create(new_approval(message_id="om_replied"))
    someone_else = await approvals.create(new_approval(message_id="om_other"))
    no_claim = await approvals.create(new_approval(message_id="om_unknown"))
    done = await approvals.create(new_approval(message_id="om_done"))
    lapsing = await approvals.create(new_approval(message_id="om_lapsing"))
    decided = await approvals.create(new_approval(message_id="om_other"))
    await approvals.decide(decided.id, "deny", actor="ou_admin")

    closed = await approvals.close_orphans()
    assert {record.id for record in closed} == {someone_else.id, no_claim.id, done.id}
    assert {(record.state, record.note, record.decided_by) for record in closed} == {
        ("cancelled", "the run is gone", None)
    }
    assert await approvals.close_orphans() == []

    clock.advance(LEASE / 2)
    for message_id in ("om_live", "om_replied"):
        assert await ledger.renew(message_id, owner="p1", lease_seconds=LEASE)
    clock.advance(LEASE / 2)  # om_lapsing's lease has run out
    [gone] = await approvals.close_orphans()
    assert gone.id == lapsing.id
    assert {record.id for record in await approvals.pending()} == {replied.id, live.id}
    assert await audit_actions(db, clock) == ["approval.denied"] + ["approval.cancelled"] * 4


async def test_close_orphans_expires_approvals_past_their_expiry_and_the_grace(db, clock):
    approvals, ledger = ApprovalStore(db, clock=clock), MessageLedger(db, clock=clock)
    await ledger.claim("om_1", owner="p1", payload={}, lease_seconds=10 * TTL)
    short = await approvals.create(new_approval(ttl_seconds=10))
    long = await approvals.create(new_approval(ttl_seconds=TTL))

    clock.advance(10 + 5)  # exactly the grace past the expiry: the owner's timer still may
    assert await approvals.close_orphans(grace_seconds=5) == []
    clock.advance(1)
    [expired] = await approvals.close_orphans(grace_seconds=5)
    assert (expired.id, expired.state, expired.note) == (short.id, "expired", None)
    assert [record.id for record in await approvals.pending()] == [long.id]
    [entry] = await AuditLog(db, clock=clock).recent()
    assert (entry.action, entry.actor, entry.target) == ("approval.expired", None, short.id)


async def test_a_sweep_racing_a_decision_leaves_one_transition(db, other_db, clock):
    here, there = ApprovalStore(db, clock=clock), ApprovalStore(other_db, clock=clock)
    ids = [(await here.create(new_approval(message_id=f"om_{n}"))).id for n in range(6)]
    results = await asyncio.gather(
        there.close_orphans(),
        *(here.decide(approval_id, "approve", actor="ou_admin") for approval_id in ids),
        here.close_orphans(),
    )
    swept = [record.id for result in (results[0], results[-1]) for record in result]
    decided = [outcome.record.id for outcome in results[1:-1] if outcome.changed]
    assert sorted(swept + decided) == sorted(ids)
    assert len(await AuditLog(db, clock=clock).recent()) == len(ids)


async def test_the_whole_arguments_are_kept_however_long(db, clock):
    """What the approver is shown is what runs: nothing is cut before it is stored."""
    approvals = ApprovalStore(db, clock=clock)
    arguments = '{"query": "' + "x" * 50_000 + '; DROP TABLE users"}'
    created = await approvals.create(new_approval(arguments=arguments))
    assert (await approvals.get(created.id)).arguments == arguments
    await approvals.decide(created.id, "deny", actor="ou_admin")
    [entry] = await AuditLog(db, clock=clock).recent()
    assert entry.detail["arguments"] == arguments


async def test_cancel_pending_writes_leaves_reads_and_closed_approvals(db, clock):
    approvals = ApprovalStore(db, clock=clock)
    write = await approvals.create(new_approval())
    clock.advance(1)
    unclassified = await approvals.create(new_approval(run_id="run_2", side_effect="unknown"))
    clock.advance(1)
    read = await approvals.create(new_approval(run_id="run_3", side_effect="read"))
    decided = await approvals.create(new_approval(run_id="run_4"))
    await approvals.decide(decided.id, "approve", actor="ou_admin")

    cancelled = await approvals.cancel_pending_writes()
    assert [r.id for r in cancelled] == [write.id, unclassified.id]
    assert {r.state for r in cancelled} == {"cancelled"}
    assert {r.note for r in cancelled} == {"read-only mode"}
    assert (await approvals.get(read.id)).state == "pending"
    assert (await approvals.get(decided.id)).state == "approved"
    # A click that comes after loses: the cancellation was the one transition.
    assert not (await approvals.decide(write.id, "approve", actor="ou_admin")).changed
    assert await approvals.cancel_pending_writes() == []
    assert sorted(await audit_actions(db, clock)) == [
        "approval.approved",
        "approval.cancelled",
        "approval.cancelled",
    ]

"""Several Feishu apps in one database: each app's stores see and change only that app's
rows (migration 0016). The attacker's way in is a store of app B handed an id of app A (a
click on A's card delivered to B, a sweep, a scheduler): every read and every transition
of B must find nothing, at the statement, not only where a handler checks."""

from __future__ import annotations

from bot.store import ApprovalStore, AuditLog, MessageLedger
from bot.store.questions import QuestionStore
from bot.store.schedules import ScheduleStore
from store.test_approvals import new_approval
from store.test_questions import new_question
from store.test_schedules import claim, new_task

LEASE = 30.0


async def test_one_message_is_claimed_once_by_each_app(db, clock):
    default, hr = MessageLedger(db, clock=clock), MessageLedger(db, clock=clock, app="hr")
    first = await default.claim("om_1", owner="p1", payload={}, lease_seconds=LEASE)
    second = await hr.claim("om_1", owner="p1/hr", payload={}, lease_seconds=LEASE)
    assert first.acquired and second.acquired
    again = await hr.claim("om_1", owner="p1/hr", payload={}, lease_seconds=LEASE)
    assert again.outcome == "duplicate_in_progress"
    assert await hr.complete("om_1", owner="p1/hr")
    # HR's finish left the default app's claim as it was.
    entry = await default.get("om_1")
    assert entry is not None and entry.state == "claimed"
    # Nor can an app finish, renew or release another's claim with the same owner id.
    assert not await hr.renew("om_1", owner="p1", lease_seconds=LEASE)
    assert not await hr.release("om_1", owner="p1")


async def test_a_sweep_takes_over_its_own_app_s_expired_claims_only(db, clock):
    default, hr = MessageLedger(db, clock=clock), MessageLedger(db, clock=clock, app="hr")
    await default.claim("om_a", owner="dead", payload={}, lease_seconds=LEASE)
    await hr.claim("om_b", owner="dead/hr", payload={}, lease_seconds=LEASE)
    clock.advance(LEASE + 1)
    taken = await hr.take_over_expired(owner="p2/hr", lease_seconds=LEASE)
    assert [c.message_id for c in taken] == ["om_b"]
    taken = await default.take_over_expired(owner="p2", lease_seconds=LEASE)
    assert [c.message_id for c in taken] == ["om_a"]


async def test_another_app_s_approval_is_unknown_to_every_transition(db, clock):
    default = ApprovalStore(db, clock=clock)
    hr = ApprovalStore(db, clock=clock, app="hr")
    record = await default.create(new_approval())
    await hr.set_card(record.id, "om_forged_card")
    assert await hr.get(record.id) is None
    outcome = await hr.decide(record.id, "approve", actor="ou_admin")
    assert not outcome.changed and outcome.record is None
    assert not (await hr.expire(record.id)).changed
    assert not (await hr.cancel(record.id, "gone")).changed
    assert not await hr.use(record.id)
    mine = await default.get(record.id)
    assert mine is not None and mine.state == "pending" and mine.card_message_id is None
    # The owner's app decides it; the audit says which app.
    assert (await default.decide(record.id, "approve", actor="ou_admin")).changed
    (entry,) = await AuditLog(db, clock=clock).recent(action="approval.")
    assert entry.app == ""


async def test_a_sweep_closes_its_own_app_s_orphans_only(db, clock):
    default = ApprovalStore(db, clock=clock)
    hr = ApprovalStore(db, clock=clock, app="hr")
    theirs = await default.create(new_approval())  # nobody holds om_1: an orphan
    ours = await hr.create(new_approval(run_id="run_2"))
    closed = await hr.close_orphans()
    assert [r.id for r in closed] == [ours.id] and closed[0].app == "hr"
    still = await default.get(theirs.id)
    assert still is not None and still.state == "pending"
    entries = await AuditLog(db, clock=clock).recent(action="approval.")
    assert [(e.target, e.app) for e in entries] == [(ours.id, "hr")]


async def test_another_app_s_question_cannot_be_answered_or_closed(db, clock):
    default = QuestionStore(db, clock=clock)
    hr = QuestionStore(db, clock=clock, app="hr")
    question = await default.create(new_question())
    assert await hr.get(question.id) is None
    answered = await hr.answer(question.id, by=question.asker, text="staging")
    assert not answered.changed and answered.refusal == "unknown"
    assert not (await hr.cancel(question.id, "gone")).changed
    clock.advance(10_000)
    assert await hr.close_expired() == []
    expired = await default.close_expired()
    assert [q.id for q in expired] == [question.id]


async def test_each_app_s_scheduler_fires_and_lists_its_own_tasks(db, clock):
    default = ScheduleStore(db, clock=clock)
    hr = ScheduleStore(db, clock=clock, app="hr")
    theirs = await new_task(default, next_run_at=clock.now + 60)
    ours = await new_task(hr, next_run_at=clock.now + 120, name="payroll")
    assert [t.id for t in await hr.list(creator=None)] == [ours.id]
    assert await hr.next_due_at() == clock.now + 120
    clock.advance(200)
    firings, _ = await claim(hr, "p1/hr")
    assert [f.task.id for f in firings] == [ours.id]
    firings, _ = await claim(default, "p1")
    assert [f.task.id for f in firings] == [theirs.id]
    # A firing whose lease ran out is taken over by its own app's scheduler only.
    clock.advance(LEASE * 10)
    assert await hr.next_lease_end() is not None
    taken, _ = await claim(hr, "p2/hr")
    assert [(f.task.id, f.attempt) for f in taken] == [(ours.id, 2)]
    taken, _ = await claim(default, "p2")
    assert [(f.task.id, f.attempt) for f in taken] == [(theirs.id, 2)]

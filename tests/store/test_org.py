"""The read-only mode: off until switched, shared by processes, audited on changes only."""

from __future__ import annotations

import asyncio

from bot.store import AuditLog, OrgSettingsStore, ReadOnlyMode


async def test_off_until_switched_and_switching_off_again_is_a_no_op(db, clock):
    org = OrgSettingsStore(db, clock=clock)
    assert await org.read_only() == ReadOnlyMode(on=False, changed_by=None, changed_at=None)
    assert await org.set_read_only(False, actor="ou_admin", chat_id="oc_1") == (
        False,
        ReadOnlyMode(on=False, changed_by=None, changed_at=None),
    )
    assert await AuditLog(db, clock=clock).recent() == []


async def test_switching_on_and_off_is_shared_and_audited(db, other_db, clock):
    org, elsewhere = OrgSettingsStore(db, clock=clock), OrgSettingsStore(other_db, clock=clock)
    switched_at = clock.now
    changed, mode = await org.set_read_only(True, actor="ou_admin", chat_id="oc_1")
    assert changed
    assert mode == ReadOnlyMode(on=True, changed_by="ou_admin", changed_at=switched_at)
    assert await elsewhere.read_only() == mode

    # Switching on again changes nothing: the last change is still the one reported.
    clock.advance(10)
    assert await elsewhere.set_read_only(True, actor="ou_boss", chat_id=None) == (False, mode)

    clock.advance(10)
    changed, off = await elsewhere.set_read_only(False, actor="ou_boss", chat_id=None)
    assert changed
    assert off == ReadOnlyMode(on=False, changed_by="ou_boss", changed_at=clock.now)
    assert await org.read_only() == off
    assert (await org.set_read_only(False, actor="ou_admin", chat_id="oc_1"))[0] is False

    entries = await AuditLog(db, clock=clock).recent()
    assert [(e.action, e.actor, e.chat_id, e.at) for e in entries] == [
        ("readonly.off", "ou_boss", None, clock.now),
        ("readonly.on", "ou_admin", "oc_1", switched_at),
    ]


async def test_two_admins_switching_at_once_change_it_once(db, other_db, clock):
    stores = [OrgSettingsStore(db, clock=clock), OrgSettingsStore(other_db, clock=clock)]
    for on in (True, False, True):
        results = await asyncio.gather(
            *(
                store.set_read_only(on, actor=f"ou_{n}", chat_id=None)
                for n, store in enumerate(stores * 3)
            )
        )
        assert sum(changed for changed, _ in results) == 1
        assert {mode.on for _, mode in results} == {on}
    actions = [entry.action for entry in await AuditLog(db, clock=clock).recent()]
    assert sorted(actions) == ["readonly.off", "readonly.on", "readonly.on"]

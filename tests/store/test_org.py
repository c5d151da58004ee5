"""The read-only mode: off until switched, shared by processes, audited on changes only,
versioned so that a switch asked for an older state changes nothing."""

from __future__ import annotations

import asyncio

from bot.store import AuditLog, OrgSettingsStore, ReadOnlyMode


async def test_off_until_switched_and_switching_off_again_is_a_no_op(db, clock):
    org = OrgSettingsStore(db, clock=clock)
    never = ReadOnlyMode(on=False, changed_by=None, changed_at=None, version=0)
    assert await org.read_only() == never
    switch = await org.set_read_only(False, actor="ou_admin", chat_id="oc_1")
    assert (switch.changed, switch.stale, switch.mode) == (False, False, never)
    assert await org.read_only() == never
    assert await AuditLog(db, clock=clock).recent() == []


async def test_switching_on_and_off_is_shared_and_audited(db, other_db, clock):
    org, elsewhere = OrgSettingsStore(db, clock=clock), OrgSettingsStore(other_db, clock=clock)
    switched_at = clock.now
    switch = await org.set_read_only(True, actor="ou_admin", chat_id="oc_1")
    assert switch.changed
    mode = switch.mode
    assert mode == ReadOnlyMode(on=True, changed_by="ou_admin", changed_at=switched_at, version=1)
    assert await elsewhere.read_only() == mode

    # Switching on again changes nothing: the last change is still the one reported.
    clock.advance(10)
    again = await elsewhere.set_read_only(True, actor="ou_boss", chat_id=None)
    assert (again.changed, again.mode) == (False, mode)

    clock.advance(10)
    off = await elsewhere.set_read_only(False, actor="ou_boss", chat_id=None)
    assert off.changed
    assert off.mode == ReadOnlyMode(on=False, changed_by="ou_boss", changed_at=clock.now, version=2)
    assert await org.read_only() == off.mode
    assert not (await org.set_read_only(False, actor="ou_admin", chat_id="oc_1")).changed

    entries = await AuditLog(db, clock=clock).recent()
    assert [(e.action, e.actor, e.chat_id, e.at, e.detail) for e in entries] == [
        ("readonly.off", "ou_boss", None, clock.now, {"version": 2}),
        ("readonly.on", "ou_admin", "oc_1", switched_at, {"version": 1}),
    ]


async def test_a_switch_for_an_older_version_changes_nothing(db, clock):
    """A card rendered at version 1 cannot switch the mode once it is at version 3."""
    org = OrgSettingsStore(db, clock=clock)
    assert (await org.set_read_only(True, actor="ou_a", chat_id=None, expected_version=0)).changed
    await org.set_read_only(False, actor="ou_a", chat_id=None)
    await org.set_read_only(True, actor="ou_a", chat_id=None)
    current = await org.read_only()
    assert current.version == 3
    stale = await org.set_read_only(False, actor="ou_a", chat_id=None, expected_version=1)
    assert (stale.changed, stale.stale, stale.mode) == (False, True, current)
    fresh = await org.set_read_only(False, actor="ou_a", chat_id=None, expected_version=3)
    assert fresh.changed and not fresh.stale and fresh.mode.version == 4
    # Asking for the state it already is in, at its version, is a no-op, not stale.
    same = await org.set_read_only(False, actor="ou_a", chat_id=None, expected_version=4)
    assert (same.changed, same.stale) == (False, False)


async def test_two_admins_switching_at_once_change_it_once(db, other_db, clock):
    stores = [OrgSettingsStore(db, clock=clock), OrgSettingsStore(other_db, clock=clock)]
    for on in (True, False, True):
        results = await asyncio.gather(
            *(
                store.set_read_only(on, actor=f"ou_{n}", chat_id=None)
                for n, store in enumerate(stores * 3)
            )
        )
        assert sum(switch.changed for switch in results) == 1
        assert {switch.mode.on for switch in results} == {on}
    actions = [entry.action for entry in await AuditLog(db, clock=clock).recent()]
    assert sorted(actions) == ["readonly.off", "readonly.on", "readonly.on"]


async def test_two_stale_cards_racing_one_fresh_switch_change_it_once(db, other_db, clock):
    stores = [OrgSettingsStore(db, clock=clock), OrgSettingsStore(other_db, clock=clock)]
    results = await asyncio.gather(
        *(
            store.set_read_only(True, actor="ou_a", chat_id=None, expected_version=0)
            for store in stores * 3
        )
    )
    assert sum(switch.changed for switch in results) == 1
    assert all(switch.stale for switch in results if not switch.changed)
    assert (await stores[0].read_only()).version == 1

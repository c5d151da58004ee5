"""Requests for consent: created pending, ended once (racers on two engines included).

A consent ends its request in the transaction that stores the person's tokens
(``UserTokenStore.save_consent``); its races with a withdrawal are in
``test_consent_and_withdrawal.py``."""

from __future__ import annotations

import asyncio

import pytest
from cryptography.fernet import Fernet

from bot.oauth_tokens import UserTokens
from bot.store.audit import AuditLog
from bot.store.user_authorizations import (
    AUTHORISED,
    CANCELLED,
    EXPIRED,
    PENDING,
    REFUSED,
    NewAuthorization,
    UserAuthorizationStore,
)
from bot.store.user_tokens import TokenCipher, UserTokenStore

CIPHER = TokenCipher.from_setting(Fernet.generate_key().decode())


def new(clock, *, id="nonce-1", open_id="ou_alice", ttl=600.0) -> NewAuthorization:
    return NewAuthorization(
        id=id,
        open_id=open_id,
        chat_id="oc_1",
        message_id="om_1",
        thread_id="",
        scopes=("calendar:calendar:readonly", "task:task:read"),
        purpose="read your calendar",
        flow="code",
        owner="host:1",
        expires_at=clock() + ttl,
    )


def tokens_of(clock, open_id="ou_alice") -> UserTokens:
    return UserTokens(open_id, "u-a", "ur-a", clock() + 7200, clock() + 86400, "task:task:read")


@pytest.fixture
def store(db, clock):
    return UserAuthorizationStore(db, clock=clock)


@pytest.fixture
def tokens(db, clock):
    return UserTokenStore(db, CIPHER, clock=clock)


async def test_a_request_is_created_pending_and_read_back(store, clock):
    created = await store.create(new(clock))
    assert created.state == PENDING
    assert created.scopes == ("calendar:calendar:readonly", "task:task:read")
    await store.set_card(created.id, "om_card")
    got = await store.get(created.id)
    assert got is not None and got.card_message_id == "om_card"
    assert await store.get("nope") is None
    assert await store.states([created.id, "nope"]) == {created.id: PENDING}
    assert await store.states([]) == {}


async def test_authorise_wins_once_and_is_audited(store, tokens, db, clock):
    await store.create(new(clock))
    first = await tokens.save_consent("nonce-1", tokens_of(clock))
    second = await tokens.save_consent("nonce-1", tokens_of(clock))
    assert first.changed and first.record.state == AUTHORISED
    assert not second.changed and second.record.state == AUTHORISED
    (entry,) = await AuditLog(db, clock=clock).recent(action="user_auth.")
    assert (entry.action, entry.actor, entry.chat_id) == ("user_auth.granted", "ou_alice", "oc_1")
    assert entry.detail["request"] == "nonce-1"


async def test_an_expired_request_cannot_be_authorised(store, tokens, clock):
    await store.create(new(clock, ttl=10))
    clock.advance(11)
    refused = await tokens.save_consent("nonce-1", tokens_of(clock))
    assert not refused.changed and refused.record.state == PENDING
    assert await tokens.get("ou_alice") is None
    expired = await store.expire_overdue()
    assert [r.id for r in expired] == ["nonce-1"] and expired[0].state == EXPIRED
    assert await store.expire_overdue() == []


async def test_close_ends_a_pending_request_once(store, clock):
    await store.create(new(clock))
    closed = await store.close("nonce-1", CANCELLED, "the run was stopped")
    assert closed.changed and closed.record.note == "the run was stopped"
    again = await store.close("nonce-1", REFUSED)
    assert not again.changed and again.record.state == CANCELLED
    assert not (await store.close("nope", EXPIRED)).changed
    with pytest.raises(ValueError, match="not closed as"):
        await store.close("nonce-1", AUTHORISED)


async def test_a_callback_racing_the_expiry_on_two_processes_has_one_winner(db, other_db, clock):
    here, there = (
        UserTokenStore(db, CIPHER, clock=clock),
        UserAuthorizationStore(other_db, clock=clock),
    )
    await there.create(new(clock))
    outcomes = await asyncio.gather(
        here.save_consent("nonce-1", tokens_of(clock)), there.close("nonce-1", EXPIRED)
    )
    assert sum(o.changed for o in outcomes) == 1
    assert outcomes[0].record.state == outcomes[1].record.state
    # Tokens only with the consent that won.
    assert (await here.get("ou_alice") is not None) == outcomes[0].changed


async def test_pending_of_and_purge(store, clock):
    await store.create(new(clock, id="a"))
    await store.create(new(clock, id="b", open_id="ou_bob"))
    clock.advance(1)
    await store.create(new(clock, id="c"))
    assert [r.id for r in await store.pending_of("ou_alice")] == ["c", "a"]
    await store.close("a", CANCELLED)
    clock.advance(700)  # all three are past their expiry now
    assert await store.purge(older_than_seconds=60) == 1  # only the ended one
    assert await store.get("a") is None
    assert await store.get("b") is not None

"""A consent and a withdrawal racing for one person's grant, at the store, on the real
database (SQLite, and PostgreSQL when configured), each side as its own process.

The attack (issue 32): Alice's callback has exchanged its code and is about to store her
tokens when she sends ``/logout`` (or an admin revokes her). Whatever the order in which
the two land, no grant may outlive the withdrawal, and a consent that loses stores
nothing and does not count as authorised.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest
from cryptography.fernet import Fernet
from sqlalchemy.engine import make_url

from bot.oauth_tokens import UserTokens
from bot.store.audit import AuditEntry, AuditLog
from bot.store.user_authorizations import (
    AUTHORISED,
    CANCELLED,
    EXPIRED,
    PENDING,
    NewAuthorization,
    UserAuthorizationStore,
)
from bot.store.user_tokens import TokenCipher, UserTokenStore

from support.postgres import connected
from support.waiting import wait_until

CIPHER = TokenCipher.from_setting(Fernet.generate_key().decode())
ALICE, BOB = "ou_alice", "ou_bob"
SCOPE = "contact:user.base:readonly"
LOGOUT = "withdrawn with /logout"


def request(clock, request_id: str, open_id: str = ALICE, ttl: float = 600.0) -> NewAuthorization:
    return NewAuthorization(
        id=request_id,
        open_id=open_id,
        chat_id="oc_1",
        message_id="om_1",
        thread_id="",
        scopes=(SCOPE,),
        purpose="tell you your name",
        flow="code",
        owner="host:1",
        expires_at=clock() + ttl,
    )


def consented(clock, open_id: str = ALICE, access: str = "u-consented") -> UserTokens:
    return UserTokens(open_id, access, "ur-consented", clock() + 7200, clock() + 86400, SCOPE)


def logout_of(open_id: str) -> AuditEntry:
    return AuditEntry("user_auth.logout", actor=open_id, target=open_id, chat_id="oc_1")


@pytest.fixture
def requests(db, clock):
    return UserAuthorizationStore(db, clock=clock)


@pytest.fixture
def callback(db, clock):
    """The token store of the process the callback reached."""
    return UserTokenStore(db, CIPHER, clock=clock)


@pytest.fixture
def logout(other_db, clock):
    """The token store of the process that handles /logout (or the console's revoke)."""
    return UserTokenStore(other_db, CIPHER, clock=clock)


async def audit_actions(db, clock) -> list[str]:
    return [e.action for e in reversed(await AuditLog(db, clock=clock).recent(action="user_auth."))]


async def test_a_consent_stores_its_tokens_in_the_transaction_that_authorises(
    requests, callback, db, clock
):
    await requests.create(request(clock, "r1"))
    won = await callback.save_consent("r1", consented(clock))
    assert won.changed and won.record.state == AUTHORISED
    assert await callback.get(ALICE) == consented(clock)
    again = await callback.save_consent("r1", consented(clock, access="u-again"))
    assert not again.changed and again.record.state == AUTHORISED
    assert (await callback.get(ALICE)).access_token == "u-consented"  # the first, once
    assert await audit_actions(db, clock) == ["user_auth.granted"]


async def test_a_consent_stores_nothing_for_a_request_not_its_persons_or_out_of_time(
    requests, callback, clock
):
    await requests.create(request(clock, "alices"))
    bobs_tokens = await callback.save_consent("alices", consented(clock, open_id=BOB))
    assert not bobs_tokens.changed and bobs_tokens.record.state == PENDING
    await requests.create(request(clock, "late", open_id=BOB, ttl=10))
    clock.advance(11)
    late = await callback.save_consent("late", consented(clock, open_id=BOB))
    assert not late.changed and late.record.state == PENDING
    unknown = await callback.save_consent("nope", consented(clock))
    assert not unknown.changed and unknown.record is None
    assert await callback.get(ALICE) is None and await callback.get(BOB) is None


async def test_a_withdrawal_that_lands_first_leaves_the_consent_nothing_to_store(
    requests, callback, logout, db, clock
):
    await requests.create(request(clock, "r1"))
    withdrawal = await logout.withdraw(ALICE, note=LOGOUT, audit=logout_of(ALICE))
    assert not withdrawal.deleted  # no grant yet: nothing audited
    (cancelled,) = withdrawal.cancelled
    assert (cancelled.id, cancelled.state, cancelled.note) == ("r1", CANCELLED, LOGOUT)
    # The callback already in flight now completes.
    lost = await callback.save_consent("r1", consented(clock))
    assert not lost.changed and lost.record.state == CANCELLED
    assert await callback.get(ALICE) is None
    assert await audit_actions(db, clock) == []


async def test_a_consent_that_lands_first_is_deleted_by_the_withdrawal(
    requests, callback, logout, db, clock
):
    await requests.create(request(clock, "r1"))
    assert (await callback.save_consent("r1", consented(clock))).changed
    withdrawal = await logout.withdraw(ALICE, note=LOGOUT, audit=logout_of(ALICE))
    assert withdrawal.deleted and withdrawal.cancelled == ()
    assert await callback.get(ALICE) is None
    assert (await requests.get("r1")).state == AUTHORISED  # it was, before the logout
    assert await audit_actions(db, clock) == ["user_auth.granted", "user_auth.logout"]


async def test_a_withdrawal_cancels_only_its_persons_pending_requests(
    requests, callback, logout, clock
):
    await requests.create(request(clock, "alice-open"))
    await requests.create(request(clock, "alice-older"))
    await requests.create(request(clock, "alice-ended"))
    await requests.close("alice-ended", EXPIRED)
    await requests.create(request(clock, "bobs", open_id=BOB))
    await callback.save_consent("bobs", consented(clock, open_id=BOB))
    withdrawal = await logout.withdraw(ALICE, note=LOGOUT)
    assert sorted(r.id for r in withdrawal.cancelled) == ["alice-older", "alice-open"]
    assert (await requests.get("alice-ended")).state == EXPIRED
    assert (await requests.get("bobs")).state == AUTHORISED
    assert await callback.get(BOB) is not None


async def test_a_consent_and_a_withdrawal_at_once_never_leave_a_grant(
    requests, callback, logout, clock
):
    """Both transactions started together on two engines, many times: one order or the
    other, never a mix (tokens stored with the request cancelled, or kept past the logout)."""
    for attempt in range(30):
        person = f"ou_racer_{attempt}"
        await requests.create(request(clock, f"r{attempt}", open_id=person))
        consent, withdrawal = await asyncio.gather(
            callback.save_consent(f"r{attempt}", consented(clock, open_id=person)),
            logout.withdraw(person, note=LOGOUT),
        )
        assert await callback.get(person) is None
        state = (await requests.get(f"r{attempt}")).state
        assert consent.changed == (state == AUTHORISED) == (withdrawal.cancelled == ())
        assert withdrawal.deleted == consent.changed


# -- PostgreSQL: both transactions inside the database at once, in a chosen order --------


async def waiting_for_locks(url: str, sessions: int) -> bool:
    """Whether ``sessions`` sessions of this database wait for a lock right now."""
    async with connected(make_url(url)) as connection:
        waiting = await connection.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
    return int(waiting) >= sessions


@pytest.mark.parametrize("first", ["consent", "withdrawal"])
async def test_on_postgres_racers_queued_on_the_requests_row_leave_no_grant(
    requests, callback, logout, migrated_url, clock, first
):
    """READ COMMITTED lets statements of two transactions interleave. A third session
    holds the request's row, both racers queue behind it in the order chosen, then it lets
    go. A withdrawal that deleted the grant before cancelling the requests would delete
    nothing (the consent not yet committed), then skip the request the consent authorised:
    the grant would survive the logout."""
    if requests._db.dialect != "postgresql":
        pytest.skip("SQLite runs write transactions one at a time")
    await requests.create(request(clock, "r1"))
    racers: dict[str, Awaitable[object]] = {
        "consent": callback.save_consent("r1", consented(clock)),
        "withdrawal": logout.withdraw(ALICE, note=LOGOUT),
    }
    second = "withdrawal" if first == "consent" else "consent"
    async with connected(make_url(migrated_url)) as holder:
        holder_tx = holder.transaction()
        await holder_tx.start()
        await holder.execute("SELECT 1 FROM user_authorizations WHERE id = 'r1' FOR UPDATE")
        tasks = {first: asyncio.ensure_future(racers[first])}
        await wait_until(lambda: waiting_for_locks(migrated_url, 1), failure=f"{first} not queued")
        tasks[second] = asyncio.ensure_future(racers[second])
        await wait_until(lambda: waiting_for_locks(migrated_url, 2), failure=f"{second} not queued")
        await holder_tx.rollback()
    consent = await tasks["consent"]
    withdrawal = await tasks["withdrawal"]
    assert await callback.get(ALICE) is None
    assert consent.changed == (first == "consent")
    assert withdrawal.deleted == (first == "consent")
    assert (await requests.get("r1")).state == (AUTHORISED if first == "consent" else CANCELLED)

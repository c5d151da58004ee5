"""Per-user tokens: encrypted at rest, refreshed once across processes, never logged."""

from __future__ import annotations

import asyncio
import logging

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import select

from bot.feishu.oauth_state import StateSigner, first_use
from bot.oauth_tokens import UserTokens
from bot.store.models import UserTokenRow, table_of
from bot.store.replays import ReplayGuard
from bot.store.user_tokens import (
    TokenCipher,
    TokenDecryptError,
    UserTokensMissing,
    UserTokenStore,
)

KEY = Fernet.generate_key().decode()
ACCESS, REFRESH = "u-plaintext-access-token", "ur-plaintext-refresh-token"


def tokens(clock, *, access=ACCESS, refresh=REFRESH, expires_in=7200.0, open_id="ou_alice"):
    return UserTokens(
        open_id=open_id,
        access_token=access,
        refresh_token=refresh,
        expires_at=clock() + expires_in,
        refresh_expires_at=clock() + 30 * 86400,
        scope="calendar:calendar task:task:read",
    )


@pytest.fixture
def store(db, clock):
    return UserTokenStore(db, TokenCipher.from_setting(KEY), clock=clock)


@pytest.fixture
def other_store(other_db, clock):
    return UserTokenStore(other_db, TokenCipher.from_setting(KEY), clock=clock)


async def _raw_rows(db):
    table = table_of(UserTokenRow)
    return await db.transact(lambda c: [r._asdict() for r in c.execute(select(table))])


async def test_round_trip_is_encrypted_at_rest(store, db, clock):
    saved = tokens(clock)
    await store.save("ou_alice", saved)
    assert await store.get("ou_alice") == saved
    (row,) = await _raw_rows(db)
    stored = " ".join(str(value) for value in row.values())
    assert ACCESS not in stored
    assert REFRESH not in stored
    assert row["expires_at"] == saved.expires_at  # metadata stays readable without the key


async def test_save_replaces_and_delete_forgets(store, clock):
    await store.save("ou_alice", tokens(clock))
    await store.save("ou_alice", tokens(clock, access="u-second"))
    assert (await store.get("ou_alice")).access_token == "u-second"
    assert await store.delete("ou_alice")
    assert await store.get("ou_alice") is None
    assert not await store.delete("ou_alice")


async def test_tokens_are_stored_only_for_who_granted_them(store, clock):
    with pytest.raises(ValueError, match="only ever stored"):
        await store.save("ou_bob", tokens(clock))


async def test_a_wrong_key_refuses_to_decrypt_with_a_clear_error(store, db, clock):
    await store.save("ou_alice", tokens(clock))
    wrong = UserTokenStore(db, TokenCipher.from_setting(Fernet.generate_key().decode()))
    with pytest.raises(TokenDecryptError, match="LARKGATE_TOKEN_KEY"):
        await wrong.get("ou_alice")


async def test_a_rotated_key_still_opens_old_rows(store, db, clock):
    await store.save("ou_alice", tokens(clock))
    rotated = TokenCipher.from_setting(f"{Fernet.generate_key().decode()},{KEY}")
    assert (await UserTokenStore(db, rotated).get("ou_alice")).access_token == ACCESS


async def test_a_ciphertext_moved_to_another_row_does_not_open(store, db, clock):
    await store.save("ou_alice", tokens(clock))
    await store.save("ou_bob", tokens(clock, open_id="ou_bob"))
    table = table_of(UserTokenRow)

    def swap(connection):
        alice = connection.execute(select(table.c.ciphertext).where(table.c.open_id == "ou_alice"))
        value = alice.scalar_one()
        connection.execute(
            table.update().where(table.c.open_id == "ou_bob").values(ciphertext=value)
        )

    await db.transact(swap)
    with pytest.raises(TokenDecryptError, match="not theirs"):
        await store.get("ou_bob")


@pytest.mark.parametrize("value", [None, "", " , ", "not-a-key", "x" * 44])
def test_a_missing_or_invalid_key_says_how_to_make_one(value):
    with pytest.raises(ValueError, match="LARKGATE_TOKEN_KEY") as refused:
        TokenCipher.from_setting(value)
    assert "Fernet.generate_key()" in str(refused.value)


async def test_fresh_tokens_are_not_refreshed(store, clock):
    await store.save("ou_alice", tokens(clock))

    async def refresh(_: str) -> UserTokens:
        raise AssertionError("not needed")

    got = await store.refresh_if_needed("ou_alice", within_seconds=300, refresh=refresh)
    assert got.access_token == ACCESS


async def test_refresh_without_tokens_raises(store):
    async def refresh(_: str) -> UserTokens:
        raise AssertionError("nothing to refresh")

    with pytest.raises(UserTokensMissing):
        await store.refresh_if_needed("ou_nobody", within_seconds=300, refresh=refresh)


async def test_concurrent_refresh_across_processes_calls_feishu_once(store, other_store, clock):
    await store.save("ou_alice", tokens(clock, expires_in=60))
    calls: list[str] = []

    async def refresh(refresh_token: str) -> UserTokens:
        calls.append(refresh_token)
        await asyncio.sleep(0.2)  # long enough for the other process to find the lease
        return tokens(clock, access="u-new", refresh="ur-new")

    results = await asyncio.gather(
        store.refresh_if_needed("ou_alice", within_seconds=300, refresh=refresh),
        other_store.refresh_if_needed("ou_alice", within_seconds=300, refresh=refresh),
    )
    assert calls == [REFRESH]
    assert [r.access_token for r in results] == ["u-new", "u-new"]
    assert (await other_store.get("ou_alice")).refresh_token == "ur-new"


async def test_a_failing_refresh_releases_the_lease(store, other_store, clock):
    await store.save("ou_alice", tokens(clock, expires_in=60))

    async def failing(_: str) -> UserTokens:
        raise RuntimeError("Feishu said no")

    with pytest.raises(RuntimeError, match="said no"):
        await store.refresh_if_needed("ou_alice", within_seconds=300, refresh=failing)

    async def working(_: str) -> UserTokens:
        return tokens(clock, access="u-after")

    # Another process does not wait for a lease nobody holds.
    got = await other_store.refresh_if_needed(
        "ou_alice", within_seconds=300, refresh=working, wait_seconds=0.0
    )
    assert got.access_token == "u-after"


async def test_a_dead_holders_lease_runs_out(store, other_store, clock):
    await store.save("ou_alice", tokens(clock, expires_in=60))
    assert await store._take_lease("ou_alice", 30.0)  # then the process dies

    async def refresh(_: str) -> UserTokens:
        return tokens(clock, access="u-after")

    with pytest.raises(TimeoutError):
        await other_store.refresh_if_needed(
            "ou_alice", within_seconds=300, refresh=refresh, wait_seconds=0.1
        )
    clock.advance(31)
    got = await other_store.refresh_if_needed("ou_alice", within_seconds=300, refresh=refresh)
    assert got.access_token == "u-after"


async def test_a_revoke_during_a_refresh_stays_revoked(store, other_store, clock):
    # /logout (or an admin's revoke, on another replica) lands while Feishu answers the
    # refresh: the refreshed tokens must not bring the grant back.
    await store.save("ou_alice", tokens(clock, expires_in=60))

    async def refresh(_: str) -> UserTokens:
        assert await other_store.delete("ou_alice")
        return tokens(clock, access="u-resurrected", refresh="ur-resurrected")

    with pytest.raises(UserTokensMissing):
        await store.refresh_if_needed("ou_alice", within_seconds=300, refresh=refresh)
    assert await store.get("ou_alice") is None
    assert await _raw_rows(store._db) == []


async def test_a_consent_during_a_refresh_keeps_the_new_grant(store, other_store, clock):
    # The person consents to more scopes while another replica refreshes the old grant:
    # the refresh of the old grant must not overwrite the new one.
    await store.save("ou_alice", tokens(clock, expires_in=60))
    wider = UserTokens(
        open_id="ou_alice",
        access_token="u-consented",
        refresh_token="ur-consented",
        expires_at=clock() + 7200,
        refresh_expires_at=clock() + 30 * 86400,
        scope="calendar:calendar task:task:read contact:user.base:readonly",
    )

    async def refresh(_: str) -> UserTokens:
        await other_store.save("ou_alice", wider)
        return tokens(clock, access="u-refreshed-old", refresh="ur-refreshed-old")

    got = await store.refresh_if_needed("ou_alice", within_seconds=300, refresh=refresh)
    assert got.access_token == "u-consented" and got.scope == wider.scope
    stored = await other_store.get("ou_alice")
    assert stored.access_token == "u-consented" and stored.scope == wider.scope
    # ... and no lease is left behind for the next refresh to wait on.
    (row,) = await _raw_rows(store._db)
    assert row["refresh_owner"] == "" and row["refreshing_until"] == 0.0


class GrantGone(Exception):
    """Stands for Feishu refusing the refresh token (the store knows no Feishu errors)."""


async def _refresh_failing(store, clock, error: Exception, *, before=None) -> None:
    """A refresh of a grant about to expire that raises ``error`` (after ``before()``)."""
    await store.save("ou_alice", tokens(clock, expires_in=60))

    async def refresh(_: str) -> UserTokens:
        if before is not None:
            await before()
        raise error

    with pytest.raises(type(error)):
        await store.refresh_if_needed(
            "ou_alice", within_seconds=300, refresh=refresh, gone=(GrantGone,)
        )


async def test_a_grant_whose_refresh_is_refused_as_gone_is_deleted(store, clock):
    await _refresh_failing(store, clock, GrantGone("20064 revoked"))
    assert await _raw_rows(store._db) == []


async def test_a_consent_during_a_refused_refresh_keeps_the_new_grant(store, other_store, clock):
    # Feishu refuses the old refresh token (the person revoked it, then consented again on
    # another replica while the refusal was on its way): deleting "the grant" then would
    # delete the consent they just gave.
    async def consent() -> None:
        await other_store.save("ou_alice", tokens(clock, access="u-consented"))

    await _refresh_failing(store, clock, GrantGone("20064 revoked"), before=consent)
    stored = await other_store.get("ou_alice")
    assert stored is not None and stored.access_token == "u-consented"


async def test_other_failures_of_a_refresh_keep_the_grant(store, clock):
    await _refresh_failing(store, clock, ConnectionError("no answer"))
    assert (await store.get("ou_alice")).access_token == ACCESS


async def test_a_refresh_for_another_person_is_refused(store, clock):
    await store.save("ou_alice", tokens(clock, expires_in=60))

    async def refresh(_: str) -> UserTokens:
        return tokens(clock, open_id="ou_bob")

    with pytest.raises(ValueError, match="another person"):
        await store.refresh_if_needed("ou_alice", within_seconds=300, refresh=refresh)
    assert (await store.get("ou_alice")).access_token == ACCESS


async def test_no_token_plaintext_in_logs_or_reprs(store, db, clock, caplog):
    caplog.set_level(logging.DEBUG)
    saved = tokens(clock, expires_in=60)
    await store.save("ou_alice", saved)
    await store.get("ou_alice")

    async def refresh(_: str) -> UserTokens:
        return tokens(clock, access="u-new-secret", refresh="ur-new-secret")

    await store.refresh_if_needed("ou_alice", within_seconds=300, refresh=refresh)
    await store.delete("ou_alice")
    shown = caplog.text + repr(saved) + repr(store) + repr(TokenCipher.from_setting(KEY))
    for secret in (ACCESS, REFRESH, "u-new-secret", "ur-new-secret", KEY):
        assert secret not in shown
    assert "ou_alice" in repr(saved)


async def test_a_state_is_used_once_across_processes(db, other_db, clock):
    signer = StateSigner("secret")
    issued = signer.issue(open_id="ou_alice", chat_id="oc_1", now=clock(), ttl_seconds=600)
    claims = signer.verify(issued.state, now=clock())
    first, second = await asyncio.gather(
        first_use(ReplayGuard(db, clock=clock), claims, now=clock()),
        first_use(ReplayGuard(other_db, clock=clock), claims, now=clock()),
    )
    assert sorted([first, second]) == [False, True]


async def test_grants_list_who_authorised_without_a_key_or_a_token(store, db, clock):
    await store.save("ou_alice", tokens(clock))
    clock.advance(5)
    await store.save("ou_bob", tokens(clock, open_id="ou_bob", access="u-bob", refresh="ur-bob"))
    keyless = UserTokenStore(db, TokenCipher.from_setting(Fernet.generate_key().decode()))
    grants = await keyless.grants()
    assert [g.open_id for g in grants] == ["ou_bob", "ou_alice"]  # most recently renewed first
    assert grants[1].scope == "calendar:calendar task:task:read"
    assert grants[1].expires_at == clock() - 5 + 7200
    shown = repr(grants)
    for secret in (ACCESS, REFRESH, "u-bob", "ur-bob"):
        assert secret not in shown


async def test_a_delete_writes_its_audit_row_only_when_it_deleted(store, db, clock):
    from bot.store.audit import AuditEntry, AuditLog

    entry = AuditEntry("user_auth.revoked", actor="ou_admin", target="ou_alice")
    assert not await store.delete("ou_alice", audit=entry)
    await store.save("ou_alice", tokens(clock))
    assert await store.delete("ou_alice", audit=entry)
    (row,) = await AuditLog(db, clock=clock).recent()
    assert (row.action, row.actor, row.target) == ("user_auth.revoked", "ou_admin", "ou_alice")

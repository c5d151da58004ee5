"""Per-user Feishu tokens, encrypted at rest, refreshed by one process at a time.

The tokens let the bot act as a person in Feishu, so a copy of the database must not be a
copy of everyone's access: the access and refresh tokens are sealed with Fernet
(AES-128-CBC + HMAC-SHA256) under ``LARKGATE_TOKEN_KEY`` before they reach a row, together
with the owner's open_id, so a ciphertext moved onto another person's row does not open.

Feishu rotates the refresh token on every use, and a used one fails (20073). Two replicas
refreshing the same person at once would therefore log them out, so ``refresh_if_needed``
takes a lease on the row (a conditional update of ``refreshing_until``, as the ledger's
claims do): the holder refreshes, the others poll until the new tokens are there.

A grant is made and taken away together with the person's requests (``user_authorizations``),
each in one transaction, because a callback in flight and a ``/logout`` race:

- ``save_consent``: the request goes pending → authorised by its conditional update, and
  only when that update wins are the tokens written. A consent that comes after a
  withdrawal finds its request cancelled and stores nothing; a waiter that sees the request
  authorised (here, or through another replica's watcher) finds the grant already there.
- ``withdraw``: the person's pending requests are cancelled first, then the grant is
  deleted. On PostgreSQL (READ COMMITTED) the order matters: the cancel waits for the row
  lock of a consent that already moved a request, skips that request once it commits, and
  the delete that follows (a new statement, a new snapshot) removes the tokens that consent
  stored. Deleting first would miss them, the consent not yet committed. On SQLite, write
  transactions run one at a time anyway.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.engine import Connection

from bot.oauth_tokens import UserTokens
from bot.store.audit import AuditEntry, write_audit
from bot.store.db import Database
from bot.store.models import UserTokenRow, table_of
from bot.store.user_authorizations import (
    AuthorizationRecord,
    Transition,
    authorise_request,
    cancel_pending_requests,
)

logger = logging.getLogger(__name__)

_t = table_of(UserTokenRow)
_c = _t.c

KEY_SETTING = "LARKGATE_TOKEN_KEY"
_MAKE_KEY = (
    'python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"'
)


class TokenDecryptError(Exception):
    """Stored tokens that do not open with the configured key (changed, or tampered with)."""


class UserTokensMissing(LookupError):
    """The person has no stored tokens: they must authorise first."""


@dataclass(frozen=True, slots=True)
class UserGrant:
    """What is known of a person's stored authorisation without the key: never a token."""

    open_id: str
    scope: str
    expires_at: float
    refresh_expires_at: float
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class Withdrawal:
    """What ``withdraw`` did: whether there was a grant, and the requests it cancelled."""

    deleted: bool
    cancelled: tuple[AuthorizationRecord, ...]


class TokenCipher:
    """Seals and opens token payloads. Several comma-separated keys rotate: the first
    seals, any of them opens (cryptography's MultiFernet)."""

    def __init__(self, keys: list[bytes]) -> None:
        self._fernet = MultiFernet([Fernet(key) for key in keys])

    def __repr__(self) -> str:
        return "TokenCipher(<keys hidden>)"

    @classmethod
    def from_setting(cls, value: str | None) -> TokenCipher:
        """The cipher of a ``LARKGATE_TOKEN_KEY`` value; ValueError saying how to fix it."""
        keys = [part.strip() for part in (value or "").split(",") if part.strip()]
        if not keys:
            raise ValueError(f"{KEY_SETTING} is not set; make one with: {_MAKE_KEY}")
        try:
            return cls([key.encode("ascii") for key in keys])
        except (ValueError, UnicodeEncodeError):
            # Fernet's own message would not say which setting is wrong.
            raise ValueError(
                f"{KEY_SETTING} must be url-safe base64 of 32 bytes (a Fernet key); "
                f"make one with: {_MAKE_KEY}"
            ) from None

    def seal(self, open_id: str, tokens: UserTokens) -> str:
        payload = {"o": open_id, "a": tokens.access_token, "r": tokens.refresh_token}
        return self._fernet.encrypt(json.dumps(payload).encode()).decode("ascii")

    def open(self, open_id: str, ciphertext: str) -> tuple[str, str]:
        """(access token, refresh token) of a row of ``open_id``."""
        try:
            payload = json.loads(self._fernet.decrypt(ciphertext.encode("ascii")))
        except (InvalidToken, ValueError):
            raise TokenDecryptError(
                f"the stored Feishu tokens of {open_id} do not decrypt with {KEY_SETTING} "
                "(was the key changed? keep the old key after the new one, comma-separated, "
                "or have the person authorise again)"
            ) from None
        if not isinstance(payload, dict) or payload.get("o") != open_id:
            raise TokenDecryptError(f"the stored Feishu tokens of {open_id} are not theirs")
        return str(payload["a"]), str(payload["r"])


# What storing a grant writes (from a ``_row``), and that no refresh lease is held after it.
_GRANT_WRITE: dict[str, Any] = {
    name: bindparam("p_" + name)
    for name in ("ciphertext", "expires_at", "refresh_expires_at", "scope")
} | {"updated_at": bindparam("p_now"), "refreshing_until": 0.0, "refresh_owner": ""}


class UserTokenStore:
    def __init__(
        self,
        db: Database,
        cipher: TokenCipher,
        *,
        clock: Callable[[], float] = time.time,
        owner: str | None = None,
    ) -> None:
        self._db = db
        self._cipher = cipher
        self._clock = clock
        # Who holds a refresh lease: this store, in this process.
        self._owner = owner or secrets.token_hex(8)
        self._upsert = (
            db.insert(_t)
            .on_conflict_do_update(
                index_elements=["open_id"],
                # A consent outranks a refresh in flight: taking its lease away makes that
                # refresh's write find nothing to update (see _store_refreshed).
                set_=_GRANT_WRITE,
            )
            .values(open_id=bindparam("p_open_id"), created_at=bindparam("p_now"), **_GRANT_WRITE)
        )

    def __repr__(self) -> str:
        return "UserTokenStore(...)"

    async def save(self, open_id: str, tokens: UserTokens) -> None:
        """Store a grant outright, whatever its requests say. A consent goes through
        ``save_consent`` instead, which a withdrawal can outrun."""
        if tokens.open_id != open_id:
            raise ValueError("tokens are only ever stored for the person who granted them")
        await self._db.transact(_save, self._upsert, self._row(open_id, tokens))
        logger.info("stored Feishu user tokens of %s (scope %s)", open_id, tokens.scope)

    async def save_consent(self, request_id: str, tokens: UserTokens) -> Transition:
        """The consent that answers request ``request_id``: the request authorised and, only
        if that transition won, ``tokens`` stored, in one transaction (see the module doc).

        Unchanged (nothing stored) when the request has ended (cancelled by a withdrawal,
        expired, answered already), has run out of time, or is not ``tokens``' owner's.
        """
        row = self._row(tokens.open_id, tokens)
        transition = await self._db.transact(
            _save_consent, self._upsert, request_id, row, tokens.scope
        )
        if transition.changed:
            logger.info("stored Feishu user tokens of %s (scope %s)", tokens.open_id, tokens.scope)
        return transition

    async def withdraw(
        self, open_id: str, *, note: str, audit: AuditEntry | None = None
    ) -> Withdrawal:
        """Forget the person's grant and cancel their pending requests (with ``note``), in
        one transaction: ``/logout``, an admin's revoke. A consent racing it either comes
        first and is deleted, or comes second and finds its request cancelled.

        ``audit`` is written in the same transaction, and only when there was a grant.
        """
        withdrawal = await self._db.transact(_withdraw, open_id, note, audit, self._clock())
        if withdrawal.deleted or withdrawal.cancelled:
            logger.info(
                "withdrew the Feishu grant of %s (tokens deleted: %s, requests cancelled: %d)",
                open_id,
                withdrawal.deleted,
                len(withdrawal.cancelled),
            )
        return withdrawal

    async def get(self, open_id: str) -> UserTokens | None:
        row = await self._db.transact(_read, open_id, write=False)
        return None if row is None else self._tokens(row)

    async def delete(self, open_id: str, *, audit: AuditEntry | None = None) -> bool:
        """Forget the person's tokens (``/logout``, an admin's revoke); True if there were any.

        ``audit`` is written in the same transaction, and only when there was something to
        delete.
        """
        deleted = await self._db.transact(_delete, open_id, audit, self._clock())
        if deleted:
            logger.info("deleted the Feishu user tokens of %s", open_id)
        return deleted

    async def grants(self) -> list[UserGrant]:
        """Everyone's stored authorisation, most recently renewed first (no key needed)."""
        return await self._db.transact(_grants, write=False)

    async def refresh_if_needed(
        self,
        open_id: str,
        *,
        within_seconds: float,
        refresh: Callable[[str], Awaitable[UserTokens]],
        gone: tuple[type[Exception], ...] = (),
        lease_seconds: float = 30.0,
        wait_seconds: float = 15.0,
        poll_seconds: float = 0.05,
    ) -> UserTokens:
        """The person's tokens, refreshed first when they expire within ``within_seconds``.

        ``refresh(refresh_token)`` is called by one process at a time across replicas; the
        others poll (every ``poll_seconds``, up to ``wait_seconds``: TimeoutError after)
        and return what it stored. A failing ``refresh`` releases the lease and raises.
        An exception of a ``gone`` type says the grant itself is dead (its refresh token
        refused): the grant is deleted, under the lease, so a new consent that replaced it
        during the refresh is kept; then the exception is raised.
        Raises UserTokensMissing when there is nothing to refresh.
        """
        deadline = asyncio.get_running_loop().time() + wait_seconds
        while True:
            tokens = await self.get(open_id)
            if tokens is None:
                raise UserTokensMissing(open_id)
            if not tokens.expires_within(within_seconds, now=self._clock()):
                return tokens
            if await self._take_lease(open_id, lease_seconds):
                fresh = await self._refresh_holding_lease(open_id, within_seconds, refresh, gone)
                if fresh is not None:
                    return fresh
                continue  # revoked, or consented again, meanwhile: read what is stored now
            if asyncio.get_running_loop().time() >= deadline:
                raise TimeoutError(f"another process is still refreshing the tokens of {open_id}")
            await asyncio.sleep(poll_seconds)

    async def _refresh_holding_lease(
        self,
        open_id: str,
        within_seconds: float,
        refresh: Callable[[str], Awaitable[UserTokens]],
        gone: tuple[type[Exception], ...],
    ) -> UserTokens | None:
        """The refreshed tokens; None when they were not stored because the grant changed
        under the lease (a revoke deleted it, a new consent replaced it, or the lease ran
        out and another process took it)."""
        try:
            # Read again under the lease: the previous holder may have just finished.
            tokens = await self.get(open_id)
            if tokens is None:
                raise UserTokensMissing(open_id)
            if not tokens.expires_within(within_seconds, now=self._clock()):
                await self._release(open_id)
                return tokens
            fresh = await refresh(tokens.refresh_token)
            if fresh.open_id != open_id:
                raise ValueError("a refresh returned another person's tokens")
        except gone:
            # Only while the lease is still ours: a consent that replaced the grant
            # meanwhile took the lease away, and stays.
            if await self._db.transact(_delete_leased, open_id, self._owner):
                logger.info("deleted the Feishu user tokens of %s: their grant is gone", open_id)
            else:
                logger.info("the refused grant of %s was replaced meanwhile; kept", open_id)
            raise
        except BaseException:
            await self._release(open_id)
            logger.warning("refreshing the Feishu user tokens of %s failed", open_id)
            raise
        row = self._row(open_id, fresh) | {"p_owner": self._owner}
        if not await self._db.transact(_store_refreshed, row):
            logger.info("the Feishu user tokens of %s changed during a refresh; kept", open_id)
            return None
        logger.info("refreshed the Feishu user tokens of %s", open_id)
        return fresh

    async def _take_lease(self, open_id: str, lease_seconds: float) -> bool:
        now = self._clock()
        return await self._db.transact(_take, open_id, self._owner, now, now + lease_seconds)

    async def _release(self, open_id: str) -> None:
        await self._db.transact(_release, open_id, self._owner)

    def _row(self, open_id: str, tokens: UserTokens) -> dict[str, Any]:
        return {
            "p_open_id": open_id,
            "p_ciphertext": self._cipher.seal(open_id, tokens),
            "p_expires_at": tokens.expires_at,
            "p_refresh_expires_at": tokens.refresh_expires_at,
            "p_scope": tokens.scope,
            "p_now": self._clock(),
        }

    def _tokens(self, row: Any) -> UserTokens:
        access, refresh = self._cipher.open(row.open_id, row.ciphertext)
        return UserTokens(
            open_id=row.open_id,
            access_token=access,
            refresh_token=refresh,
            expires_at=row.expires_at,
            refresh_expires_at=row.refresh_expires_at,
            scope=row.scope,
        )


def _save(connection: Connection, upsert: Any, row: dict[str, Any]) -> None:
    connection.execute(upsert, row)


def _save_consent(
    connection: Connection, upsert: Any, request_id: str, row: dict[str, Any], scope: str
) -> Transition:
    transition = authorise_request(
        connection, request_id, open_id=row["p_open_id"], scope=scope, now=row["p_now"]
    )
    if transition.changed:
        connection.execute(upsert, row)
    return transition


def _withdraw(
    connection: Connection, open_id: str, note: str, audit: AuditEntry | None, now: float
) -> Withdrawal:
    # The requests before the grant: see the module doc for why the order matters.
    cancelled = cancel_pending_requests(connection, open_id, note=note, now=now)
    return Withdrawal(_delete(connection, open_id, audit, now), tuple(cancelled))


# An update, never an upsert, and only while this process still holds the lease: a revoke
# that deleted the row stays revoked, and a consent that replaced the grant is kept.
_STORE_REFRESHED = (
    update(_t)
    .where(_c.open_id == bindparam("p_open_id"), _c.refresh_owner == bindparam("p_owner"))
    .values(**_GRANT_WRITE)
)


def _store_refreshed(connection: Connection, row: dict[str, Any]) -> bool:
    return bool(connection.execute(_STORE_REFRESHED, row).rowcount)


def _read(connection: Connection, open_id: str) -> Any:
    return connection.execute(select(_t).where(_c.open_id == open_id)).first()


def _delete(connection: Connection, open_id: str, audit: AuditEntry | None, now: float) -> bool:
    deleted = bool(connection.execute(delete(_t).where(_c.open_id == open_id)).rowcount)
    if deleted and audit is not None:
        write_audit(connection, audit, now)
    return deleted


def _delete_leased(connection: Connection, open_id: str, owner: str) -> bool:
    deleted = connection.execute(
        delete(_t).where(_c.open_id == open_id, _c.refresh_owner == owner)
    ).rowcount
    return bool(deleted)


def _grants(connection: Connection) -> list[UserGrant]:
    columns = [getattr(_c, name) for name in UserGrant.__slots__]
    rows = connection.execute(select(*columns).order_by(_c.updated_at.desc(), _c.open_id))
    return [UserGrant(*row) for row in rows]


def _take(connection: Connection, open_id: str, owner: str, now: float, until: float) -> bool:
    taken = connection.execute(
        update(_t)
        .where(_c.open_id == open_id, _c.refreshing_until <= now)
        .values(refreshing_until=until, refresh_owner=owner, updated_at=now)
    )
    return bool(taken.rowcount)


def _release(connection: Connection, open_id: str, owner: str) -> None:
    connection.execute(
        update(_t)
        .where(_c.open_id == open_id, _c.refresh_owner == owner)
        .values(refreshing_until=0.0, refresh_owner="")
    )

"""Requests for a person's consent to act as them, shared by every process.

A request is created ``pending`` by the process that posts its authorisation card (and,
for a tool call, waits for it). It ends exactly once, by a conditional update
(``WHERE state = 'pending'``): ``authorised`` when the person consented (the callback or
the device-code poll, on whichever replica it lands), ``expired`` when its time ran out,
``cancelled`` when its run stopped or its person withdrew (``/logout``, an admin's
revoke), ``refused`` when the consent came from someone else or Feishu refused it. Of two
racers (a callback and the expiry, two replicas) exactly one wins; the loser reads the row
as the winner left it.

The two transitions that go with a grant are not methods here but statements that
``user_tokens`` runs inside its own transactions (``authorise_request``,
``cancel_pending_requests``): a consent is authorised in the transaction that stores its
tokens (with its audit row), and a withdrawal cancels the person's pending requests in the
transaction that deletes their grant. No token is ever stored here (they are in
``user_tokens``, sealed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Integer, bindparam, delete, select, update
from sqlalchemy.engine import Connection

from bot.store.audit import AuditEntry, write_audit
from bot.store.db import Database
from bot.store.models import UserAuthorizationRow, table_of

AuthorizationState = Literal["pending", "authorised", "expired", "cancelled", "refused"]
PENDING: AuthorizationState = "pending"
AUTHORISED: AuthorizationState = "authorised"
EXPIRED: AuthorizationState = "expired"
CANCELLED: AuthorizationState = "cancelled"
REFUSED: AuthorizationState = "refused"
CLOSED_STATES: tuple[AuthorizationState, ...] = (AUTHORISED, EXPIRED, CANCELLED, REFUSED)

_t = table_of(UserAuthorizationRow)
_c = _t.c


@dataclass(frozen=True, slots=True)
class NewAuthorization:
    id: str  # the OAuth state's nonce (or a fresh id in the device flow)
    open_id: str
    chat_id: str
    message_id: str
    thread_id: str
    scopes: tuple[str, ...]
    purpose: str
    flow: str  # "code" or "device"
    owner: str
    expires_at: float


@dataclass(frozen=True, slots=True)
class AuthorizationRecord:
    id: str
    open_id: str
    chat_id: str
    message_id: str
    thread_id: str
    scopes: tuple[str, ...]
    purpose: str
    flow: str
    state: AuthorizationState
    note: str | None
    card_message_id: str | None
    owner: str
    created_at: float
    expires_at: float
    decided_at: float | None


@dataclass(frozen=True, slots=True)
class Transition:
    """Whether this call moved the request, and the request as it is now (None: no such)."""

    changed: bool
    record: AuthorizationRecord | None


def _record(row: Mapping[Any, Any]) -> AuthorizationRecord:
    values = {name: row[name] for name in AuthorizationRecord.__slots__}
    values["scopes"] = tuple(str(row["scopes"]).split())
    values["state"] = _record_state(str(row["state"]))
    return AuthorizationRecord(**values)


_ONE = _c.id == bindparam("p_id")
_IS_PENDING = _c.state == PENDING
_RETURN = tuple(_t.c)
_INSERT = _t.insert().returning(*_RETURN)
_BY_ID = select(_t).where(_ONE)
_SET_CARD = update(_t).where(_ONE).values(card_message_id=bindparam("p_card"))
_CLOSE = update(_t).values(
    state=bindparam("p_state"), note=bindparam("p_note"), decided_at=bindparam("now")
)
_CLOSE_ONE = _CLOSE.where(_ONE, _IS_PENDING).returning(*_RETURN)
_OF_PERSON = _c.open_id == bindparam("p_open_id")
# A consent counts only while its request is pending, its time has not run out, and it is
# the request of the person whose tokens come with it.
_AUTHORISE = (
    _CLOSE.where(_ONE, _IS_PENDING, _OF_PERSON, _c.expires_at > bindparam("now"))
    .values(state=AUTHORISED, note=None)
    .returning(*_RETURN)
)
_CANCEL_PENDING_OF = (
    _CLOSE.where(_OF_PERSON, _IS_PENDING).values(state=CANCELLED).returning(*_RETURN)
)
_EXPIRE_OVERDUE = (
    _CLOSE.where(_IS_PENDING, _c.expires_at <= bindparam("now"))
    .values(state=EXPIRED, note=None)
    .returning(*_RETURN)
)
_STATES = select(_c.id, _c.state).where(_c.id.in_(bindparam("p_ids", expanding=True)))
_PURGE = delete(_t).where(_c.state != PENDING, _c.expires_at < bindparam("before"))
_PENDING_OF = (
    select(_t)
    .where(_OF_PERSON, _IS_PENDING)
    .order_by(_c.created_at.desc())
    .limit(bindparam("limit", type_=Integer))
)


class UserAuthorizationStore:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock

    async def create(self, new: NewAuthorization) -> AuthorizationRecord:
        values = {name: getattr(new, name) for name in NewAuthorization.__slots__}
        values.update(scopes=" ".join(new.scopes), state=PENDING, created_at=self._clock())
        return await self._db.transact(_create, values)

    async def get(self, authorization_id: str) -> AuthorizationRecord | None:
        return await self._db.transact(_get, authorization_id, write=False)

    async def set_card(self, authorization_id: str, card_message_id: str) -> None:
        await self._db.transact(
            _execute, _SET_CARD, {"p_id": authorization_id, "p_card": card_message_id}
        )

    async def close(
        self, authorization_id: str, state: AuthorizationState, note: str | None = None
    ) -> Transition:
        """Expire, cancel or refuse a pending request (a no-op once it has ended)."""
        if state not in (EXPIRED, CANCELLED, REFUSED):
            raise ValueError(f"a request is not closed as {state!r}")
        params = {"p_id": authorization_id, "p_state": state, "p_note": note, "now": self._clock()}
        return await self._db.transact(_close, params)

    async def expire_overdue(self) -> list[AuthorizationRecord]:
        """Close every pending request whose time ran out (whoever posted it is gone)."""
        return await self._db.transact(_expire_overdue, self._clock())

    async def states(self, ids: Collection[str]) -> dict[str, AuthorizationState]:
        if not ids:
            return {}
        return await self._db.transact(_states, list(ids), write=False)

    async def pending_of(self, open_id: str, *, limit: int = 20) -> list[AuthorizationRecord]:
        """The person's requests still open, newest first."""
        return await self._db.transact(_pending_of, open_id, limit, write=False)

    async def purge(self, *, older_than_seconds: float = 86_400.0) -> int:
        """Forget ended requests that expired that long ago; returns how many."""
        before = self._clock() - older_than_seconds
        return await self._db.transact(_purge, before)


def _create(connection: Connection, values: dict[str, Any]) -> AuthorizationRecord:
    return _record(connection.execute(_INSERT, values).mappings().one())


def _get(connection: Connection, authorization_id: str) -> AuthorizationRecord | None:
    row = connection.execute(_BY_ID, {"p_id": authorization_id}).mappings().first()
    return None if row is None else _record(row)


def _execute(connection: Connection, statement: Any, params: dict[str, Any]) -> None:
    connection.execute(statement, params)


def authorise_request(
    connection: Connection, authorization_id: str, *, open_id: str, scope: str, now: float
) -> Transition:
    """In the caller's transaction: ``open_id`` consented to their pending request, the one
    transition that counts (audited with it). Unchanged when the request has ended, has run
    out of time or is someone else's."""
    params = {"p_id": authorization_id, "p_open_id": open_id, "now": now}
    row = connection.execute(_AUTHORISE, params).mappings().first()
    if row is None:
        return Transition(False, _get(connection, authorization_id))
    record = _record(row)
    entry = AuditEntry(
        "user_auth.granted",
        actor=record.open_id,
        target=record.open_id,
        chat_id=record.chat_id,
        detail={"request": record.id, "flow": record.flow, "scope": scope},
    )
    write_audit(connection, entry, now)
    return Transition(True, record)


def cancel_pending_requests(
    connection: Connection, open_id: str, *, note: str, now: float
) -> list[AuthorizationRecord]:
    """In the caller's transaction: cancel every pending request of ``open_id``; the
    requests as they now are. On PostgreSQL the update waits for a consent that already
    moved one of them to commit, and then leaves that one alone (it is no longer pending)."""
    params = {"p_open_id": open_id, "p_note": note, "now": now}
    return [_record(row) for row in connection.execute(_CANCEL_PENDING_OF, params).mappings()]


def _close(connection: Connection, params: dict[str, Any]) -> Transition:
    row = connection.execute(_CLOSE_ONE, params).mappings().first()
    if row is None:
        return Transition(False, _get(connection, params["p_id"]))
    return Transition(True, _record(row))


def _expire_overdue(connection: Connection, now: float) -> list[AuthorizationRecord]:
    return [_record(row) for row in connection.execute(_EXPIRE_OVERDUE, {"now": now}).mappings()]


def _states(connection: Connection, ids: list[str]) -> dict[str, AuthorizationState]:
    rows = connection.execute(_STATES, {"p_ids": ids})
    return {row.id: _record_state(row.state) for row in rows}


def _record_state(state: str) -> AuthorizationState:
    """A stored state as one this code knows (an unknown one reads as ended)."""
    for known in (PENDING, *CLOSED_STATES):
        if state == known:
            return known
    return CANCELLED


def _pending_of(connection: Connection, open_id: str, limit: int) -> list[AuthorizationRecord]:
    rows = connection.execute(_PENDING_OF, {"p_open_id": open_id, "limit": limit}).mappings()
    return [_record(row) for row in rows]


def _purge(connection: Connection, before: float) -> int:
    return connection.execute(_PURGE, {"before": before}).rowcount or 0

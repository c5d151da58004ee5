"""The persistent message ledger: dedup on message_id with claim → done states and leases.

A process claims a message for a lease and renews it while it works. When the process dies, its
lease runs out and a live process takes the message over (`take_over_expired`, or the claim of a
redelivery), without waiting for Feishu to redeliver it. Every transition is a conditional update,
so of two racers (tasks or processes) exactly one wins; every method is one short transaction
(`Database.transact`: the statements run together in a synchronous function) and reads the time
from the injected clock.

States: `claimed` (being handled) → `replied` (the reply message exists; the run may still be
streaming) → `done`. `dropped` marks a stale or ignored message, so redeliveries are cheap
no-ops; `failed` marks a message whose attempts ran out, so a poison message cannot crash-loop
the bot. A lease is live while `lease_until > now`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Integer, and_, bindparam, delete, or_, select, update
from sqlalchemy.engine import Connection

from bot.store.db import Database
from bot.store.models import CLAIMED, DONE, DROPPED, FAILED, REPLIED, MessageClaimRow, table_of
from bot.store.prepared import Prepared

ClaimOutcome = Literal["claimed", "taken_over", "duplicate_done", "duplicate_in_progress"]

ACTIVE_STATES = (CLAIMED, REPLIED)
FINAL_STATES = (DONE, DROPPED, FAILED)
DEFAULT_MAX_ATTEMPTS = 3

_claims = table_of(MessageClaimRow)
_c = _claims.c


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to a claim: who holds the message now and what it carries.

    `outcome` is `claimed` (first sight) or `taken_over` (a dead holder's lease ran out; check
    `state == "replied"` and `reply_message_id`: a reply may already exist) when the caller now
    owns the message; `duplicate_in_progress` or `duplicate_done` when it must leave it alone.
    """

    outcome: ClaimOutcome
    message_id: str
    state: str
    attempts: int
    payload: dict[str, Any]
    owner: str
    lease_until: float
    conversation_key: str | None = None
    reply_message_id: str | None = None

    @property
    def acquired(self) -> bool:
        return self.outcome in ("claimed", "taken_over")


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One row of the ledger, as stored."""

    message_id: str
    state: str
    owner: str
    lease_until: float
    attempts: int
    payload: dict[str, Any]
    conversation_key: str | None
    reply_message_id: str | None
    reason: str | None
    created_at: float
    updated_at: float


def _entry(row: Mapping[Any, Any]) -> LedgerEntry:
    return LedgerEntry(
        message_id=row["message_id"],
        state=row["state"],
        owner=row["owner"],
        lease_until=row["lease_until"],
        attempts=row["attempts"],
        payload=json.loads(row["payload"]),
        conversation_key=row["conversation_key"],
        reply_message_id=row["reply_message_id"],
        reason=row["reason"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _claim(
    outcome: ClaimOutcome, row: Mapping[Any, Any], payload: Mapping[str, Any] | None = None
) -> Claim:
    """``payload``: the row's, already parsed (a first claim has what it stored)."""
    return Claim(
        outcome=outcome,
        message_id=row["message_id"],
        state=row["state"],
        attempts=row["attempts"],
        payload=dict(payload) if payload is not None else json.loads(row["payload"]),
        owner=row["owner"],
        lease_until=row["lease_until"],
        conversation_key=row["conversation_key"],
        reply_message_id=row["reply_message_id"],
    )


def _dump(payload: Mapping[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def state_in(states: Iterable[str]) -> Any:
    """`state IN (...)` written as `state = ... OR state = ...`: SQLAlchemy renders a literal
    IN list anew at each execution, which costs more than the rest of the statement."""
    return or_(*(_c.state == state for state in states))


# A claim some process works on (claimed or replied).
ACTIVE = state_in(ACTIVE_STATES)


def _gave_up(max_attempts: int) -> str:
    return f"gave up after {max_attempts} attempts"


# Rows some process worked on whose lease has run out (parameter `now`).
_EXPIRED = (ACTIVE, _c.lease_until <= bindparam("now"))
# ... that may be taken over, or that used up their attempts (parameter `max_attempts`).
_TAKEABLE = (*_EXPIRED, _c.attempts < bindparam("max_attempts"))
_EXHAUSTED = (*_EXPIRED, _c.attempts >= bindparam("max_attempts"))


class _Statements:
    """The ledger's statements in the database's dialect, built once (SQLAlchemy caches their
    compiled form; the single-row ones are `Prepared`: on SQLite they skip SQLAlchemy's
    execution layer). Parameters named like a column they set are prefixed `p_`."""

    def __init__(self, db: Database) -> None:
        self.postgres = db.dialect != "sqlite"
        # The columns of a new row are the keys of the parameters given at execution.
        # Not RETURNING the row: a new row holds just what was given (the payload's ~1 KB
        # would come back for nothing, on the ACK path).
        self.insert_claim = Prepared(
            db.insert(_claims).on_conflict_do_nothing(index_elements=["app", "message_id"])
        )
        self.insert_dropped = Prepared(
            db.insert(_claims)
            .on_conflict_do_nothing(index_elements=["app", "message_id"])
            .returning(_c.message_id)
        )
        # Every statement is about one app's claims (a message may reach two apps).
        mine = _c.app == bindparam("p_app")
        one = and_(mine, _c.message_id == bindparam("p_message_id"))
        some = and_(mine, _c.message_id.in_(bindparam("p_message_ids", expanding=True)))
        self.row = Prepared(select(_claims).where(one))
        owned = (one, _c.owner == bindparam("p_owner"), ACTIVE)
        self.renew = Prepared(
            update(_claims)
            .where(*owned)
            .values(lease_until=bindparam("p_lease_until"), updated_at=bindparam("now"))
        )
        self.renew_many = (
            update(_claims)
            .where(some, _c.owner == bindparam("p_owner"), ACTIVE)
            .values(lease_until=bindparam("p_lease_until"), updated_at=bindparam("now"))
            .returning(_c.message_id)
        )
        self.mark_replied = Prepared(
            update(_claims)
            .where(*owned)
            .values(
                state=REPLIED,
                reply_message_id=bindparam("p_reply"),
                updated_at=bindparam("now"),
            )
        )
        self.complete = Prepared(
            update(_claims).where(*owned).values(state=DONE, updated_at=bindparam("now"))
        )
        self.complete_replied = Prepared(
            update(_claims)
            .where(*owned)
            .values(
                state=DONE,
                reply_message_id=bindparam("p_reply"),
                updated_at=bindparam("now"),
            )
        )
        self.release = Prepared(
            update(_claims)
            .where(*owned)
            .values(
                lease_until=bindparam("now"),
                attempts=_c.attempts - 1,
                updated_at=bindparam("now"),
            )
        )
        self.drop_owned = Prepared(
            update(_claims)
            .where(*owned)
            .values(state=DROPPED, reason=bindparam("p_reason"), updated_at=bindparam("now"))
        )
        self.purge = delete(_claims).where(
            state_in(FINAL_STATES), _c.updated_at < bindparam("cutoff")
        )
        # Take-overs of expired rows, conditional: of two racers, one changes the row.
        take = update(_claims).values(
            owner=bindparam("p_owner"),
            lease_until=bindparam("p_lease_until"),
            attempts=_c.attempts + 1,
            updated_at=bindparam("now"),
        )
        self.take_one = Prepared(take.where(one, *_TAKEABLE).returning(*_claims.c))
        self.take_many = take.where(some, *_TAKEABLE).returning(*_claims.c)
        # Two statements, not UPDATE ... WHERE id IN (SELECT ... LIMIT): PostgreSQL may rescan
        # such a subquery and skip the rows it has just updated, going past the limit.
        self.takeable_ids = (
            select(_c.message_id)
            .where(mine, *_TAKEABLE)
            .order_by(_c.lease_until)
            .limit(bindparam("limit", type_=Integer))
            .with_for_update(skip_locked=True)  # PostgreSQL: racers split the work
        )
        fail = update(_claims).values(
            state=FAILED, reason=bindparam("p_reason"), updated_at=bindparam("now")
        )
        self.fail_one = Prepared(fail.where(one, *_EXHAUSTED).returning(*_claims.c))
        self.fail_all = fail.where(mine, *_EXHAUSTED)
        # PostgreSQL: lock first, skipping rows a concurrent sweeper holds (no waits, no
        # deadlocks). SQLite has one writer at a time: nothing to skip.
        self.exhausted_ids = (
            select(_c.message_id).where(mine, *_EXHAUSTED).with_for_update(skip_locked=True)
        )
        self.fail_some = fail.where(some, *_EXHAUSTED)


class MessageLedger:
    """Claims, leases and outcomes of inbound messages, keyed by Feishu's message_id
    within ``app`` (the [apps.NAME] whose events these are; "" the default app)."""

    def __init__(
        self, db: Database, *, clock: Callable[[], float] = time.time, app: str = ""
    ) -> None:
        self._db = db
        self._clock = clock
        self._app = app
        self._sql = _Statements(db)

    async def claim(
        self,
        message_id: str,
        *,
        owner: str,
        payload: Mapping[str, Any],
        lease_seconds: float,
        payload_json: str | None = None,
        conversation_key: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> Claim:
        """Claim a message for `lease_seconds`, or say why not.

        `payload_json`: `payload` as JSON text, when the caller has it (the push as it came),
        stored instead of encoding `payload` again.

        A message whose holder's lease ran out is taken over (attempts + 1), except when it has
        had `max_attempts` already: then it becomes `failed` and the answer is `duplicate_done`.
        A first sight is one statement (the insert); a redelivery adds a select, and an expired
        holder a conditional update.
        """
        now = self._clock()
        return await self._db.transact(
            _claim_message,
            self._sql,
            {
                "app": self._app,
                "message_id": message_id,
                "state": CLAIMED,
                "owner": owner,
                "lease_until": now + lease_seconds,
                "attempts": 1,
                "payload": _dump(payload) if payload_json is None else payload_json,
                "conversation_key": conversation_key,
                "reply_message_id": None,
                "created_at": now,
                "updated_at": now,
            },
            max_attempts,
            payload,
            urgent=True,  # Feishu waits for it: the ACK is sent once it is stored
            # Each path writes once, in one conditional statement (the insert, or the
            # take-over / give-up update guarded by the lease it read): no transaction.
            atomic=False,
            brief=True,
        )

    async def take_over_expired(
        self,
        *,
        owner: str,
        lease_seconds: float,
        limit: int = 50,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> list[Claim]:
        """Take over messages whose holder's lease ran out, oldest lease first.

        Each message goes to exactly one caller across processes. Expired messages that already
        had `max_attempts` become `failed` and are not returned.
        """
        now = self._clock()
        return await self._db.transact(
            _take_over_expired,
            self._sql,
            {
                "now": now,
                "max_attempts": max_attempts,
                "p_owner": owner,
                "p_lease_until": now + lease_seconds,
                "limit": limit,
                "p_app": self._app,
            },
        )

    async def renew(self, message_id: str, *, owner: str, lease_seconds: float) -> bool:
        """Extend the lease; False when `owner` no longer holds the message."""
        now = self._clock()
        return await self._update_owned(
            self._sql.renew, message_id, owner, p_lease_until=now + lease_seconds, now=now
        )

    async def renew_many(
        self, message_ids: Iterable[str], *, owner: str, lease_seconds: float
    ) -> set[str]:
        """`renew` for many messages in one statement; returns the ids `owner` still holds."""
        ids = list(message_ids)
        if not ids:
            return set()
        now = self._clock()
        return await self._db.transact(
            _renew_many,
            self._sql.renew_many,
            {
                "p_app": self._app,
                "p_message_ids": ids,
                "p_owner": owner,
                "p_lease_until": now + lease_seconds,
                "now": now,
            },
            atomic=False,
            brief=True,
        )

    async def mark_replied(self, message_id: str, *, owner: str, reply_message_id: str) -> bool:
        """Record the reply message; False when `owner` no longer holds the message."""
        return await self._update_owned(
            self._sql.mark_replied,
            message_id,
            owner,
            p_reply=reply_message_id,
            now=self._clock(),
        )

    async def complete(
        self, message_id: str, *, owner: str, reply_message_id: str | None = None
    ) -> bool:
        """Mark the message done, with its reply message when given (one statement for
        `mark_replied` + `complete`); False when `owner` no longer holds the message."""
        if reply_message_id is None:
            return await self._update_owned(
                self._sql.complete, message_id, owner, now=self._clock()
            )
        return await self._update_owned(
            self._sql.complete_replied,
            message_id,
            owner,
            p_reply=reply_message_id,
            now=self._clock(),
        )

    async def release(self, message_id: str, *, owner: str) -> bool:
        """Give the message up at a graceful shutdown: its lease ends now, so another process
        (or this one after its restart) takes it over at once. The attempt is not counted."""
        return await self._update_owned(self._sql.release, message_id, owner, now=self._clock())

    async def drop(
        self,
        message_id: str,
        *,
        reason: str,
        owner: str | None = None,
        payload: Mapping[str, Any] | None = None,
    ) -> bool:
        """Mark a message `dropped` (stale, ignored by policy) so redeliveries are no-ops.

        Without `owner`, records a message seen for the first time and changes nothing when the
        message is already known. With `owner`, also drops a message that `owner` holds.
        Returns whether the message is now dropped by this call.
        """
        now = self._clock()
        return await self._db.transact(
            _drop,
            self._sql,
            {
                "app": self._app,
                "message_id": message_id,
                "state": DROPPED,
                "owner": owner or "",
                "lease_until": now,
                "attempts": 0,
                "payload": _dump(payload or {}),
                "reason": reason,
                "created_at": now,
                "updated_at": now,
            },
            None
            if owner is None
            else {
                "p_app": self._app,
                "p_message_id": message_id,
                "p_owner": owner,
                "p_reason": reason,
                "now": now,
            },
        )

    async def purge(self, *, older_than_seconds: float) -> int:
        """Delete finished (done, dropped, failed) rows not updated for `older_than_seconds`.

        Dedup only holds while the row exists: keep at least 24 h (Feishu redelivers for ~7 h).
        """
        cutoff = self._clock() - older_than_seconds
        return await self._db.transact(_rowcount, self._sql.purge, {"cutoff": cutoff})

    async def get(self, message_id: str) -> LedgerEntry | None:
        return await self._db.transact(_get, self._sql, self._app, message_id, write=False)

    async def _update_owned(
        self, statement: Any, message_id: str, owner: str, **values: Any
    ) -> bool:
        """One conditional update of a message that `owner` holds (claimed or replied)."""
        params = {"p_app": self._app, "p_message_id": message_id, "p_owner": owner, **values}
        count = await self._db.transact(_rowcount, statement, params, atomic=False, brief=True)
        return count == 1


# The transactions, run by `Database.transact` with a synchronous connection.


def _claim_message(
    connection: Connection,
    sql: _Statements,
    new_row: dict[str, Any],
    max_attempts: int,
    payload: Mapping[str, Any],
) -> Claim:
    for _ in range(2):
        claim = _claim_once(connection, sql, new_row, max_attempts, payload)
        if claim is not None:
            return claim
    raise RuntimeError(f"message {new_row['message_id']!r} kept vanishing while being claimed")


def _claim_once(
    connection: Connection,
    sql: _Statements,
    new_row: dict[str, Any],
    max_attempts: int,
    payload: Mapping[str, Any],
) -> Claim | None:
    """One claim attempt; None when a purge removed the row between its statements."""
    if sql.insert_claim.rowcount(connection, new_row):
        return _claim("claimed", new_row, payload)  # the new row is what was inserted
    app, message_id, now = new_row["app"], new_row["message_id"], new_row["created_at"]
    row = _row(connection, sql, app, message_id)
    if row is None:
        return None
    if row["state"] in FINAL_STATES:
        return _claim("duplicate_done", row)
    if row["lease_until"] > now:
        return _claim("duplicate_in_progress", row)
    match = {"p_app": app, "p_message_id": message_id, "now": now, "max_attempts": max_attempts}
    if row["attempts"] >= max_attempts:
        taken = sql.fail_one.first(connection, {**match, "p_reason": _gave_up(max_attempts)})
    else:
        taken = sql.take_one.first(
            connection,
            {**match, "p_owner": new_row["owner"], "p_lease_until": new_row["lease_until"]},
        )
    if taken is not None and row["attempts"] < max_attempts:
        return _claim("taken_over", taken)
    # Failed now (by us), or changed by a racer between the select and the update.
    row = taken if taken is not None else _row(connection, sql, app, message_id)
    if row is None:
        return None
    return _claim(
        "duplicate_done" if row["state"] in FINAL_STATES else "duplicate_in_progress", row
    )


def _take_over_expired(
    connection: Connection, sql: _Statements, params: dict[str, Any]
) -> list[Claim]:
    _fail_exhausted(connection, sql, params["p_app"], params["now"], params["max_attempts"])
    ids = list(connection.execute(sql.takeable_ids, params).scalars())
    if not ids:
        return []
    taken = connection.execute(sql.take_many, {**params, "p_message_ids": ids}).mappings().all()
    position = {message_id: index for index, message_id in enumerate(ids)}
    return [
        _claim("taken_over", row)
        for row in sorted(taken, key=lambda row: position[row["message_id"]])
    ]


def _fail_exhausted(
    connection: Connection, sql: _Statements, app: str, now: float, max_attempts: int
) -> None:
    """Mark `failed` the expired messages that used up their attempts."""
    params = {
        "p_app": app,
        "now": now,
        "max_attempts": max_attempts,
        "p_reason": _gave_up(max_attempts),
    }
    if not sql.postgres:
        connection.execute(sql.fail_all, params)
        return
    ids = list(connection.execute(sql.exhausted_ids, params).scalars())
    if ids:
        connection.execute(sql.fail_some, {**params, "p_message_ids": ids})


def _drop(
    connection: Connection,
    sql: _Statements,
    new_row: dict[str, Any],
    owned: dict[str, Any] | None,
) -> bool:
    if sql.insert_dropped.first(connection, new_row) is not None:
        return True
    if owned is None:
        return False
    return sql.drop_owned.rowcount(connection, owned) == 1


# Ids bound in one statement at most: SQLite allows 32,766 variables (999 before 3.32),
# PostgreSQL 32,767 parameters, and in-flight messages have no bound of their own.
RENEW_BATCH = 500


def _renew_many(connection: Connection, statement: Any, params: dict[str, Any]) -> set[str]:
    ids = params["p_message_ids"]
    kept: set[str] = set()
    for start in range(0, len(ids), RENEW_BATCH):
        batch = {**params, "p_message_ids": ids[start : start + RENEW_BATCH]}
        kept.update(connection.execute(statement, batch).scalars())
    return kept


def _rowcount(connection: Connection, statement: Any, params: dict[str, Any]) -> int:
    if isinstance(statement, Prepared):
        return statement.rowcount(connection, params)
    return connection.execute(statement, params).rowcount


def _get(connection: Connection, sql: _Statements, app: str, message_id: str) -> LedgerEntry | None:
    row = _row(connection, sql, app, message_id)
    return None if row is None else _entry(row)


def _row(
    connection: Connection, sql: _Statements, app: str, message_id: str
) -> Mapping[Any, Any] | None:
    return sql.row.first(connection, {"p_app": app, "p_message_id": message_id})

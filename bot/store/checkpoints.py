"""Checkpoints of runs that wait for a person, shared by every process.

A run that starts waiting (for an approval, a consent, an answer) saves where it stands;
the process that takes its message over (after a graceful stop hands it back, or a crash
lets its lease run out) finds the checkpoint and resumes the run instead of starting it
again. The store keeps the text it is given and knows nothing of what is in it: the runtime
seals the payload and checks the seal before it trusts a byte of it. One checkpoint per
run, and per message: a run that saves again replaces its own; the run's finish deletes it
(``TurnJournal``, in the finishing transaction).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, delete, exists, select, update
from sqlalchemy.engine import Connection

from bot.store.db import Database
from bot.store.ledger import ACTIVE
from bot.store.models import DONE, MessageClaimRow, RunCheckpointRow, table_of

_checkpoints = table_of(RunCheckpointRow)
_claims = table_of(MessageClaimRow)
_c = _checkpoints.c

_BY_MESSAGE = select(_checkpoints).where(_c.message_id == bindparam("p_message_id"))
_BY_RUN = select(_checkpoints).where(_c.run_id == bindparam("p_run_id"))
_IN_SCOPE = select(_checkpoints).where(_c.scope_key == bindparam("p_scope_key"))
_DELETE_RUN = delete(_checkpoints).where(_c.run_id == bindparam("p_run_id"))
# Another run's checkpoint for the same message (a run started again from its message
# after a checkpoint could not be used): the newer run is the one that waits.
_DELETE_OTHERS = delete(_checkpoints).where(
    _c.message_id == bindparam("p_message_id"), _c.run_id != bindparam("p_run_id")
)

# Messages that joined the run and that it has read: the checkpoint holds them now, so
# their own claims end here (taken over, they would be answered a second time).
# The run's own message: a run that waits has crashed nothing, so a process that dies
# while it waits does not count against the message's attempts (each wait starts them over).
_FRESH_ATTEMPTS = (
    update(_claims)
    .where(
        _claims.c.message_id == bindparam("p_message_id"),
        _claims.c.owner == bindparam("p_owner"),
        ACTIVE,
    )
    .values(attempts=1, updated_at=bindparam("now"))
)
# Checkpoints whose message nobody will take over any more (done, dropped, failed, gone).
_ORPHANS = delete(_checkpoints).where(
    ~exists().where(_claims.c.message_id == _c.message_id, ACTIVE),
    _c.updated_at < bindparam("cutoff"),
)
_SETTLE_JOINED = (
    update(_claims)
    .where(
        _claims.c.message_id.in_(bindparam("p_message_ids", expanding=True)),
        _claims.c.owner == bindparam("p_owner"),
        ACTIVE,
    )
    .values(state=DONE, reason=bindparam("p_reason"), updated_at=bindparam("now"))
)


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    run_id: str
    message_id: str
    scope_key: str
    generation: int
    owner: str
    payload: str
    seal: str
    created_at: float
    updated_at: float


def _stored(row: Mapping[Any, Any]) -> StoredCheckpoint:
    return StoredCheckpoint(
        run_id=row["run_id"],
        message_id=row["message_id"],
        scope_key=row["scope_key"],
        generation=row["generation"],
        owner=row["owner"],
        payload=row["payload"],
        seal=row["seal"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


class CheckpointStore:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock
        insert = db.insert(_checkpoints)
        self._upsert = insert.on_conflict_do_update(
            index_elements=["run_id"],
            set_={
                name: getattr(insert.excluded, name)
                for name in ("owner", "payload", "seal", "updated_at")
            },
        )

    async def save(
        self,
        *,
        run_id: str,
        message_id: str,
        scope_key: str,
        generation: int,
        owner: str,
        payload: str,
        seal: str,
        joined_message_ids: Collection[str] = (),
    ) -> None:
        """Save (or replace) the run's checkpoint. ``joined_message_ids``: the messages that
        joined the run and are in it: their claims are completed in the same transaction,
        as the checkpoint answers them from now on."""
        now = self._clock()
        values = {
            "run_id": run_id,
            "message_id": message_id,
            "scope_key": scope_key,
            "generation": generation,
            "owner": owner,
            "payload": payload,
            "seal": seal,
            "created_at": now,
            "updated_at": now,
        }
        settle = {
            "p_message_ids": list(joined_message_ids),
            "p_owner": owner,
            "p_reason": f"joined run {run_id}, which waits for a person",
            "now": now,
        }
        await self._db.transact(_save, self._upsert, values, settle)

    async def for_message(self, message_id: str) -> StoredCheckpoint | None:
        return await self._db.transact(
            _first, _BY_MESSAGE, {"p_message_id": message_id}, write=False
        )

    async def for_run(self, run_id: str) -> StoredCheckpoint | None:
        return await self._db.transact(_first, _BY_RUN, {"p_run_id": run_id}, write=False)

    async def in_scope(self, scope_key: str) -> list[StoredCheckpoint]:
        return await self._db.transact(_all, _IN_SCOPE, {"p_scope_key": scope_key}, write=False)

    async def delete(self, run_id: str) -> bool:
        return await self._db.transact(_delete, run_id)

    async def purge_orphans(self, *, grace_seconds: float = 60.0) -> int:
        """Delete the checkpoints of messages nobody will take over any more (their claim
        ended: the run finished elsewhere, or the message failed); returns how many."""
        cutoff = self._clock() - grace_seconds
        return await self._db.transact(_rowcount, _ORPHANS, {"cutoff": cutoff})


def _save(
    connection: Connection, upsert: Any, values: dict[str, Any], settle: dict[str, Any]
) -> None:
    connection.execute(
        _DELETE_OTHERS, {"p_message_id": values["message_id"], "p_run_id": values["run_id"]}
    )
    connection.execute(upsert, values)
    connection.execute(
        _FRESH_ATTEMPTS,
        {
            "p_message_id": values["message_id"],
            "p_owner": values["owner"],
            "now": values["updated_at"],
        },
    )
    if settle["p_message_ids"]:
        connection.execute(_SETTLE_JOINED, settle)


def _first(
    connection: Connection, statement: Any, params: dict[str, Any]
) -> StoredCheckpoint | None:
    row = connection.execute(statement, params).mappings().first()
    return None if row is None else _stored(row)


def _all(connection: Connection, statement: Any, params: dict[str, Any]) -> list[StoredCheckpoint]:
    return [_stored(row) for row in connection.execute(statement, params).mappings()]


def _rowcount(connection: Connection, statement: Any, params: dict[str, Any]) -> int:
    return int(connection.execute(statement, params).rowcount)


def _delete(connection: Connection, run_id: str) -> bool:
    return bool(connection.execute(_DELETE_RUN, {"p_run_id": run_id}).rowcount)


def delete_checkpoint(connection: Connection, run_id: str) -> None:
    """In another store's transaction: the run finished, its checkpoint goes with it."""
    connection.execute(_DELETE_RUN, {"p_run_id": run_id})

"""Memories people asked the bot to keep, and the one way they are read back: by owner.

Every read names the owners it may read (``Readable``: a person, a chat, the org) and the
statement matches those owners only, so a memory can never come back where its rules say
it must not, whatever asked for it. A recall finds the memories holding any of the
question's terms through the database's full-text search (SQLite: an FTS5 MATCH on the
owners' keys and the terms; PostgreSQL: a tsvector match on the rows the owner index
finds), then ranks those few (an owner holds a few hundred at most) by BM25 over them, the
most recently used first among equals, and counts the use. Not FTS5's own bm25(): it
counts every row of the whole index that holds each term, 18 ms a recall at a million
memories against 0.7 ms for the match alone (``python -m bench.memory_recall``). Each
owner holds at most its cap: storing past it forgets the oldest least-used one. Audit rows
say who stored and who forgot what, never the text of a forgotten memory.
"""

from __future__ import annotations

import hashlib
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Integer, bindparam, delete, func, select, text, update
from sqlalchemy.engine import Connection

from bot.store.audit import AuditEntry, write_audit
from bot.store.db import Database
from bot.store.models import MemoryRow, table_of

MemoryScope = Literal["person", "chat", "org"]
SCOPES: tuple[MemoryScope, ...] = ("person", "chat", "org")

_memories = table_of(MemoryRow)
_m = _memories.c
_INSERT = _memories.insert()
_BY_ID = select(_memories).where(_m.id == bindparam("p_id"), _m.app == bindparam("p_app"))
_OF_OWNER = (
    _m.app == bindparam("p_app"),
    _m.scope == bindparam("p_scope"),
    _m.owner == bindparam("p_owner"),
)
_COUNT = select(func.count()).select_from(_memories).where(*_OF_OWNER)
# The oldest least-used: recalled the fewest times, and of those the longest unused.
_EVICTABLE = (
    select(_memories)
    .where(*_OF_OWNER)
    .order_by(_m.uses, _m.last_used_at, _m.id)
    .limit(bindparam("p_over", type_=Integer))
)
_LIST = select(_memories).where(*_OF_OWNER).order_by(_m.created_at.desc(), _m.id)
_DELETE_ONE = delete(_memories).where(_m.id == bindparam("p_id"), _m.app == bindparam("p_app"))
_USED = (
    update(_memories)
    .where(_m.id.in_(bindparam("p_ids", expanding=True)))
    .values(uses=_m.uses + 1, last_used_at=bindparam("now"))
)
_ROWID = text("SELECT rowid FROM memories WHERE id = :id")
_FTS_INSERT = text(
    "INSERT INTO memories_fts (rowid, terms, owner_key) VALUES (:rowid, :terms, :owner_key)"
)
# Every match of the readable owners: the caps keep them to a few hundred.
MATCHED_AT_MOST = 5000
_SQLITE_RECALL = text(
    "SELECT m.* FROM memories_fts JOIN memories m ON m.rowid = memories_fts.rowid "
    "WHERE memories_fts MATCH :match LIMIT :most"
)
_POSTGRES_RECALL = text(
    "SELECT m.* FROM memories m "
    "WHERE m.app = :app AND ("
    "  (m.scope = 'person' AND m.owner = :person) OR (m.scope = 'chat' AND m.owner = :chat)"
    "  OR (m.scope = 'org' AND :org)"
    ") AND to_tsvector('simple', m.terms) @@ to_tsquery('simple', :query) LIMIT :most"
)
# BM25's usual constants.
_K1, _B = 1.2, 0.75


@dataclass(frozen=True, slots=True)
class Memory:
    id: str
    app: str
    scope: MemoryScope
    owner: str
    text: str
    created_by: str
    chat_id: str | None
    created_at: float
    last_used_at: float
    uses: int


@dataclass(frozen=True, slots=True)
class Readable:
    """The owners whose memories one read may see. ``person``: an open_id (only in that
    person's direct messages), ``chat``: a group's chat_id (only in that group), ``org``:
    the memories for everyone."""

    person: str | None = None
    chat: str | None = None
    org: bool = True

    def owners(self) -> list[tuple[MemoryScope, str]]:
        found: list[tuple[MemoryScope, str]] = []
        if self.person:
            found.append(("person", self.person))
        if self.chat:
            found.append(("chat", self.chat))
        if self.org:
            found.append(("org", ""))
        return found

    def may_read(self, memory: Memory) -> bool:
        return (memory.scope, memory.owner) in self.owners()


@dataclass(frozen=True, slots=True)
class Stored:
    memory: Memory
    evicted: tuple[Memory, ...] = ()  # forgotten to stay within the owner's cap


def owner_key(app: str, scope: str, owner: str) -> str:
    """One search token naming an owner: the FTS5 index matches owners through it."""
    digest = hashlib.blake2b(f"{app}\x00{scope}\x00{owner}".encode(), digest_size=10)
    return "k" + digest.hexdigest()


def _memory(row: Mapping[Any, Any]) -> Memory:
    return Memory(**{name: row[name] for name in Memory.__slots__})


class MemoryStore:
    def __init__(
        self, db: Database, *, clock: Callable[[], float] = time.time, app: str = ""
    ) -> None:
        self._db = db
        self._clock = clock
        self._app = app  # the Feishu app whose memories these are
        self._sqlite = db.dialect == "sqlite"

    async def add(
        self,
        *,
        scope: MemoryScope,
        owner: str,
        text: str,
        terms: Sequence[str],
        created_by: str,
        chat_id: str | None,
        cap: int,
    ) -> Stored:
        """Store a memory for ``owner``; past ``cap`` the owner's oldest least-used ones are
        forgotten in the same transaction (returned, to say so)."""
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}, not {scope!r}")
        if "\x00" in text:  # neither database stores it (bot.memory.text cleans it out)
            raise ValueError("a memory's text may not hold NUL")
        now = self._clock()
        row = {
            "id": uuid.uuid4().hex,
            "app": self._app,
            "scope": scope,
            "owner": owner,
            "text": text,
            "terms": " ".join(terms),
            "created_by": created_by,
            "chat_id": chat_id,
            "created_at": now,
            "last_used_at": now,
            "uses": 0,
        }
        return await self._db.transact(_add, row, cap, self._sqlite)

    async def recall(
        self, readable: Readable, query_terms: Sequence[str], *, limit: int
    ) -> list[Memory]:
        """The memories of ``readable``'s owners most relevant to ``query_terms``, best
        first; each counted as used."""
        if not query_terms or not readable.owners() or limit < 1:
            return []
        now = self._clock()
        if self._sqlite:
            keys = " OR ".join(owner_key(self._app, s, o) for s, o in readable.owners())
            words = " OR ".join(f'"{term}"' for term in query_terms)
            params: dict[str, Any] = {"match": f"owner_key : ({keys}) AND terms : ({words})"}
            statement = _SQLITE_RECALL
        else:
            params = {
                "query": " | ".join("'" + term.replace("'", "''") + "'" for term in query_terms),
                "app": self._app,
                "person": readable.person or "",
                "chat": readable.chat or "",
                "org": readable.org,
            }
            statement = _POSTGRES_RECALL
        params["most"] = MATCHED_AT_MOST
        return await self._db.transact(_recall, statement, params, list(query_terms), limit, now)

    async def get(self, memory_id: str) -> Memory | None:
        return await self._db.transact(_get, self._app, memory_id, write=False)

    async def of_owner(self, scope: MemoryScope, owner: str, *, limit: int = 500) -> list[Memory]:
        """An owner's memories, newest first."""
        params = {"p_app": self._app, "p_scope": scope, "p_owner": owner, "limit": limit}
        return await self._db.transact(_list, params, write=False)

    async def newest(self, *, limit: int) -> list[Memory]:
        """Every owner's memories of this app, newest first (the console)."""
        params = {"p_app": self._app, "limit": limit}
        return await self._db.transact(_newest, params, write=False)

    async def forget(self, memory_id: str, *, actor: str, via: str) -> Memory | None:
        """Delete one memory (whether ``actor`` may is the caller's check); the memory as it
        was, or None when there is no such memory (any more)."""
        return await self._db.transact(_forget, self._app, memory_id, actor, via, self._clock())

    async def forget_all(self, scope: MemoryScope, owner: str, *, actor: str, via: str) -> int:
        """Delete every memory of an owner; how many."""
        params = {"p_app": self._app, "p_scope": scope, "p_owner": owner}
        return await self._db.transact(_forget_all, params, actor, via, self._clock())


# The transactions, run by `Database.transact` with a synchronous connection.


def _add(connection: Connection, row: dict[str, Any], cap: int, sqlite: bool) -> Stored:
    owned = {"p_app": row["app"], "p_scope": row["scope"], "p_owner": row["owner"]}
    count = connection.execute(_COUNT, owned).scalar_one()
    evicted = []
    if count >= cap:
        over = count - cap + 1
        evicted = [
            _memory(r) for r in connection.execute(_EVICTABLE, {**owned, "p_over": over}).mappings()
        ]
        for memory in evicted:
            connection.execute(_DELETE_ONE, {"p_id": memory.id, "p_app": memory.app})
            _audit(connection, "memory.evicted", memory, None, "cap", row["created_at"])
    connection.execute(_INSERT, row)
    if sqlite:
        rowid = connection.execute(_ROWID, {"id": row["id"]}).scalar_one()
        key = owner_key(row["app"], row["scope"], row["owner"])
        connection.execute(_FTS_INSERT, {"rowid": rowid, "terms": row["terms"], "owner_key": key})
    memory = _memory(row)
    _audit(connection, "memory.stored", memory, row["created_by"], None, row["created_at"])
    return Stored(memory, tuple(evicted))


def _recall(
    connection: Connection,
    statement: Any,
    params: dict[str, Any],
    query_terms: list[str],
    limit: int,
    now: float,
) -> list[Memory]:
    rows = connection.execute(statement, params).mappings().all()
    found = ranked(rows, query_terms)[:limit]
    if found:
        connection.execute(_USED, {"p_ids": [m.id for m in found], "now": now})
    return found


def ranked(rows: Sequence[Mapping[Any, Any]], query_terms: Sequence[str]) -> list[Memory]:
    """``rows`` (memories holding some of ``query_terms``) best first: BM25 over them (how
    often a term is in a memory against how many of them hold it, shorter memories ahead),
    then the most recently used, then by id (one order on both databases)."""
    if not rows:
        return []
    wanted = set(query_terms)
    docs = [(row, Counter(row["terms"].split())) for row in rows]
    lengths = [counts.total() for _, counts in docs]
    average = sum(lengths) / len(docs) or 1.0
    holding = Counter(term for _, counts in docs for term in wanted & counts.keys())
    weight = {t: math.log((len(docs) - n + 0.5) / (n + 0.5) + 1.0) for t, n in holding.items()}

    def score(counts: Counter[str], length: int) -> float:
        norm = _K1 * (1 - _B + _B * length / average)
        return sum(
            weight[t] * counts[t] * (_K1 + 1) / (counts[t] + norm) for t in wanted & counts.keys()
        )

    scored = [
        (score(counts, length), _memory(row))
        for (row, counts), length in zip(docs, lengths, strict=True)
    ]
    scored.sort(key=lambda pair: (-pair[0], -pair[1].last_used_at, pair[1].id))
    return [memory for _, memory in scored]


def _get(connection: Connection, app: str, memory_id: str) -> Memory | None:
    row = connection.execute(_BY_ID, {"p_id": memory_id, "p_app": app}).mappings().first()
    return None if row is None else _memory(row)


def _list(connection: Connection, params: dict[str, Any]) -> list[Memory]:
    statement = _LIST.limit(bindparam("limit", type_=Integer))
    return [_memory(row) for row in connection.execute(statement, params).mappings()]


def _newest(connection: Connection, params: dict[str, Any]) -> list[Memory]:
    statement = (
        select(_memories)
        .where(_m.app == bindparam("p_app"))
        .order_by(_m.created_at.desc(), _m.id)
        .limit(bindparam("limit", type_=Integer))
    )
    return [_memory(row) for row in connection.execute(statement, params).mappings()]


def _forget(
    connection: Connection, app: str, memory_id: str, actor: str, via: str, now: float
) -> Memory | None:
    memory = _get(connection, app, memory_id)
    if memory is None:
        return None
    if connection.execute(_DELETE_ONE, {"p_id": memory_id, "p_app": app}).rowcount != 1:
        return None  # a racer deleted it first
    _audit(connection, "memory.forgotten", memory, actor, via, now)
    return memory


def _forget_all(
    connection: Connection, params: dict[str, Any], actor: str, via: str, now: float
) -> int:
    statement = _LIST.limit(bindparam("limit", type_=Integer))
    memories = [
        _memory(r) for r in connection.execute(statement, {**params, "limit": 100_000}).mappings()
    ]
    for memory in memories:
        connection.execute(_DELETE_ONE, {"p_id": memory.id, "p_app": memory.app})
        _audit(connection, "memory.forgotten", memory, actor, via, now)
    return len(memories)


def _audit(
    connection: Connection,
    action: str,
    memory: Memory,
    actor: str | None,  # None: the bot itself (a cap)
    via: str | None,
    now: float,
) -> None:
    # Never the text: a forgotten memory must not live on in the audit log.
    detail: dict[str, Any] = {
        "scope": memory.scope,
        "owner": memory.owner,
        "chars": len(memory.text),
    }
    if via is not None:
        detail["via"] = via
    entry = AuditEntry(
        action, actor=actor, target=memory.id, chat_id=memory.chat_id, detail=detail, app=memory.app
    )
    write_audit(connection, entry, now)

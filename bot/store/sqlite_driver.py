"""An aiosqlite connection that runs each statement in one trip to its thread.

aiosqlite runs every call of the sqlite3 connection in a worker thread, and each call is a trip
through the event loop (a queue put, a thread wake-up, a `call_soon_threadsafe` back). Under
SQLAlchemy a statement takes four such trips (open a cursor, execute, fetch, close) and a
transaction's `BEGIN` three more: most of the event loop's time per write. This connection
changes two things and nothing else (SQLAlchemy's own aiosqlite dialect still drives it, through
`create_async_engine(async_creator=...)`):

- its cursors execute, fetch every row and close in ONE trip; the rows are kept for SQLAlchemy
  to read without another trip;
- `defer_begin()` holds the transaction's `BEGIN` back until the first statement, and sends it
  in that statement's trip; a transaction that ran no statement costs no trip at all.

So a one-statement write transaction is two trips (the statement with its BEGIN, the COMMIT)
instead of eight. Behaviour is otherwise aiosqlite's: same thread, same sqlite3 connection, the
same errors.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from threading import Thread
from typing import Any

import aiosqlite

# The parts of aiosqlite this module builds on; without them `supported()` is False and the
# Database uses the plain driver.
_REQUIRED = ("_execute", "_conn", "cursor", "commit", "rollback")


def supported() -> bool:
    return all(hasattr(aiosqlite.Connection, name) for name in _REQUIRED)


class OneTripConnection(aiosqlite.Connection):
    """An aiosqlite connection whose cursors take one trip a statement (see the module)."""

    _pending_begin: str | None = None

    def defer_begin(self, statement: str) -> None:
        """Send `statement` (a BEGIN) right before the next statement, in the same trip."""
        self._pending_begin = statement

    def take_pending_begin(self) -> str | None:
        statement, self._pending_begin = self._pending_begin, None
        return statement

    def cursor(self) -> OneTripCursor:  # type: ignore[override]
        return OneTripCursor(self)

    async def commit(self) -> None:
        if self.take_pending_begin() is not None:
            return  # the transaction never started: nothing to commit
        await super().commit()

    async def rollback(self) -> None:
        if self.take_pending_begin() is not None:
            return
        await super().rollback()


class OneTripCursor:
    """The async cursor SQLAlchemy's aiosqlite adapter expects, one trip per execute."""

    __slots__ = ("_connection", "_rows", "arraysize", "description", "lastrowid", "rowcount")

    def __init__(self, connection: OneTripConnection) -> None:
        self._connection = connection
        self._rows: list[Any] = []
        self.arraysize = 1
        self.description: Any = None
        self.rowcount = -1
        self.lastrowid: int | None = None

    async def __aenter__(self) -> OneTripCursor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> OneTripCursor:
        return await self._run(lambda cursor: cursor.execute(sql, parameters or ()))

    async def executemany(self, sql: str, seq_of_parameters: Any) -> OneTripCursor:
        return await self._run(lambda cursor: cursor.executemany(sql, seq_of_parameters))

    async def _run(self, execute: Callable[[sqlite3.Cursor], Any]) -> OneTripCursor:
        connection = self._connection
        begin = connection.take_pending_begin()

        def trip() -> tuple[Any, int, int | None, list[Any]]:  # in the connection's thread
            sqlite_connection = connection._conn
            if begin is not None:
                sqlite_connection.execute(begin)
            cursor = sqlite_connection.cursor()
            try:
                execute(cursor)
                rows = cursor.fetchall() if cursor.description else []
                # rowcount after the fetch: with RETURNING it counts the rows as they come.
                return cursor.description, cursor.rowcount, cursor.lastrowid, rows
            finally:
                cursor.close()

        self.description, self.rowcount, self.lastrowid, self._rows = await connection._execute(
            trip
        )
        return self

    async def fetchone(self) -> Any:
        return self._rows.pop(0) if self._rows else None

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        count = self.arraysize if size is None else size
        rows, self._rows = self._rows[:count], self._rows[count:]
        return rows

    async def fetchall(self) -> list[Any]:
        rows, self._rows = self._rows, []
        return rows

    async def close(self) -> None:
        self._rows = []

    async def nextset(self) -> None:
        return None

    async def setinputsizes(self, *sizes: Any) -> None:
        return None


async def connect(database: str, **kwargs: Any) -> OneTripConnection:
    """Open a connection as `aiosqlite.connect(database, **kwargs)` does (sqlite3's keywords)."""
    kwargs.pop("iter_chunk_size", None)
    connection = OneTripConnection(lambda: sqlite3.connect(database, **kwargs), 64)
    # The worker thread must not keep the process alive (SQLAlchemy does the same).
    thread = connection if isinstance(connection, Thread) else connection._thread
    thread.daemon = True
    return await connection

"""The async database: one engine, its connections, and the SQLite settings a bot needs.

The composition root creates one `Database` and injects it into the stores; there is no global
engine. The stores speak SQLAlchemy Core over two context managers, each one transaction:

- `write()`: an `AsyncConnection` in a write transaction, committed when the block ends and
  rolled back when it raises. On SQLite this is ONE connection held open for the life of the
  Database, used by one writer at a time (an asyncio lock queues this process's writers), each
  transaction started with `BEGIN IMMEDIATE`: writers queue instead of failing on a lock
  upgrade, and across processes they wait on the busy timeout. On PostgreSQL it is a pooled
  connection in a plain transaction.
- `read()`: an `AsyncConnection` from the pool in a read transaction (a plain `BEGIN` on
  SQLite, never waiting for the write lock: in WAL mode readers never wait for writers).

SQLite runs in WAL mode with `synchronous=NORMAL`, a busy timeout and foreign keys on, over
`sqlite_driver` (aiosqlite taking one trip to its thread a statement; `one_trip_sqlite=False`
for plain aiosqlite).
PostgreSQL runs at its default READ COMMITTED level; the stores stay correct there through
conditional updates and `INSERT ... ON CONFLICT DO NOTHING`.

Keep write blocks short and never nest them, nor open a `read()` inside a `write()` expecting
to see its uncommitted rows: on SQLite the write block holds the database's single write lock
(and this process's asyncio lock) until it ends, so a nested write block would deadlock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from bot.store import sqlite_driver

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./larkgate.db"
SUPPORTED_DIALECTS = ("sqlite", "postgresql")

_READ_ONLY = "larkgate_read_only"
_ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}


class DatabaseConfigError(ValueError):
    """The database URL cannot work: unsupported backend or a missing SQLite directory."""


def normalize_url(url: str | URL) -> URL:
    """The async form of `url`: `sqlite://` gets aiosqlite, `postgres(ql)://` gets asyncpg."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "postgres":
        backend = "postgresql"
    if backend not in SUPPORTED_DIALECTS:
        raise DatabaseConfigError(
            f"unsupported database {parsed.drivername!r}: use sqlite+aiosqlite:// "
            "or postgresql+asyncpg://"
        )
    if parsed.drivername in (backend, "postgres"):
        parsed = parsed.set(drivername=_ASYNC_DRIVERS[backend])
    return parsed


def sqlite_file(url: URL) -> Path | None:
    """The file of a SQLite URL, or None for an in-memory or URI-style database."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _check_sqlite_directory(url: URL) -> None:
    path = sqlite_file(url)
    if path is None:
        return
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise DatabaseConfigError(
            f"the directory of the SQLite database {str(path)!r} does not exist "
            f"({str(directory.resolve())!r}): create it or set DATABASE_URL to another path"
        )


class Database:
    """An async engine with write and read transactions; create one per process and inject it.

    `await Database.connect(url)` builds the engine and checks that the database answers;
    `Database(url)` + `await db.start()` does the same in two steps. `dispose()` closes it.
    """

    def __init__(
        self,
        url: str | URL = DEFAULT_DATABASE_URL,
        *,
        busy_timeout_ms: int = 5000,
        echo: bool = False,
        one_trip_sqlite: bool = True,
        **engine_options: Any,
    ) -> None:
        self._url = normalize_url(url)
        self.dialect: str = self._url.get_backend_name()
        if self.dialect == "sqlite":
            _check_sqlite_directory(self._url)
            if one_trip_sqlite and sqlite_driver.supported():
                engine_options["async_creator"] = self._one_trip_creator(
                    engine_options.pop("connect_args", {})
                )
        else:
            engine_options.setdefault("pool_pre_ping", True)
        self._busy_timeout_ms = busy_timeout_ms
        self.engine: AsyncEngine = create_async_engine(self._url, echo=echo, **engine_options)
        if self.dialect == "sqlite":
            self._install_sqlite_listeners()
        self._read_engine = self.engine.execution_options(**{_READ_ONLY: True})
        # SQLite has one writer at a time: queue this process's writers here rather than in
        # SQLite's busy handler, which polls with sleeps of up to 100 ms.
        self._write_lock = asyncio.Lock() if self.dialect == "sqlite" else None
        # SQLite's writer: one connection held open (opened by start() or the first write).
        self._writer: AsyncConnection | None = None
        # An in-memory (or URI) SQLite database may be one connection shared by the whole pool:
        # reads then go through the writer, so that they never interleave with a write.
        self._reads_use_writer = self.dialect == "sqlite" and sqlite_file(self._url) is None

    @classmethod
    async def connect(cls, url: str | URL = DEFAULT_DATABASE_URL, **options: Any) -> Database:
        database = cls(url, **options)
        await database.start()
        return database

    @property
    def url(self) -> str:
        """The URL with its password hidden, fit for logs."""
        return self._url.render_as_string(hide_password=True)

    async def start(self) -> None:
        """Open a connection so that a wrong URL or a down server fails at start-up.

        On SQLite this opens the writer's connection (setting its pragmas is the check), which
        stays open until `dispose()`.
        """
        if self._write_lock is not None:
            async with self._write_lock:
                await self._open_writer()
            return
        async with self._read_engine.connect() as connection:
            await connection.execute(_SELECT_1)

    async def dispose(self) -> None:
        """Close the writer's connection and the pool."""
        if self._write_lock is not None:
            async with self._write_lock:
                await self._drop_writer()
        await self.engine.dispose()

    async def __aenter__(self) -> Database:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.dispose()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        """One write transaction: committed when the block ends, rolled back when it raises."""
        if self._write_lock is None:
            async with self.engine.begin() as connection:
                yield connection
            return
        async with self._write_lock, self._sqlite_transaction() as connection:
            yield connection

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """One read transaction: for blocks that only read, which never wait for writers.

        Do not write in it: on SQLite that would bypass the write lock.
        """
        if self._reads_use_writer:
            async with self.write() as connection:
                yield connection
            return
        async with self._read_engine.connect() as connection:
            await connection.begin()
            yield connection
            # Closing rolls the transaction back: one round trip, where a commit would take
            # two (the pool rolls back a connection whose transaction ended before its close).

    async def ping(self, *, max_wait: float = 2.0) -> bool:
        """True when the database answers `SELECT 1` within `max_wait` seconds (for /healthz)."""
        try:
            async with asyncio.timeout(max_wait), self.read() as connection:
                await connection.execute(_SELECT_1)
        except Exception:
            return False
        return True

    def insert(self, table: Any) -> Any:
        """An INSERT of this dialect, which offers `on_conflict_do_nothing()` and `returning()`."""
        dialect_insert = sqlite.insert if self.dialect == "sqlite" else postgresql.insert
        return dialect_insert(table)

    @asynccontextmanager
    async def _sqlite_transaction(self) -> AsyncIterator[AsyncConnection]:
        """A transaction on the held writer connection; the caller holds the write lock.

        A connection that broke (a failed commit or rollback, an invalidation by a cancelled
        statement) is closed, and the next transaction opens a new one.
        """
        writer = self._writer
        if writer is None or writer.closed or writer.invalidated:
            writer = await self._open_writer()
        try:
            transaction = await writer.begin()
        except BaseException:
            await self._drop_writer()
            raise
        try:
            yield writer
        except BaseException:
            try:
                await transaction.rollback()
            except BaseException:
                await self._drop_writer()
                raise
            if writer.invalidated:
                await self._drop_writer()
            raise
        try:
            await transaction.commit()
        except BaseException:
            await self._drop_writer()
            raise

    async def _open_writer(self) -> AsyncConnection:
        await self._drop_writer()
        self._writer = await self.engine.connect()
        return self._writer

    async def _drop_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            if not writer.closed and (writer.in_transaction() or writer.invalidated):
                # Closing the SQLite connection ends whatever transaction it had.
                await writer.invalidate()
            await writer.close()
        except Exception:
            pass

    def _one_trip_creator(
        self, connect_args: dict[str, Any]
    ) -> Callable[[], Awaitable[sqlite_driver.OneTripConnection]]:
        async def create() -> sqlite_driver.OneTripConnection:
            args, options = self.engine.sync_engine.dialect.create_connect_args(self._url)
            return await sqlite_driver.connect(*args, **{**options, **connect_args})

        return create

    def _install_sqlite_listeners(self) -> None:
        busy_timeout_ms = int(self._busy_timeout_ms)

        @event.listens_for(self.engine.sync_engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # The driver's own implicit BEGIN is off: the "begin" listener below emits ours.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            try:
                cursor.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
                cursor.execute("PRAGMA journal_mode = WAL")
                cursor.execute("PRAGMA synchronous = NORMAL")
                cursor.execute("PRAGMA foreign_keys = ON")
            finally:
                cursor.close()

        @event.listens_for(self.engine.sync_engine, "begin")
        def _on_begin(connection: Any) -> None:
            read_only = connection.get_execution_options().get(_READ_ONLY, False)
            statement = "BEGIN" if read_only else "BEGIN IMMEDIATE"
            driver = connection.connection.driver_connection
            if isinstance(driver, sqlite_driver.OneTripConnection):
                driver.defer_begin(statement)  # sent with the first statement, in its trip
            else:
                connection.exec_driver_sql(statement)


_SELECT_1 = text("SELECT 1")

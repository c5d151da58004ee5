"""The async database: one engine, its sessions, and the SQLite settings a bot needs.

The composition root creates one `Database` and injects it into the stores; there is no global
engine. SQLite (the default, a file in the working directory) and PostgreSQL are supported:

- SQLite runs in WAL mode with `synchronous=NORMAL`, a busy timeout and foreign keys on. Write
  sessions start with `BEGIN IMMEDIATE`, so two writers queue instead of failing on a lock
  upgrade: within one process on an asyncio lock, across processes on the busy timeout (a writer
  waiting longer than it gets "database is locked"). Read-only sessions use a plain `BEGIN`; in
  WAL mode readers never wait for writers.
- PostgreSQL runs at its default READ COMMITTED level; the stores stay correct there through
  conditional updates and `INSERT ... ON CONFLICT DO NOTHING`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlmodel.ext.asyncio.session import AsyncSession

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
    """An async engine with sessions; create one per process and inject it.

    `await Database.connect(url)` builds the engine and checks that the database answers;
    `Database(url)` + `await db.start()` does the same in two steps.
    """

    def __init__(
        self,
        url: str | URL = DEFAULT_DATABASE_URL,
        *,
        busy_timeout_ms: int = 5000,
        echo: bool = False,
        **engine_options: Any,
    ) -> None:
        self._url = normalize_url(url)
        self.dialect: str = self._url.get_backend_name()
        if self.dialect == "sqlite":
            _check_sqlite_directory(self._url)
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
        """Open one connection so that a wrong URL or a down server fails at start-up."""
        async with self._read_engine.connect() as connection:
            await connection.execute(text("SELECT 1"))

    async def dispose(self) -> None:
        await self.engine.dispose()

    async def __aenter__(self) -> Database:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.dispose()

    @asynccontextmanager
    async def session(self, *, read_only: bool = False) -> AsyncIterator[AsyncSession]:
        """One transaction: committed when the block ends, rolled back when it raises.

        `read_only=True` is for blocks that only read: on SQLite they do not take the write
        lock (a block that reads and then writes must not use it). Keep write sessions short and
        never nest them: on SQLite a write session holds the database's single write lock (and
        this process's asyncio lock) until it ends, so a nested write session would deadlock.
        """
        if read_only or self._write_lock is None:
            bind = self._read_engine if read_only else self.engine
            async with AsyncSession(bind, expire_on_commit=False) as session, session.begin():
                yield session
            return
        async with (
            self._write_lock,
            AsyncSession(self.engine, expire_on_commit=False) as session,
            session.begin(),
        ):
            yield session

    async def ping(self, *, max_wait: float = 2.0) -> bool:
        """True when the database answers `SELECT 1` within `max_wait` seconds (for /healthz)."""
        try:
            async with asyncio.timeout(max_wait), self._read_engine.connect() as connection:
                await connection.execute(text("SELECT 1"))
        except Exception:
            return False
        return True

    def insert(self, table: Any) -> Any:
        """An INSERT of this dialect, which offers `on_conflict_do_nothing()` and `returning()`."""
        dialect_insert = sqlite.insert if self.dialect == "sqlite" else postgresql.insert
        return dialect_insert(table)

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
            connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

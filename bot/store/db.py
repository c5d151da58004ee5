"""The database: where the stores' transactions run, and the SQLite settings a bot needs.

The composition root creates one `Database` and injects it into the stores; there is no global
engine. The stores run each operation as ONE call of `transact(fn, *args, write=...)`: `fn` gets
a synchronous SQLAlchemy `Connection` in a transaction and runs all the operation's statements
with it; the transaction commits when `fn` returns and rolls back when it raises (the exception
is re-raised to the caller of `transact`).

- SQLite: one dedicated thread owns one synchronous connection on the stdlib `sqlite3` driver.
  Transactions arrive through a queue and run strictly in order, writes in
  `BEGIN IMMEDIATE` (across processes, writers queue on the busy timeout instead of failing on
  a lock upgrade), reads in a plain `BEGIN` (on the same thread: they queue behind this
  process's writes, which are short; a second reader thread measured no faster under the GIL).
  The event loop only queues the work and gets the result back (`call_soon_threadsafe`): a
  transaction costs it one thread trip, whatever the number of statements, and the write lock
  is held only while the statements run.
  A `brief` transaction (a few indexed statements: the hot path's claim, conversation lock
  and finished turn) skips the trip when the connection is free: it runs on the caller's
  thread, with no busy timeout, and goes to the thread after all when it would have to wait
  for another process's lock (then nothing of it ran). The trip (a queue, a thread wake-up,
  the GIL handed back and forth, a loop wake-up) cost 13-17% of a message's CPU.
  WAL mode, `synchronous=NORMAL`, a busy timeout, foreign keys on, and no automatic checkpoints
  on that connection: a checkpoint (which syncs the file) would stall every transaction queued
  behind it, so a background thread runs `PRAGMA wal_checkpoint(PASSIVE)` every few seconds on
  a short-lived connection of its own, concurrently with the writer. Under writes that never
  pause, a passive checkpoint never catches up with the writer, and the WAL only restarts from
  its beginning after one that did: it grew by every page ever written (340 MB in the 25 s of
  the webhook bench, a page appended to the file costing the kernel nearly twice an overwritten
  one). So once the WAL holds `RESTART_AFTER_FRAMES`, the passive checkpoint is followed by
  a `RESTART` one, which holds writers off while it copies what the passive one could not
  (a few milliseconds) and waits at most `RESTART_WAIT_MS` for readers; the next write then
  starts the WAL over.
- PostgreSQL: asyncpg under SQLAlchemy's async engine; `fn` runs through `run_sync` (one
  greenlet a transaction). The default READ COMMITTED level; the stores stay correct there
  through conditional updates and `INSERT ... ON CONFLICT DO NOTHING`.
  The pool keeps `POSTGRES_POOL_SIZE` connections open, `POSTGRES_WARM_CONNECTIONS` of
  them from start-up (opening one costs the server a process and the bot several round
  trips; at SQLAlchemy's default of 5, a burst of messages opened and closed overflow
  connections by the hundred) and does not ping a connection
  before each use (a round trip per transaction, half of them on the hot path). A connection
  that died while idle (the server restarted) instead fails at its first statement; such a
  transaction, which ran nothing, is run once more on a fresh connection.
  At most `POSTGRES_BACKGROUND_TRANSACTIONS` transactions that are not `urgent` run at
  once: a dozen replies writing their turns at the same moment otherwise keep the event
  loop so busy that the webhook's claim, which Feishu waits for, queues behind them (ACK
  p99 37 ms with 16 replies at once, 10 ms with 4). Urgent ones (the ACK path's) pass.

`fn` runs off the event loop (SQLite) or inside it (PostgreSQL): it must do nothing but database
work, and must not await, sleep or call `transact`. If the task awaiting `transact` is
cancelled, the transaction either never starts or runs to its end (committed, its result
dropped): a transaction is never left open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from sqlalchemy import create_engine, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import QueuePool

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./larkgate.db"
SUPPORTED_DIALECTS = ("sqlite", "postgresql")
DEFAULT_CHECKPOINT_INTERVAL = 5.0
# A WAL this long (~16 MB) is restarted after the passive checkpoint (see the module).
RESTART_AFTER_FRAMES = 4096
# How long the restarting checkpoint may wait for the writer and readers; writers wait for it.
RESTART_WAIT_MS = 20

_ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}
POSTGRES_POOL_SIZE = 20
POSTGRES_MAX_OVERFLOW = 10
POSTGRES_BACKGROUND_TRANSACTIONS = 4
# Opened at start-up: the first burst of pushes after a (re)start otherwise opens them on
# the ACK path (the bench's first 20-46 ACKs at 200/s took 10-96 ms; ~27 ms at most now).
POSTGRES_WARM_CONNECTIONS = 8
_RAN = "larkgate_ran_a_statement"  # in a connection's .info: a statement of fn completed
_SELECT_1 = text("SELECT 1")


class DatabaseConfigError(ValueError):
    """The database URL cannot work: unsupported backend or a missing SQLite directory."""


class DatabaseClosedError(RuntimeError):
    """A transaction was handed to a SQLite thread that had already stopped."""


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


def _select_1(connection: Connection) -> None:
    connection.execute(_SELECT_1)


def mark_ran(connection: Connection, *_: Any) -> None:
    """A statement of the transaction completed (an engine listener, and `Prepared`'s
    statements that go straight to asyncpg)."""
    ran = connection.info.get(_RAN)
    if ran is not None:
        ran[0] = True


def _tracking(
    connection: Connection, fn: Callable[..., T], args: tuple[Any, ...], ran: list[bool]
) -> T:
    """Run ``fn``; ``ran[0]`` turns True once one of its statements completed.

    (Set up before anything can fail: an invalidated connection's ``info`` must not be
    read again, so the flag lives in ``ran``, which the listener above updates.)
    """
    ran.append(False)
    connection.info[_RAN] = ran
    return fn(connection, *args)


class Database:
    """Transactions on one database; create one per process and inject it.

    `await Database.connect(url)` checks that the database answers (on SQLite it also starts the
    database's thread); `Database(url)` + `await db.start()` does the same in two steps, and the
    first `transact` starts it too. `dispose()` runs the transactions already queued, then
    stops the thread and closes the connections; `start()` (or a `transact`) opens them again.

    `checkpoint_interval` (SQLite): seconds between two WAL checkpoints of the background
    thread; None leaves checkpoints to SQLite (automatic, on the writer's connection).
    """

    def __init__(
        self,
        url: str | URL = DEFAULT_DATABASE_URL,
        *,
        busy_timeout_ms: int = 5000,
        echo: bool = False,
        checkpoint_interval: float | None = DEFAULT_CHECKPOINT_INTERVAL,
        **engine_options: Any,
    ) -> None:
        self._url = normalize_url(url)
        self.dialect: str = self._url.get_backend_name()
        self._async_engine: AsyncEngine | None = None
        self._autocommit_engine: AsyncEngine | None = None
        self._in_flight = 0  # PostgreSQL transactions under way, which dispose() waits for
        self._idle: asyncio.Event | None = None
        self._background: asyncio.Semaphore | None = None
        self._background_limit = POSTGRES_BACKGROUND_TRANSACTIONS
        self._worker: _SqliteThread | None = None
        self._finalizer: weakref.finalize[Any, Any]
        if self.dialect == "sqlite":
            _check_sqlite_directory(self._url)
            self._sqlite_options = _SqliteOptions(
                url=self._url.set(drivername="sqlite"),
                file=sqlite_file(self._url),
                busy_timeout_ms=int(busy_timeout_ms),
                checkpoint_interval=checkpoint_interval,
                echo=echo,
                engine_options=engine_options,
            )
        else:
            if "poolclass" not in engine_options:
                engine_options.setdefault("pool_size", POSTGRES_POOL_SIZE)
                engine_options.setdefault("max_overflow", POSTGRES_MAX_OVERFLOW)
            engine_options.setdefault("pool_pre_ping", False)
            self._async_engine = create_async_engine(self._url, echo=echo, **engine_options)
            event.listen(self._async_engine.sync_engine, "after_cursor_execute", mark_ran)
            # The same pool, for transact(atomic=False).
            self._autocommit_engine = self._async_engine.execution_options(
                isolation_level="AUTOCOMMIT"
            )

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
        """Open the connection, so that a wrong URL or a down server fails at start-up;
        on PostgreSQL, open a few more for the pool (`POSTGRES_WARM_CONNECTIONS`)."""
        await self.transact(_select_1, write=False)
        if self._async_engine is not None:
            await self._warm_pool()

    async def _warm_pool(self) -> None:
        assert self._async_engine is not None
        pool = self._async_engine.sync_engine.pool
        if not isinstance(pool, QueuePool):
            return  # NullPool (migrations) or a caller's own pool: nothing is kept
        # All checked out at once, the idle ones included: the pool then holds `wanted`.
        wanted = min(POSTGRES_WARM_CONNECTIONS, pool.size())
        opened = await asyncio.gather(
            *(self._async_engine.connect() for _ in range(wanted)), return_exceptions=True
        )
        for connection in opened:
            if not isinstance(connection, BaseException):
                await connection.close()  # back to the pool, open
        failed = [c for c in opened if isinstance(c, BaseException)]
        for error in failed:
            if not isinstance(error, Exception):
                raise error  # a cancellation or an exit is not a connection problem
        if failed:
            # The server works (SELECT 1 did): the rest open on demand, as without this.
            logger.warning(
                "opened %d of %d warm PostgreSQL connections: %s",
                wanted - len(failed),
                wanted,
                failed[0],
            )

    async def dispose(self) -> None:
        """Stop: run the transactions already queued, then close the connections."""
        worker, self._worker = self._worker, None
        if worker is not None:
            self._finalizer.detach()
            await worker.stop()
        if self._async_engine is not None:
            while self._in_flight:  # let the transactions under way end
                self._idle = asyncio.Event()
                await self._idle.wait()
            await self._async_engine.dispose()

    async def __aenter__(self) -> Database:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.dispose()

    async def transact(
        self,
        fn: Callable[..., T],
        /,
        *args: Any,
        write: bool = True,
        urgent: bool = False,
        atomic: bool = True,
        brief: bool = False,
    ) -> T:
        """`fn(connection, *args)` in one transaction; returns what `fn` returns.

        Committed when `fn` returns, rolled back when it raises, and the exception re-raised
        here. `write=False` is for transactions that only read (on SQLite they start with a
        plain `BEGIN` and take no write lock). `urgent` is for what a caller outside waits
        for (Feishu, for the claim behind its ACK): on PostgreSQL it does not queue behind
        the background transactions. `atomic=False` says that `fn` needs no transaction:
        it writes at most once, in one conditional statement, and whatever it reads it would
        read the same in a transaction (PostgreSQL's READ COMMITTED gives every statement
        its own snapshot anyway). On PostgreSQL its statements then run without BEGIN and
        COMMIT: two round trips fewer, and about 300 µs less CPU through SQLAlchemy.
        `brief=True` says that `fn` runs a few statements on indexes (well under a
        millisecond, nothing that grows with the data): on SQLite it may run on the event
        loop's thread, blocking the loop that long, instead of queueing for the database's
        thread; it may then pass transactions queued earlier by other tasks.
        """
        if self._async_engine is not None:
            self._in_flight += 1
            try:
                if urgent:
                    return await self._postgres_retrying(fn, args, atomic)
                async with self._background_slot():
                    return await self._postgres_retrying(fn, args, atomic)
            finally:
                self._in_flight -= 1
                if not self._in_flight and self._idle is not None:
                    self._idle.set()
        worker = self._worker
        if worker is None:
            worker = self._worker = _SqliteThread(self._sqlite_options)
            # A Database dropped without dispose() must not leave its thread behind.
            self._finalizer = weakref.finalize(self, worker.stop_soon)
        if brief:
            result = worker.run_here(fn, args, write)
            if result is not _QUEUE:
                return cast(T, result)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        worker.submit((fn, args, write, future, loop))
        return await future

    def _background_slot(self) -> asyncio.Semaphore:
        if self._background is None:
            self._background = asyncio.Semaphore(self._background_limit)
        return self._background

    async def _postgres_retrying(
        self, fn: Callable[..., T], args: tuple[Any, ...], atomic: bool
    ) -> T:
        try:
            return await self._postgres_transaction(fn, args, atomic)
        except DBAPIError as exc:
            if not (exc.connection_invalidated and getattr(exc, _RAN, True) is False):
                raise
            logger.warning("a pooled database connection was dead; retrying on a new one")
            return await self._postgres_transaction(fn, args, atomic)

    async def _postgres_transaction(
        self, fn: Callable[..., T], args: tuple[Any, ...], atomic: bool
    ) -> T:
        assert self._async_engine is not None
        ran: list[bool] = []
        try:
            if not atomic and self._autocommit_engine is not None:
                async with self._autocommit_engine.connect() as connection:
                    return await connection.run_sync(_tracking, fn, args, ran)
            async with self._async_engine.begin() as connection:
                return await connection.run_sync(_tracking, fn, args, ran)
        except DBAPIError as exc:
            # Whether any statement of this transaction completed: only when none did is
            # running it again certain not to apply anything twice.
            setattr(exc, _RAN, bool(ran) and ran[0])
            raise

    async def ping(self, *, max_wait: float = 2.0) -> bool:
        """True when the database answers `SELECT 1` within `max_wait` seconds (for /healthz)."""
        try:
            async with asyncio.timeout(max_wait):
                await self.transact(_select_1, write=False)
        except Exception:
            return False
        return True

    def insert(self, table: Any) -> Any:
        """An INSERT of this dialect, which offers `on_conflict_do_nothing()` and `returning()`."""
        dialect_insert = sqlite.insert if self.dialect == "sqlite" else postgresql.insert
        return dialect_insert(table)


class _SqliteOptions:
    __slots__ = (
        "busy_timeout_ms",
        "checkpoint_interval",
        "echo",
        "engine_options",
        "file",
        "url",
    )

    def __init__(
        self,
        *,
        url: URL,
        file: Path | None,
        busy_timeout_ms: int,
        checkpoint_interval: float | None,
        echo: bool,
        engine_options: dict[str, Any],
    ) -> None:
        self.url = url
        self.file = file
        self.busy_timeout_ms = busy_timeout_ms
        # No WAL (in-memory database): nothing to checkpoint.
        self.checkpoint_interval = checkpoint_interval if file is not None else None
        self.echo = echo
        self.engine_options = engine_options


# A work item: fn, args, write, the future to resolve, its loop. `_STOP` ends the thread.
_Item = tuple[Any, tuple[Any, ...], bool, "asyncio.Future[Any]", asyncio.AbstractEventLoop]
_STOP = object()
_QUEUE = object()  # from run_here: not run, queue it for the thread
_SQLITE_BUSY = 5


def _resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """On the event loop: hand the outcome to the awaiting task (unless it gave up waiting)."""
    if future.done():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


class _SqliteThread:
    """The thread of a SQLite database: one connection, one transaction at a time, in order."""

    def __init__(self, options: _SqliteOptions) -> None:
        self._options = options
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._engine: Engine | None = None
        self._connection: Connection | None = None
        self._driver: Any = None  # the sqlite3 connection under self._connection
        # The connection is the thread's, and the event loop's for a brief transaction
        # (`run_here`): whoever runs a transaction holds `_using`.
        self._using = threading.Lock()
        self._thread_waits = False  # the thread waits for `_using`: run_here lets it go first
        self._busy_timeout_ms = options.busy_timeout_ms  # the connection's, as last set
        self._shared = options.file is not None  # an in-memory database stays on the thread
        self._stopping = False
        self._stopped: asyncio.Future[None] | None = None
        self._checkpointer = (
            None
            if options.checkpoint_interval is None
            else _Checkpointer(
                options.file, options.checkpoint_interval, options.busy_timeout_ms, self._using
            )
        )
        self._thread = threading.Thread(target=self._run, name="larkgate-sqlite", daemon=True)
        self._thread.start()
        if self._checkpointer is not None:
            self._checkpointer.start()

    def run_here(self, fn: Any, args: tuple[Any, ...], write: bool) -> Any:
        """Run a transaction on the calling thread if the connection is free at once.

        Returns `_QUEUE` when it is not (the thread runs a transaction or waits to), and
        when the transaction would have had to wait for another process's lock: with the
        busy timeout off, SQLite refuses the lock at once, before anything of the
        transaction ran (a write takes its locks at BEGIN IMMEDIATE, a read at its first
        statement), and the thread, which waits, runs it instead.
        """
        if self._stopping:
            raise DatabaseClosedError("the database was disposed")
        if not self._shared or self._thread_waits or not self._using.acquire(blocking=False):
            return _QUEUE
        try:
            return self._transaction(fn, args, write, busy_timeout_ms=0)
        except DBAPIError as error:
            if _is_busy(error):
                return _QUEUE
            raise
        finally:
            self._using.release()

    def submit(self, item: _Item) -> None:
        if self._stopping:
            raise DatabaseClosedError("the database was disposed")
        self._queue.put(item)

    async def stop(self) -> None:
        """Run what is queued, then close the connection and end the thread."""
        if self._stopping:
            return
        self._stopping = True
        loop = asyncio.get_running_loop()
        self._stopped = loop.create_future()
        self._queue.put((_STOP, loop, self._stopped))
        await asyncio.shield(self._stopped)
        # The thread has closed everything and is returning: nothing left to wait for.
        self._thread.join()

    def stop_soon(self) -> None:
        """Stop without waiting (from a finalizer)."""
        if not self._stopping:
            self._stopping = True
            self._queue.put((_STOP, None, None))

    # In the thread.

    def _run(self) -> None:
        get = self._queue.get
        while True:
            item = get()
            if item[0] is _STOP:
                break
            self._execute(*item)
        with self._using:
            self._close()
        if self._checkpointer is not None:
            self._checkpointer.stop()
        _, loop, stopped = item
        if loop is not None:
            _call_soon(loop, _resolve, stopped, None, None)

    def _execute(
        self,
        fn: Any,
        args: tuple[Any, ...],
        write: bool,
        future: asyncio.Future[Any],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        if future.cancelled():
            return  # the caller stopped waiting before the transaction started: skip it
        self._thread_waits = True
        try:
            with self._using:
                self._thread_waits = False
                result = self._transaction(fn, args, write, self._options.busy_timeout_ms)
        except BaseException as error:
            _call_soon(loop, _resolve, future, None, error)
        else:
            # Only now, with the connection free: the caller's next brief transaction
            # would otherwise find it taken, and queue.
            _call_soon(loop, _resolve, future, result, None)

    def _transaction(
        self, fn: Any, args: tuple[Any, ...], write: bool, busy_timeout_ms: int
    ) -> Any:
        connection = self._connection
        if connection is None or connection.invalidated:
            connection = self._open()
        # The BEGIN goes straight to the driver: an engine with a "begin" listener would run
        # its (empty) statement events on every statement.
        begin = "BEGIN IMMEDIATE" if write else "BEGIN"
        try:
            if busy_timeout_ms != self._busy_timeout_ms:
                self._driver.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}").close()
                self._busy_timeout_ms = busy_timeout_ms
            self._driver.execute(begin)
        except sqlite3.Error as error:
            # E.g. "database is locked": another process held the write lock past the timeout.
            self._close_if_broken(connection)
            raise DBAPIError.instance(begin, None, error, sqlite3.Error) from error
        # No SQLAlchemy transaction object either: a `Prepared` statement runs on the
        # driver, and SQLAlchemy begins its own (without a statement on SQLite) only when
        # fn runs a statement through it. Whoever began it ends it.
        try:
            result = fn(connection, *args)
        except BaseException:
            try:
                if connection.in_transaction():
                    connection.rollback()
                else:
                    self._driver.rollback()
            except BaseException:
                self._close()
                raise
            self._close_if_broken(connection)
            raise
        try:
            if connection.in_transaction():
                connection.commit()
            else:
                self._commit_driver()
        except BaseException:
            # A failed COMMIT (e.g. SQLITE_BUSY) leaves the transaction open: drop it.
            self._close()
            raise
        return result

    def _commit_driver(self) -> None:
        try:
            self._driver.commit()
        except sqlite3.Error as error:
            raise DBAPIError.instance("COMMIT", None, error, sqlite3.Error) from error

    def _close_if_broken(self, connection: Connection) -> None:
        """Close a connection that a failed transaction left unusable or still open."""
        if connection.invalidated or connection.closed or self._driver_in_transaction():
            self._close()

    def _driver_in_transaction(self) -> bool:
        """Whether the sqlite3 connection is in a transaction (True when it cannot tell)."""
        try:
            return bool(self._driver.in_transaction)
        except Exception:
            return True

    def _open(self) -> Connection:
        self._close()
        if self._engine is None:
            self._engine = self._create_engine()
        self._connection = self._engine.connect()
        self._driver = self._connection.connection.driver_connection
        self._busy_timeout_ms = self._options.busy_timeout_ms  # as the pragmas set it
        return self._connection

    def _close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                if not connection.closed:
                    if connection.invalidated or self._driver_in_transaction():
                        # Closing the sqlite3 connection ends whatever transaction it had.
                        connection.invalidate()
                    connection.close()
            except Exception:
                logger.debug("closing the SQLite connection failed", exc_info=True)
        self._driver = None
        if self._engine is not None and self._stopping:
            self._engine.dispose()
            self._engine = None

    def _create_engine(self) -> Engine:
        options = self._options
        engine = create_engine(options.url, echo=options.echo, **options.engine_options)
        pragmas = [
            f"PRAGMA busy_timeout = {options.busy_timeout_ms}",
            "PRAGMA journal_mode = WAL",
            "PRAGMA synchronous = NORMAL",
            "PRAGMA foreign_keys = ON",
        ]
        if options.checkpoint_interval is not None:
            pragmas.append("PRAGMA wal_autocheckpoint = 0")  # the checkpointer's job

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # The driver's own implicit BEGIN is off: `_transaction` sends ours.
            dbapi_connection.isolation_level = None
            for pragma in pragmas:
                dbapi_connection.execute(pragma).close()

        return engine


def _is_busy(error: DBAPIError) -> bool:
    """Whether SQLite refused a lock that another connection holds (SQLITE_BUSY)."""
    code = getattr(error.orig, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF == _SQLITE_BUSY


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Any, *args: Any) -> None:
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
        loop.call_soon_threadsafe(callback, *args)


class _Checkpointer:
    """Runs `PRAGMA wal_checkpoint(PASSIVE)` every `interval` seconds on a connection of its own.

    A passive checkpoint takes no lock that writers need: they go on appending to the WAL while
    it copies pages into the database file and syncs it. The WAL restarts from its beginning at
    the first write after a checkpoint that copied everything: after a quiet moment, or after
    the restarting checkpoint that follows a passive one once the WAL is long (see the module).
    """

    def __init__(
        self,
        file: Path | None,
        interval: float,
        busy_timeout_ms: int,
        connection_lock: threading.Lock,
    ) -> None:
        assert file is not None
        self._file = str(file)
        # Held by whoever runs a transaction on this process's connection (`_SqliteThread`).
        self._connection_lock = connection_lock
        self._interval = interval
        self._busy_timeout_ms = busy_timeout_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="larkgate-sqlite-checkpoint", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                _, frames, _ = checkpoint(self._file, timeout=self._busy_timeout_ms / 1000)
                if frames >= RESTART_AFTER_FRAMES:
                    # This process's transactions wait the few milliseconds it takes:
                    # otherwise, back to back, they never leave it the write lock.
                    with self._connection_lock:
                        restart_wal(self._file)
            except Exception:
                logger.warning("WAL checkpoint of %s failed", self._file, exc_info=True)


def checkpoint(file: str, *, timeout: float = 5.0) -> tuple[int, int, int]:
    """One passive WAL checkpoint of `file`, on a connection of its own; returns SQLite's
    (busy, frames in the WAL, frames checkpointed). A missing file is an error, not created."""
    return _checkpoint(file, "PASSIVE", timeout)


def restart_wal(file: str) -> tuple[int, int, int]:
    """A `RESTART` checkpoint of `file`: everything copied, then the next write starts the
    WAL over. It holds writers off while it runs, so it waits only `RESTART_WAIT_MS` for the
    writer and the readers before it gives up (busy is then 1, and nothing is lost)."""
    return _checkpoint(file, "RESTART", RESTART_WAIT_MS / 1000)


def _checkpoint(file: str, mode: str, timeout: float) -> tuple[int, int, int]:
    uri = f"{Path(file).resolve().as_uri()}?mode=rw"
    connection = sqlite3.connect(uri, timeout=timeout, isolation_level=None, uri=True)
    try:
        row = connection.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
    finally:
        connection.close()
    return tuple(row)

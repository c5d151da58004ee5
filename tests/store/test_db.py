"""The Database: URLs, SQLite settings, transactions (`transact`), the health ping."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from bot.store import Database, DatabaseConfigError, normalize_url
from bot.store import db as db_module

from support.postgres import execute, fetchval, scratch_database_async
from support.waiting import wait_until


def test_urls_get_their_async_driver():
    assert normalize_url("sqlite:///x.db").drivername == "sqlite+aiosqlite"
    assert normalize_url("postgres://u:p@h/db").drivername == "postgresql+asyncpg"
    assert normalize_url("postgresql://u:p@h/db").drivername == "postgresql+asyncpg"
    assert normalize_url("sqlite+aiosqlite:///x.db").drivername == "sqlite+aiosqlite"
    with pytest.raises(DatabaseConfigError, match="unsupported"):
        normalize_url("mysql+aiomysql://u:p@h/db")


def test_a_missing_sqlite_directory_is_a_clear_error(tmp_path):
    missing = tmp_path / "nope" / "larkgate.db"
    with pytest.raises(DatabaseConfigError, match="does not exist") as error:
        Database(f"sqlite+aiosqlite:///{missing}")
    assert "nope" in str(error.value)


async def test_the_default_url_is_a_file_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    async with Database() as db:
        assert db.dialect == "sqlite"
        assert await db.ping()
    assert (tmp_path / "larkgate.db").is_file()


async def test_the_database_answers_and_hides_its_password(db, migrated_url):
    assert await db.ping()
    assert db.dialect in ("sqlite", "postgresql")
    if db.dialect == "postgresql":
        assert "***" in db.url
        assert ":larkgate@" not in db.url


async def test_ping_is_false_when_the_database_does_not_answer():
    # Nothing listens on port 1; asyncpg is refused at once (no server needed).
    db = Database("postgresql+asyncpg://larkgate:secret@127.0.0.1:1/larkgate")
    try:
        assert not await db.ping(max_wait=2.0)
        with pytest.raises(ConnectionRefusedError):
            await db.start()
    finally:
        await db.dispose()


def _pragmas(connection, names):
    return {name: connection.execute(text(f"PRAGMA {name}")).scalar() for name in names}


async def test_sqlite_runs_in_wal_with_a_busy_timeout_foreign_keys_and_no_autocheckpoint(db):
    if db.dialect != "sqlite":
        pytest.skip("SQLite settings")
    names = ("journal_mode", "synchronous", "busy_timeout", "foreign_keys", "wal_autocheckpoint")
    expected = {
        "journal_mode": "wal",
        "synchronous": 1,
        "busy_timeout": 5000,
        "foreign_keys": 1,
        # The background checkpointer does it, off the thread of the transactions.
        "wal_autocheckpoint": 0,
    }
    assert await db.transact(_pragmas, names) == expected
    assert await db.transact(_pragmas, names, write=False) == expected


INSERT = text(
    "INSERT INTO conversations (id, scope_key, generation, created_at) "
    "VALUES (:id, 'scope', :generation, 0)"
)


def _insert(connection, id_: str, generation: int) -> None:
    connection.execute(INSERT, {"id": id_, "generation": generation})


def _select_ids(connection) -> list[str]:
    return list(connection.execute(text("SELECT id FROM conversations ORDER BY id")).scalars())


async def _ids(db: Database) -> list[str]:
    return await db.transact(_select_ids, write=False)


async def test_a_transaction_commits_returns_and_rolls_back_on_error(db):
    def insert_and_count(connection, id_, generation):
        _insert(connection, id_, generation)
        return connection.execute(text("SELECT count(*) FROM conversations")).scalar()

    assert await db.transact(insert_and_count, "kept", 1) == 1

    def insert_then_fail(connection):
        _insert(connection, "lost", 2)
        raise RuntimeError("boom")

    def insert_then_conflict(connection):
        _insert(connection, "lost too", 3)
        _insert(connection, "kept", 4)

    with pytest.raises(RuntimeError, match="boom"):
        await db.transact(insert_then_fail)
    with pytest.raises(IntegrityError):
        await db.transact(insert_then_conflict)
    assert await _ids(db) == ["kept"]
    # The connection is still usable after those errors.
    await db.transact(_insert, "later", 5)
    assert await _ids(db) == ["kept", "later"]


async def test_a_non_atomic_transact_runs_each_statement_on_its_own_on_postgresql(db):
    """atomic=False is for work that writes once, in one statement: on PostgreSQL it runs
    without BEGIN/COMMIT (each statement commits), on SQLite in a transaction as always."""

    def in_transaction(connection) -> bool:
        # now() is when the transaction began: in one, a statement 50 ms after the first is
        # 50 ms past it; on its own, it began with the statement.
        connection.execute(text("SELECT 1"))
        time.sleep(0.05)
        sql = "SELECT statement_timestamp() - now() >= interval '50 milliseconds'"
        return bool(connection.execute(text(sql)).scalar())

    def insert_then_fail(connection) -> None:
        _insert(connection, "written", 1)
        raise RuntimeError("after the one write")

    if db.dialect != "postgresql":
        assert await db.transact(lambda connection: 7, atomic=False) == 7
        pytest.skip("PostgreSQL: SQLite has no statements outside a transaction here")
    assert await db.transact(in_transaction, write=False) is True
    assert await db.transact(in_transaction, write=False, atomic=False) is False
    with pytest.raises(RuntimeError):
        await db.transact(insert_then_fail, atomic=False)
    assert await _ids(db) == ["written"]  # committed by itself: nothing to roll back
    with pytest.raises(RuntimeError):
        await db.transact(_insert_then_fail_atomically)
    assert await _ids(db) == ["written"]
    # The pool's connections go back to transactions afterwards.
    assert await db.transact(in_transaction, write=False) is True


def _insert_then_fail_atomically(connection) -> None:
    _insert(connection, "rolled back", 2)
    raise RuntimeError("rolled back with the transaction")


async def test_an_empty_transaction_is_fine(db):
    assert await db.transact(lambda connection: None) is None
    assert await db.transact(lambda connection: 7, write=False) == 7


async def test_concurrent_transactions_all_commit(db):
    await asyncio.gather(*(db.transact(_insert, f"c{n:02}", n) for n in range(30)))
    assert len(await _ids(db)) == 30


async def test_sqlite_transactions_run_in_order_on_one_thread_and_connection(db):
    if db.dialect != "sqlite":
        pytest.skip("SQLite thread")
    seen: list[tuple[int, int, int]] = []

    def step(connection, n: int, write: bool) -> None:
        raw = connection.connection.driver_connection
        seen.append((n, threading.get_ident(), id(raw)))
        assert raw.in_transaction
        if write:
            _insert(connection, f"o{n:02}", n)

    await asyncio.gather(*(db.transact(step, n, n % 3 != 0, write=n % 3 != 0) for n in range(40)))
    assert [n for n, _, _ in seen] == list(range(40))
    assert len({(thread, raw) for _, thread, raw in seen}) == 1
    assert seen[0][1] != threading.get_ident()  # not the event loop's thread
    assert len(await _ids(db)) == 26


def _try_begin_immediate(path: str) -> bool:
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError as error:
        if "locked" not in str(error):
            raise
        return False
    finally:
        other.close()


async def test_sqlite_writes_begin_immediate_and_reads_take_no_write_lock(db, migrated_url):
    if db.dialect != "sqlite":
        pytest.skip("SQLite locking")
    path = str(db_module.sqlite_file(normalize_url(migrated_url)))
    # A write transaction holds the write lock from its start, before any statement: another
    # connection cannot start writing ("database is locked" after its busy timeout).
    assert await db.transact(lambda connection: _try_begin_immediate(path)) is False
    assert await db.transact(lambda connection: _try_begin_immediate(path), write=False) is True
    assert _try_begin_immediate(path)  # and nothing is left open


async def test_a_cancelled_caller_leaves_no_open_transaction(db, migrated_url):
    if db.dialect != "sqlite":
        pytest.skip("the SQLite thread (PostgreSQL: see the next test)")
    path = str(db_module.sqlite_file(normalize_url(migrated_url)))
    running, release = threading.Event(), threading.Event()

    def slow_insert(connection) -> None:
        _insert(connection, "started", 1)
        running.set()
        assert release.wait(10)

    started = asyncio.create_task(db.transact(slow_insert))
    await asyncio.to_thread(running.wait, 10)
    queued = asyncio.create_task(db.transact(_insert, "queued", 2))
    await asyncio.sleep(0)  # submitted behind slow_insert
    for task in (started, queued):
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    release.set()
    # The transaction that had started ran to its end; the one still queued was skipped.
    await db.transact(_insert, "after", 3)
    assert await _ids(db) == ["after", "started"]
    assert _try_begin_immediate(path)


async def _running(url: str, statement: str, count: int = 1) -> bool:
    """Whether ``count`` sessions of this database are running ``statement`` (seen from
    another session, in pg_stat_activity)."""
    running = await fetchval(
        make_url(url),
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        f" AND state = 'active' AND query = '{statement}'",
    )
    return running >= count


async def test_a_cancelled_postgresql_transaction_rolls_back(db, migrated_url):
    if db.dialect != "postgresql":
        pytest.skip("PostgreSQL")

    def slow_insert(connection) -> None:
        _insert(connection, "cancelled", 1)
        connection.execute(text("SELECT pg_sleep(10)"))

    task = asyncio.create_task(db.transact(slow_insert))
    await wait_until(lambda: _running(migrated_url, "SELECT pg_sleep(10)"))  # the insert is in
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await db.transact(_insert, "after", 2)
    assert await _ids(db) == ["after"]


async def test_a_timeout_stops_waiting_and_the_database_goes_on(db):
    release = threading.Event()

    def wait_for_release(connection) -> None:
        if db.dialect == "sqlite":
            release.wait(5)
        else:
            connection.execute(text("SELECT pg_sleep(1)"))

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await db.transact(wait_for_release)
    if db.dialect == "sqlite":  # the thread is still busy with it
        assert not await db.ping(max_wait=0.1)
    release.set()
    assert await db.ping()


async def test_dispose_runs_the_queued_transactions_then_stops_the_thread(migrated_url):
    before = set(threading.enumerate())
    db = await Database.connect(migrated_url)
    own_threads = [t for t in set(threading.enumerate()) - before if t.name.startswith("larkgate")]
    assert len(own_threads) == (2 if db.dialect == "sqlite" else 0)  # writer and checkpointer
    tasks = [asyncio.create_task(db.transact(_insert, f"d{n:02}", n)) for n in range(20)]
    await asyncio.sleep(0)  # all submitted
    await db.dispose()
    assert all(task.done() and task.exception() is None for task in tasks)
    assert not any(thread.is_alive() for thread in own_threads)
    # A transaction after dispose() opens the database again; so does start().
    try:
        await db.transact(_insert, "again", 99)
        assert len(await _ids(db)) == 21
        await db.dispose()
        await db.start()
        assert len(await _ids(db)) == 21
    finally:
        await db.dispose()


async def test_a_broken_sqlite_connection_is_reopened_on_the_next_transaction(db):
    if db.dialect != "sqlite":
        pytest.skip("SQLite connection")

    def break_it(connection) -> None:
        _insert(connection, "lost", 2)
        connection.connection.driver_connection.close()  # behind SQLAlchemy's back
        _insert(connection, "lost too", 3)

    await db.transact(_insert, "before", 1)
    with pytest.raises(Exception):  # noqa: B017, PT011 (whatever the driver raises)
        await db.transact(break_it)
    await db.transact(_insert, "after", 4)
    assert await _ids(db) == ["after", "before"]


async def test_two_databases_on_one_sqlite_file_both_write(db, other_db, migrated_url):
    """Two threads (as two processes would): BEGIN IMMEDIATE and the busy timeout queue them."""
    if db.dialect != "sqlite":
        pytest.skip("SQLite writers")

    held = threading.Event()

    def hold_the_lock(connection) -> None:
        _insert(connection, "held", 0)
        held.set()
        time.sleep(0.3)  # the other writer waits on its busy timeout meanwhile

    holding = asyncio.create_task(db.transact(hold_the_lock))
    assert await asyncio.to_thread(held.wait, 10)
    await asyncio.gather(
        holding,
        *((db if n % 2 else other_db).transact(_insert, f"t{n:02}", n + 1) for n in range(40)),
    )
    assert len(await _ids(db)) == len(await _ids(other_db)) == 41


async def test_in_memory_sqlite_works(tmp_path):
    from sqlmodel import SQLModel

    import bot.store.models  # noqa: F401

    async with Database("sqlite+aiosqlite:///:memory:") as db:
        await db.transact(lambda connection: SQLModel.metadata.create_all(connection))
        await db.transact(_insert, "m", 1)
        assert await _ids(db) == ["m"]


def _big_rows(connection, start: int, count: int) -> None:
    connection.execute(
        text("INSERT INTO runs_blob (n, body) VALUES (:n, :body)"),
        [{"n": start + n, "body": "x" * 4000} for n in range(count)],
    )


async def _blob_table(db: Database) -> None:
    await db.transact(
        lambda connection: connection.execute(
            text("CREATE TABLE IF NOT EXISTS runs_blob (n INTEGER PRIMARY KEY, body TEXT)")
        )
    )


async def test_the_writer_never_checkpoints_the_background_thread_does(migrated_url):
    if not migrated_url.startswith("sqlite"):
        pytest.skip("SQLite WAL")
    path = db_module.sqlite_file(normalize_url(migrated_url))
    wal = path.with_name(path.name + "-wal")
    async with Database(migrated_url, checkpoint_interval=3600) as db:
        await _blob_table(db)
        size = path.stat().st_size
        # ~6 MB through the WAL: past SQLite's automatic checkpoint (1000 pages, ~4 MB).
        for batch in range(15):
            await db.transact(_big_rows, batch * 100, 100)
        assert path.stat().st_size == size  # nothing copied into the database file
        assert wal.stat().st_size > 5_000_000
        # (Still open: closing the last connection would checkpoint.) A checkpointer copies
        # the WAL into the database file.
        async with Database(migrated_url, checkpoint_interval=0.05):
            await wait_until(lambda: path.stat().st_size > size + 5_000_000, every=0.02)


async def test_checkpoints_do_not_block_writers(migrated_url, monkeypatch):
    """Passive checkpoints running back to back on their own thread while the writer writes."""
    if not migrated_url.startswith("sqlite"):
        pytest.skip("SQLite WAL")
    real_checkpoint = db_module.checkpoint
    busy = threading.Event()
    stop = threading.Event()
    checkpoints: list[tuple[int, int, int]] = []
    threads: set[int] = set()

    def checkpoint_continuously(file: str, *, timeout: float = 5.0) -> tuple[int, int, int]:
        threads.add(threading.get_ident())
        while not stop.is_set():
            checkpoints.append(real_checkpoint(file, timeout=timeout))
            busy.set()
        return checkpoints[-1]

    monkeypatch.setattr(db_module, "checkpoint", checkpoint_continuously)
    async with Database(migrated_url, checkpoint_interval=0.01) as db:
        await _blob_table(db)
        await asyncio.to_thread(busy.wait, 5)
        writer_threads: set[int] = set()

        def write(connection, start: int) -> None:
            writer_threads.add(threading.get_ident())
            _big_rows(connection, start, 20)

        slowest = 0.0
        for batch in range(100):
            began = time.perf_counter()
            await db.transact(write, batch * 20)
            slowest = max(slowest, time.perf_counter() - began)
        stop.set()
    assert len(checkpoints) > 1
    assert any(frames_copied for _, _, frames_copied in checkpoints)
    assert not threads & writer_threads
    assert slowest < 1.0  # never waiting on the checkpointer (a busy timeout would be 5 s)


async def test_the_wal_stays_bounded_under_writes_that_never_pause(migrated_url, monkeypatch):
    """A passive checkpoint never catches up with a writer that never pauses, and the WAL
    restarts only after one that did: without the restarting checkpoint it grew by every
    page written (hundreds of MB in a minute of a busy bot)."""
    if not migrated_url.startswith("sqlite"):
        pytest.skip("SQLite WAL")
    monkeypatch.setattr(db_module, "RESTART_AFTER_FRAMES", 256)  # ~1 MB
    path = db_module.sqlite_file(normalize_url(migrated_url))
    wal = path.with_name(path.name + "-wal")
    async with Database(migrated_url, checkpoint_interval=0.01) as db:
        await _blob_table(db)
        written = 0
        largest = 0

        async def writer(first: int) -> None:
            nonlocal written, largest
            for batch in range(250):
                # Brief, on the loop's thread, back to back: the WAL is never idle.
                await db.transact(_big_rows, first + batch * 10, 10, brief=True)
                written += 10 * 4000
                largest = max(largest, wal.stat().st_size)

        await asyncio.gather(writer(0), writer(1_000_000))
    assert written == 20_000_000
    # The WAL's file keeps the size it grew to between two restarts: a few MB here, and
    # at least every page written without one. The checkpointer is a thread that a busy
    # machine may not run for a while (10.3 MB seen with both cores loaded), so the bound
    # says "restarted well before the end", not how often.
    assert largest < written * 0.75, (largest, written)


@pytest.mark.parametrize("brief", [False, True], ids=["queued", "brief"])
async def test_a_write_lock_held_past_the_busy_timeout_fails_that_transaction_only(
    migrated_url, brief
):
    """A brief write too: refused at once on the caller's thread, it waits on the database
    thread for the busy timeout like any other, then fails alone."""
    if not migrated_url.startswith("sqlite"):
        pytest.skip("SQLite locking")
    path = str(db_module.sqlite_file(normalize_url(migrated_url)))
    other = sqlite3.connect(path, isolation_level=None)
    async with Database(migrated_url, busy_timeout_ms=50) as db:
        other.execute("BEGIN IMMEDIATE")  # another process writing
        try:
            with pytest.raises(OperationalError, match="locked"):
                await db.transact(_insert, "locked out", 1, brief=brief)
            assert await _ids(db) == []  # reads go on meanwhile (WAL)
        finally:
            other.execute("ROLLBACK")
            other.close()
        await db.transact(_insert, "after", 2, brief=brief)
        assert await _ids(db) == ["after"]


async def test_a_connection_killed_while_idle_is_replaced_and_nothing_runs_twice(db, other_db):
    """No ping before each use: a pooled connection the server dropped (a restart, an
    idle timeout) fails at its first statement, and that transaction, which ran nothing,
    runs once more on a new connection. One that had run a statement is not retried."""
    if db.dialect != "postgresql":
        pytest.skip("PostgreSQL")

    def backend_pid(connection) -> int:
        return connection.execute(text("SELECT pg_backend_pid()")).scalar_one()

    def terminate(connection, pid: int) -> None:
        connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})

    def insert_then_terminate_self(connection) -> None:
        _insert(connection, "half", 2)
        # The connection dies under this transaction, after one of its statements ran.
        connection.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))

    victim = await db.transact(backend_pid, write=False)
    await other_db.transact(terminate, victim)
    await db.transact(_insert, "after", 1)  # on the pool's dead connection first
    assert await _ids(db) == ["after"]
    assert await db.transact(backend_pid, write=False) != victim

    with pytest.raises(DBAPIError) as died:
        await db.transact(insert_then_terminate_self)
    assert died.value.connection_invalidated
    assert await _ids(db) == ["after"]  # rolled back, and not run a second time


async def test_urgent_transactions_pass_the_background_ones(db, migrated_url):
    """The claim behind a webhook's ACK does not queue behind replies writing their turns."""
    if db.dialect != "postgresql":
        pytest.skip("PostgreSQL")

    def slow(connection) -> None:
        connection.execute(text("SELECT pg_sleep(0.5)"))

    background = [
        asyncio.create_task(db.transact(slow))
        for _ in range(db_module.POSTGRES_BACKGROUND_TRANSACTIONS + 1)
    ]
    # Every background slot is taken by a sleeping transaction (the last one waits).
    await wait_until(
        lambda: _running(
            migrated_url, "SELECT pg_sleep(0.5)", db_module.POSTGRES_BACKGROUND_TRANSACTIONS
        )
    )
    started = time.monotonic()
    await db.transact(_insert, "urgent", 1, urgent=True)
    assert time.monotonic() - started < 0.4  # not behind the sleeping ones
    started = time.monotonic()
    await asyncio.gather(*background)
    # The one past the limit waited for a slot: two rounds of half a second.
    assert time.monotonic() - started > 0.6


# -- brief transactions (SQLite: on the caller's thread when the connection is free) --------


def _where(connection) -> tuple[int, int]:
    return threading.get_ident(), id(connection.connection.driver_connection)


async def test_a_brief_transaction_runs_on_the_loops_thread_on_the_same_connection(db):
    if db.dialect != "sqlite":
        pytest.skip("the SQLite thread")
    queued_thread, queued_connection = await db.transact(_where)
    brief_thread, brief_connection = await db.transact(_where, brief=True)
    assert brief_thread == threading.get_ident() != queued_thread
    assert brief_connection == queued_connection
    await db.transact(_insert, "brief", 1, brief=True)
    assert await _ids(db) == ["brief"]


async def test_a_brief_transaction_waits_for_the_one_the_thread_is_running(db):
    if db.dialect != "sqlite":
        pytest.skip("the SQLite thread")
    running, release = threading.Event(), threading.Event()
    order: list[str] = []

    def slow_insert(connection) -> None:
        _insert(connection, "slow", 1)
        running.set()
        assert release.wait(10)
        order.append("slow")

    def brief_insert(connection) -> None:
        _insert(connection, "brief", 2)
        order.append("brief")

    slow = asyncio.create_task(db.transact(slow_insert))
    await asyncio.to_thread(running.wait, 10)
    brief = asyncio.create_task(db.transact(brief_insert, brief=True))
    await asyncio.sleep(0.05)
    assert not brief.done()  # the connection is in the thread's transaction
    release.set()
    await asyncio.gather(slow, brief)
    assert order == ["slow", "brief"]
    assert await _ids(db) == ["brief", "slow"]


async def test_brief_and_queued_transactions_never_share_the_connection_at_once(db):
    if db.dialect != "sqlite":
        pytest.skip("one SQLite connection (PostgreSQL runs transactions side by side)")
    busy = threading.Lock()
    overlaps: list[int] = []

    def step(connection, n: int) -> None:
        if not busy.acquire(blocking=False):
            overlaps.append(n)
            return
        try:
            _insert(connection, f"m{n:02}", n)
            time.sleep(0.001)  # long enough for the other side to try
        finally:
            busy.release()

    await asyncio.gather(*(db.transact(step, n, brief=n % 2 == 0) for n in range(40)))
    assert overlaps == []
    assert len(await _ids(db)) == 40


async def test_a_brief_write_behind_another_process_lock_waits_off_the_loop(migrated_url):
    """The caller's thread must not sit in SQLite's busy wait: the event loop goes on, and
    the write goes to the thread, which waits for the lock and runs it once."""
    if not migrated_url.startswith("sqlite"):
        pytest.skip("SQLite locking")
    path = str(db_module.sqlite_file(normalize_url(migrated_url)))
    other = sqlite3.connect(path, isolation_level=None)
    async with Database(migrated_url) as db:
        other.execute("BEGIN IMMEDIATE")  # another process writing
        try:
            write = asyncio.create_task(db.transact(_insert, "waited", 1, brief=True))
            ticks = 0
            started = time.monotonic()
            while time.monotonic() - started < 0.3:
                await asyncio.sleep(0.01)
                ticks += 1
            assert ticks >= 10  # the loop ran meanwhile
            assert not write.done()
        finally:
            other.execute("ROLLBACK")
            other.close()
        await write
        assert await _ids(db) == ["waited"]
        # The thread's transactions keep their busy timeout: a lock held 0.2 s is waited for.
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        asyncio.get_running_loop().call_later(0.2, holder.execute, "ROLLBACK")
        await db.transact(_insert, "after a wait", 2)
        holder.close()
        assert await _ids(db) == ["after a wait", "waited"]


async def test_a_brief_transaction_that_fails_rolls_back_and_leaves_the_connection_usable(db):
    def insert_then_fail(connection):
        _insert(connection, "lost", 1)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await db.transact(insert_then_fail, brief=True)
    with pytest.raises(IntegrityError):
        await db.transact(lambda c: (_insert(c, "dup", 2), _insert(c, "dup", 3)), brief=True)
    await db.transact(_insert, "kept", 4, brief=True)
    assert await _ids(db) == ["kept"]


async def test_postgresql_opens_its_warm_connections_at_start_up(migrated_url):
    if not migrated_url.startswith("postgresql"):
        pytest.skip("PostgreSQL's pool")
    async with Database(migrated_url) as db:
        pool = db._async_engine.sync_engine.pool  # the pool is what this is about
        assert pool.checkedin() == db_module.POSTGRES_WARM_CONNECTIONS
        before = await _backends(migrated_url)
        # A burst of urgent transactions (the ACK path's), as many as the warm connections
        # and all at once: none opened on its way.
        burst = db_module.POSTGRES_WARM_CONNECTIONS
        await asyncio.gather(*(db.transact(_sleep_a_moment, urgent=True) for _ in range(burst)))
        assert await _backends(migrated_url) == before
    async with Database(migrated_url, pool_size=3) as small:
        assert small._async_engine.sync_engine.pool.checkedin() == 3


async def test_warm_connections_the_server_refuses_do_not_stop_the_start(migrated_url, caplog):
    if not migrated_url.startswith("postgresql"):
        pytest.skip("PostgreSQL's pool")
    url = make_url(migrated_url)
    async with scratch_database_async("larkgate_w_", base=url) as scratch:
        # Its owner (the test role) may limit it: the start's SELECT 1 and two more.
        await execute(url, f'ALTER DATABASE "{scratch.database}" CONNECTION LIMIT 3')
        async with Database(scratch.render_as_string(hide_password=False)) as db:
            assert await db.ping()
            assert db._async_engine.sync_engine.pool.checkedin() == 3
            assert await db.transact(_select_2) == 2
        assert "warm PostgreSQL connections" in caplog.text


def _sleep_a_moment(connection):
    connection.execute(text("SELECT pg_sleep(0.05)"))


def _select_2(connection):
    return connection.execute(text("SELECT 2")).scalar_one()


async def _backends(url: str) -> int:
    return await fetchval(
        make_url(url),
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
    )

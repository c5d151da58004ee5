"""The Database: URLs, SQLite settings, write and read transactions, the health ping."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from bot.store import Database, DatabaseConfigError, normalize_url


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


async def test_sqlite_runs_in_wal_with_a_busy_timeout_and_foreign_keys(db):
    if db.dialect != "sqlite":
        pytest.skip("SQLite settings")
    names = ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")
    expected = {"journal_mode": "wal", "synchronous": 1, "busy_timeout": 5000, "foreign_keys": 1}
    # On the held writer connection and on the pool's read connections alike.
    async with db.write() as connection:
        assert {n: (await connection.execute(text(f"PRAGMA {n}"))).scalar() for n in names} == (
            expected
        )
    async with db.read() as connection:
        assert {n: (await connection.execute(text(f"PRAGMA {n}"))).scalar() for n in names} == (
            expected
        )


INSERT = text(
    "INSERT INTO conversations (id, scope_key, generation, created_at) "
    "VALUES (:id, 'scope', :generation, 0)"
)


async def _ids(db: Database) -> list[str]:
    async with db.read() as connection:
        return list((await connection.execute(text("SELECT id FROM conversations"))).scalars())


async def test_a_write_commits_at_the_end_and_rolls_back_on_error(db):
    async with db.write() as connection:
        await connection.execute(INSERT, {"id": "kept", "generation": 1})

    async def insert_then_fail() -> None:
        async with db.write() as connection:
            await connection.execute(INSERT, {"id": "lost", "generation": 2})
            raise RuntimeError("boom")

    async def insert_then_conflict() -> None:
        async with db.write() as connection:
            await connection.execute(INSERT, {"id": "lost too", "generation": 3})
            await connection.execute(INSERT, {"id": "kept", "generation": 4})

    with pytest.raises(RuntimeError, match="boom"):
        await insert_then_fail()
    with pytest.raises(IntegrityError):
        await insert_then_conflict()
    assert await _ids(db) == ["kept"]
    # The writer is still usable after those errors.
    async with db.write() as connection:
        await connection.execute(INSERT, {"id": "later", "generation": 5})
    assert sorted(await _ids(db)) == ["kept", "later"]


async def test_sqlite_writes_share_one_held_connection_in_immediate_transactions(db):
    if db.dialect != "sqlite":
        pytest.skip("SQLite writer")
    async with db.write() as connection:
        first = await connection.get_raw_connection()
        assert connection.in_transaction()
    async with db.write() as connection:
        assert await connection.get_raw_connection() is first
        await connection.execute(text("SELECT 1"))  # the BEGIN goes with the first statement
        # BEGIN IMMEDIATE: even a transaction that only read so far holds the write lock, so
        # another connection cannot start writing ("database is locked" after its timeout).
        other = sqlite3.connect(db.engine.url.database, timeout=0, isolation_level=None)
        try:
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        finally:
            other.close()


async def test_concurrent_writes_queue_and_all_commit(db):
    async def write(n: int) -> None:
        async with db.write() as connection:
            await connection.execute(INSERT, {"id": f"c{n}", "generation": n})
            await asyncio.sleep(0)

    await asyncio.gather(*(write(n) for n in range(20)))
    assert len(await _ids(db)) == 20


async def test_reads_do_not_wait_for_a_write_in_progress(db):
    async with db.write() as connection:
        await connection.execute(INSERT, {"id": "pending", "generation": 1})
        assert await asyncio.wait_for(_ids(db), 2.0) == []
    assert await _ids(db) == ["pending"]


async def test_a_cancelled_write_rolls_back_and_the_next_write_works(db):
    entered = asyncio.Event()

    async def slow_write() -> None:
        async with db.write() as connection:
            await connection.execute(INSERT, {"id": "cancelled", "generation": 1})
            entered.set()
            await asyncio.sleep(10)

    task = asyncio.create_task(slow_write())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with db.write() as connection:
        await connection.execute(INSERT, {"id": "after", "generation": 2})
    assert await _ids(db) == ["after"]


async def test_a_broken_sqlite_writer_is_reopened_on_the_next_write(db):
    if db.dialect != "sqlite":
        pytest.skip("SQLite writer")
    async with db.write() as connection:
        await connection.execute(INSERT, {"id": "before", "generation": 1})
        broken = await connection.get_raw_connection()
    await broken.driver_connection.close()  # behind SQLAlchemy's back

    async def write_on_the_broken_connection() -> None:
        async with db.write() as connection:
            await connection.execute(INSERT, {"id": "lost", "generation": 2})

    with pytest.raises(Exception):  # noqa: B017, PT011 (whatever the driver raises)
        await write_on_the_broken_connection()
    async with db.write() as connection:
        await connection.execute(INSERT, {"id": "after", "generation": 3})
    assert sorted(await _ids(db)) == ["after", "before"]


async def test_dispose_closes_the_writer_and_a_write_after_start_reopens_it(migrated_url):
    db = await Database.connect(migrated_url)
    async with db.write() as connection:
        await connection.execute(INSERT, {"id": "one", "generation": 1})
    await db.dispose()
    await db.start()
    try:
        async with db.write() as connection:
            await connection.execute(INSERT, {"id": "two", "generation": 2})
        assert sorted(await _ids(db)) == ["one", "two"]
    finally:
        await db.dispose()


async def test_an_empty_write_is_fine_and_the_plain_sqlite_driver_works_too(migrated_url):
    for one_trip in (True, False):
        db = await Database.connect(migrated_url, one_trip_sqlite=one_trip)
        try:
            async with db.write():
                pass  # no statement: on the one-trip driver the BEGIN is never sent
            async with db.write() as connection:
                await connection.execute(
                    INSERT, {"id": f"w{one_trip}", "generation": int(one_trip)}
                )
            async with db.read() as connection:
                assert (
                    await connection.execute(text("SELECT count(*) FROM conversations"))
                ).scalar()
        finally:
            await db.dispose()
    assert sorted(await _all_ids(migrated_url)) == ["wFalse", "wTrue"]


async def _all_ids(url: str) -> list[str]:
    db = await Database.connect(url)
    try:
        return await _ids(db)
    finally:
        await db.dispose()

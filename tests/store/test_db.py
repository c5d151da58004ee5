"""The Database: URLs, SQLite settings, sessions and the health ping."""

from __future__ import annotations

import pytest
from sqlalchemy import text

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
    async with db.session(read_only=True) as session:
        pragmas = {
            name: (await session.exec(text(f"PRAGMA {name}"))).scalar()
            for name in ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")
        }
    assert pragmas == {
        "journal_mode": "wal",
        "synchronous": 1,
        "busy_timeout": 5000,
        "foreign_keys": 1,
    }


async def test_a_session_commits_at_the_end_and_rolls_back_on_error(db):
    insert = text(
        "INSERT INTO conversations (id, scope_key, generation, created_at) "
        "VALUES (:id, 'scope', :generation, 0)"
    )
    async with db.session() as session:
        await session.exec(insert, params={"id": "kept", "generation": 1})

    async def insert_then_fail() -> None:
        async with db.session() as session:
            await session.exec(insert, params={"id": "lost", "generation": 2})
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await insert_then_fail()
    async with db.session(read_only=True) as session:
        ids = (await session.exec(text("SELECT id FROM conversations"))).scalars().all()
    assert ids == ["kept"]

"""Fixtures of the store tests: every test runs on a fresh SQLite file, and also on PostgreSQL in
a fresh schema when LARKGATE_TEST_POSTGRES_URL is set (see scripts/start_postgres.sh)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import URL, make_url

from bot.store import Database, upgrade_async

POSTGRES_URL_ENV = "LARKGATE_TEST_POSTGRES_URL"
BACKENDS = ["sqlite", "postgresql"] if os.environ.get(POSTGRES_URL_ENV) else ["sqlite"]


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def _admin(url: URL, statements: list[str]) -> None:
    connection = await asyncpg.connect(
        user=url.username,
        password=url.password,
        host=url.host,
        port=url.port,
        database=url.database,
    )
    try:
        for statement in statements:
            await connection.execute(statement)
    finally:
        await connection.close()


def _run_in_thread(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run `coroutine` on a loop of its own, even when called from inside a running loop."""
    with ThreadPoolExecutor(max_workers=1) as executor:
        executor.submit(asyncio.run, coroutine).result()


@pytest.fixture(scope="session")
def postgres_test_database() -> Iterator[URL]:
    """A database of its own for this test session, next to the one of the env var's URL.

    Creating a database per test costs about half a second; a test gets a fresh schema instead.
    """
    base = make_url(os.environ[POSTGRES_URL_ENV])
    url = base.set(database=f"larkgate_t_{uuid.uuid4().hex[:12]}")
    _run_in_thread(_admin(base, [f'CREATE DATABASE "{url.database}"']))
    try:
        yield url
    finally:
        _run_in_thread(_admin(base, [f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)']))


@pytest.fixture(params=BACKENDS)
async def database_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """The URL of an empty database: a new SQLite file, or PostgreSQL with a new public schema."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'larkgate.db'}"
    url: URL = request.getfixturevalue("postgres_test_database")
    await _admin(url, ["DROP SCHEMA IF EXISTS public CASCADE", "CREATE SCHEMA public"])
    return url.render_as_string(hide_password=False)


@pytest.fixture
async def migrated_url(database_url: str) -> str:
    await upgrade_async(database_url)
    return database_url


@pytest.fixture
async def db(migrated_url: str) -> AsyncIterator[Database]:
    database = await Database.connect(migrated_url)
    try:
        yield database
    finally:
        await database.dispose()


@pytest.fixture
async def other_db(migrated_url: str) -> AsyncIterator[Database]:
    """A second engine on the same database, standing in for a second process."""
    database = await Database.connect(migrated_url)
    try:
        yield database
    finally:
        await database.dispose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()

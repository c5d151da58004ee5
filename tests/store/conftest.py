"""Fixtures of the store tests: every test runs on a fresh SQLite file, and also on PostgreSQL in
a fresh schema when LARKGATE_TEST_POSTGRES_URL is set (see scripts/start_postgres.sh)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy.engine import URL

from bot.store import Database, upgrade_async

from support.postgres import BACKENDS, reset_public_schema, scratch_database, url_text


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(scope="session")
def postgres_test_database() -> Iterator[URL]:
    """A database of its own for this test session, next to the one of the env var's URL.

    Creating a database per test costs about half a second; a test gets a fresh schema instead.
    """
    with scratch_database("larkgate_t_") as url:
        yield url


@pytest.fixture(params=BACKENDS)
async def database_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """The URL of an empty database: a new SQLite file, or PostgreSQL with a new public schema."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'larkgate.db'}"
    url: URL = request.getfixturevalue("postgres_test_database")
    await reset_public_schema(url)
    return url_text(url)


@pytest.fixture
async def migrated_url(database_url: str) -> str:
    await upgrade_async(database_url)
    return database_url


@pytest.fixture
async def db(migrated_url: str) -> AsyncIterator[Database]:
    async with Database(migrated_url) as database:
        yield database


@pytest.fixture
async def other_db(migrated_url: str) -> AsyncIterator[Database]:
    """A second engine on the same database, standing in for a second process."""
    async with Database(migrated_url) as database:
        yield database


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()

"""Scratch PostgreSQL for tests: databases and schemas made and dropped over asyncpg.

The server is the one of ``LARKGATE_TEST_POSTGRES_URL`` (see scripts/start_postgres.sh);
without it the PostgreSQL tests are skipped or not parametrized (``BACKENDS``).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import asyncpg
from sqlalchemy.engine import URL, make_url

T = TypeVar("T")

POSTGRES_URL_ENV = "LARKGATE_TEST_POSTGRES_URL"
# The backends a test parametrized over databases runs on here.
BACKENDS = ["sqlite", "postgresql"] if os.environ.get(POSTGRES_URL_ENV) else ["sqlite"]


def server_url() -> URL:
    """The URL of ``LARKGATE_TEST_POSTGRES_URL`` (KeyError when it is not set)."""
    return make_url(os.environ[POSTGRES_URL_ENV])


def connect_args(url: URL) -> dict[str, Any]:
    """``asyncpg.connect``'s arguments for a SQLAlchemy URL."""
    return {
        "user": url.username,
        "password": url.password,
        "host": url.host,
        "port": url.port,
        "database": url.database,
    }


async def connect(url: URL) -> asyncpg.Connection:
    return await asyncpg.connect(**connect_args(url))


@asynccontextmanager
async def connected(url: URL) -> AsyncIterator[asyncpg.Connection]:
    connection = await connect(url)
    try:
        yield connection
    finally:
        await connection.close()


async def execute(url: URL, *statements: str) -> None:
    """Run ``statements`` one after another on a connection of their own."""
    async with connected(url) as connection:
        for statement in statements:
            await connection.execute(statement)


async def fetchval(url: URL, statement: str) -> Any:
    """The first value of ``statement``'s first row, from a connection of its own."""
    async with connected(url) as connection:
        return await connection.fetchval(statement)


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on a loop of its own, even when called from inside a running loop
    (a synchronous fixture of a module whose tests are async)."""
    with ThreadPoolExecutor(max_workers=1) as executor:
        return executor.submit(asyncio.run, coroutine).result()


def _scratch(prefix: str, base: URL | None) -> tuple[URL, URL]:
    base = server_url() if base is None else base
    return base, base.set(database=f"{prefix}{uuid.uuid4().hex[:12]}")


def _create(url: URL) -> str:
    return f'CREATE DATABASE "{url.database}"'


def _drop(url: URL) -> str:
    return f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)'


async def _dropped(base: URL, url: URL, *, attempts: int = 50) -> None:
    """Drop the scratch database, waiting out a session the test role may not end.

    FORCE ends the sessions the role may terminate; an autovacuum worker that the server
    started on the database meanwhile (a busy suite writes enough) belongs to the
    bootstrap superuser, and the drop fails with InsufficientPrivilegeError until the
    worker is done, which takes moments.
    """
    for attempt in range(attempts):
        try:
            await execute(base, _drop(url))
            return
        except asyncpg.InsufficientPrivilegeError:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(0.1)


@contextmanager
def scratch_database(prefix: str, *, base: URL | None = None) -> Iterator[URL]:
    """A new database named ``prefix`` + random hex on the server of ``base`` (by default
    the env var's), dropped afterwards; for synchronous (module or session) fixtures."""
    base, url = _scratch(prefix, base)
    run_blocking(execute(base, _create(url)))
    try:
        yield url
    finally:
        run_blocking(_dropped(base, url))


@asynccontextmanager
async def scratch_database_async(prefix: str, *, base: URL | None = None) -> AsyncIterator[URL]:
    """``scratch_database`` for async code."""
    base, url = _scratch(prefix, base)
    await execute(base, _create(url))
    try:
        yield url
    finally:
        await _dropped(base, url)


async def reset_public_schema(url: URL) -> None:
    """Empty the database: a new public schema (cheaper than a new database per test)."""
    await execute(url, "DROP SCHEMA IF EXISTS public CASCADE", "CREATE SCHEMA public")


def url_text(url: URL) -> str:
    """The URL as a string a connector or the store is given, password included."""
    return url.render_as_string(hide_password=False)

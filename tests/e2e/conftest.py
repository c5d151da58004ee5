"""Fixtures for end-to-end tests: the fakes, and a running bot wired to them."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
from sqlalchemy.engine import URL, make_url

from e2e import harness
from e2e.harness import BOT_OPEN_ID, Bot, answering, running_bot, settings_for
from fakes.feishu_server import FakeFeishu
from fakes.openai_server import FakeOpenAIServer

E2E_DATABASE_ENV = "LARKGATE_TEST_E2E_DATABASE"
POSTGRES_URL_ENV = "LARKGATE_TEST_POSTGRES_URL"


async def _execute(url: URL, *statements: str) -> None:
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


@pytest.fixture(scope="session")
def e2e_postgres() -> Iterator[URL | None]:
    """With LARKGATE_TEST_E2E_DATABASE=postgresql, one database for this session's e2e tests."""
    if os.environ.get(E2E_DATABASE_ENV, "sqlite") != "postgresql":
        yield None
        return
    base = make_url(os.environ[POSTGRES_URL_ENV])
    url = base.set(database=f"larkgate_e2e_{uuid.uuid4().hex[:10]}")
    asyncio.run(_execute(base, f'CREATE DATABASE "{url.database}"'))
    try:
        yield url
    finally:
        asyncio.run(_execute(base, f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)'))


@pytest.fixture(autouse=True)
async def e2e_database(e2e_postgres: URL | None) -> AsyncIterator[None]:
    """Each test on an empty schema of the PostgreSQL database, when the suite runs on it."""
    if e2e_postgres is None:
        yield
        return
    await _execute(e2e_postgres, "DROP SCHEMA IF EXISTS public CASCADE", "CREATE SCHEMA public")
    harness.DATABASE_URL = e2e_postgres.render_as_string(hide_password=False)
    try:
        yield
    finally:
        harness.DATABASE_URL = None


@pytest.fixture
async def feishu() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu(bot_open_id=BOT_OPEN_ID) as fake:
        yield fake


@pytest.fixture
async def llm_server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as server:
        server.handler = answering
        yield server


@pytest.fixture
async def bot(tmp_path, feishu, llm_server) -> AsyncIterator[Bot]:
    async with running_bot(settings_for(tmp_path, feishu, llm_server), feishu, llm_server) as b:
        yield b

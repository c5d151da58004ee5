"""Fixtures for end-to-end tests: the fakes, and a running bot wired to them."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from e2e import harness
from e2e.harness import Bot, answering, running_bot, settings_for
from fakes.openai_server import FakeOpenAIServer
from support.postgres import reset_public_schema, scratch_database, url_text

E2E_DATABASE_ENV = "LARKGATE_TEST_E2E_DATABASE"


@pytest.fixture(scope="session")
def e2e_postgres() -> Iterator[URL | None]:
    """With LARKGATE_TEST_E2E_DATABASE=postgresql, one database for this session's e2e tests."""
    if os.environ.get(E2E_DATABASE_ENV, "sqlite") != "postgresql":
        yield None
        return
    with scratch_database("larkgate_e2e_") as url:
        yield url


@pytest.fixture(autouse=True)
async def e2e_database(e2e_postgres: URL | None) -> AsyncIterator[None]:
    """Each test on an empty schema of the PostgreSQL database, when the suite runs on it."""
    if e2e_postgres is None:
        yield
        return
    await reset_public_schema(e2e_postgres)
    harness.DATABASE_URL = url_text(e2e_postgres)
    try:
        yield
    finally:
        harness.DATABASE_URL = None


@pytest.fixture
def notes_db(tmp_path) -> Path:
    """A SQLite database with a notes table: what the replica tests' SQL connector writes
    to, one per test."""
    path = tmp_path / "notes.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    return path


@pytest.fixture
def llm_server(fake_openai: FakeOpenAIServer) -> FakeOpenAIServer:
    fake_openai.handler = answering
    return fake_openai


@pytest.fixture
async def bot(tmp_path, feishu, llm_server) -> AsyncIterator[Bot]:
    async with running_bot(settings_for(tmp_path, feishu, llm_server), feishu, llm_server) as b:
        yield b

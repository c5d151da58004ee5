"""Migrations: they apply to an empty database, twice without harm, and match the models."""

from __future__ import annotations

import asyncio
import json

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlmodel import SQLModel

from bot.store import Database, current_revision, head_revision, upgrade
from bot.store.migrate import MIGRATIONS_DIR, alembic_config

TABLES = {
    "message_claims",
    "conversations",
    "conversation_messages",
    "runs",
    "connector_call_log",
    "approvals",
    "approval_grants",
    "org_settings",
    "audit_log",
    "usage_daily",
    "rate_windows",
    "conversation_locks",
    "replay_guard",
    "feishu_api_calls",
    "scheduled_tasks",
    "scheduled_firings",
    "user_tokens",
    "user_authorizations",
    "questions",
    "run_checkpoints",
    "bot_hops",
    "memories",
}
# SQLite's full-text index of the memories (FTS5: the table and its shadow tables), made by
# migration 0017 beside the models: no model describes a virtual table.
FTS_TABLES = ("memories_fts",)


def _modelled(name: str) -> bool:
    return name != "alembic_version" and not name.startswith(FTS_TABLES)


async def _schema_of(url: str) -> tuple[dict[str, set[str]], list]:
    """The tables and columns of the database, and Alembic's diff against the models."""

    def read(connection):
        inspector = inspect(connection)
        tables = {
            name: {column["name"] for column in inspector.get_columns(name)}
            for name in inspector.get_table_names()
            if _modelled(name)
        }
        context = MigrationContext.configure(
            connection,
            opts={
                "compare_type": True,
                "include_name": lambda name, kind, _: kind != "table" or _modelled(name or ""),
            },
        )
        return tables, compare_metadata(context, SQLModel.metadata)

    database = await Database.connect(url)
    try:
        return await database.transact(read, write=False)
    finally:
        await database.dispose()


async def test_upgrade_applies_to_an_empty_database_and_is_idempotent(database_url):
    assert await asyncio.to_thread(current_revision, database_url) is None
    await asyncio.to_thread(upgrade, database_url)
    await asyncio.to_thread(upgrade, database_url)
    assert await asyncio.to_thread(current_revision, database_url) == head_revision() == "0017"


async def test_approvals_from_before_0011_were_asked_by_their_requester_alone(database_url):
    from bot.store import ApprovalStore

    config = alembic_config(database_url)
    await asyncio.to_thread(command.upgrade, config, "0010")
    row = {
        "id": "apr_old",
        "run_id": "run_1",
        "scope_key": "chat:oc_1",
        "generation": 1,
        "chat_id": "oc_1",
        "message_id": "om_1",
        "thread_id": "",
        "tool": "deploy",
        "arguments": "{}",
        "requester": 'ou_bob"quoted',  # the backfill writes JSON, whatever the open_id holds
        "approvers": '["ou_admin"]',
        "owner": "p1",
        "state": "pending",
        "session": False,
        "created_at": 1.0,
        "expires_at": 2.0,
    }
    columns = ", ".join(row)
    values = ", ".join(f":{name}" for name in row)

    def insert(connection):
        connection.execute(text(f"INSERT INTO approvals ({columns}) VALUES ({values})"), row)

    database = await Database.connect(database_url)
    try:
        await database.transact(insert)
        await asyncio.to_thread(upgrade, database_url)
        record = await ApprovalStore(database).get("apr_old")
        raw = await database.transact(
            lambda c: c.execute(text("SELECT requesters FROM approvals")).scalar_one(), write=False
        )
    finally:
        await database.dispose()
    assert record is not None and record.requesters == ('ou_bob"quoted',)
    assert json.loads(raw) == ['ou_bob"quoted']


async def test_the_migrated_schema_matches_the_models(migrated_url):
    tables, diff = await _schema_of(migrated_url)
    expected = {
        table.name: {column.name for column in table.columns}
        for table in SQLModel.metadata.sorted_tables
        if table.name in TABLES
    }
    assert tables == expected
    assert diff == []


async def test_downgrade_to_base_removes_everything_and_upgrade_restores_it(migrated_url):
    config = alembic_config(migrated_url)
    await asyncio.to_thread(command.downgrade, config, "base")
    tables, _ = await _schema_of(migrated_url)
    assert tables == {}
    await asyncio.to_thread(upgrade, migrated_url)
    tables, diff = await _schema_of(migrated_url)
    assert set(tables) == TABLES
    assert diff == []


async def test_upgrade_inside_a_running_loop_says_to_use_a_thread(database_url):
    with pytest.raises(RuntimeError, match=r"asyncio\.to_thread"):
        upgrade(database_url)


def test_the_migration_templates_ship_with_the_package():
    assert (MIGRATIONS_DIR / "script.py.mako").is_file()
    assert (MIGRATIONS_DIR / "env.py").is_file()
    assert (MIGRATIONS_DIR / "versions" / "0001_initial.py").is_file()


async def test_the_call_log_is_recorded_and_read_back(database_url):
    from bot.store import CallEntry, CallLogStore, Database

    await asyncio.to_thread(upgrade, database_url)
    async with Database(database_url) as db:
        log = CallLogStore(db)
        entry = CallEntry("run1", "sql_query", "sql", "ab12", False, "boom", 12.5, 1.0)
        await log.record(entry)
        await log.record(CallEntry("run2", "calculator", "utilities", "cd34", True, None, 0.2, 2.0))
        assert await log.for_run("run1") == [entry]

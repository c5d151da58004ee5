"""Alembic environment of the store: runs the migrations in one transaction of the app's Database.

`bot.store.migrate` configures Alembic in code and passes the URL in
`config.attributes["database_url"]` (a `sqlalchemy.url` main option works too). The Database
runs under `asyncio.run()`, so this must not be entered from a thread with a running event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from alembic import context
from sqlalchemy.pool import NullPool
from sqlmodel import SQLModel

import bot.store.models  # noqa: F401  (registers the tables on SQLModel.metadata)
from bot.store.db import Database, normalize_url

config = context.config
target_metadata = SQLModel.metadata


def _database_url() -> str:
    url = config.attributes.get("database_url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database URL: use bot.store.migrate.upgrade(database_url)")
    return str(url)


def _configure(**options: Any) -> None:
    context.configure(target_metadata=target_metadata, compare_type=True, **options)


def run_migrations_offline() -> None:
    _configure(url=normalize_url(_database_url()), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


# Replicas start together and each migrates at start-up: on PostgreSQL the first takes this
# transaction-scoped advisory lock and the others wait, then find the schema at head.
# (SQLite's BEGIN IMMEDIATE already serialises them.)
MIGRATION_LOCK_ID = 0x6C61726B67617465  # "larkgate"


def _run_on(connection: Any) -> None:
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_ID})")
    _configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


async def _run_online() -> None:
    # The app's Database, so SQLite gets its pragmas and transactional DDL (BEGIN IMMEDIATE):
    # Alembic runs inside the transaction, which commits when the migrations are done.
    database = Database(_database_url(), poolclass=NullPool, checkpoint_interval=None)
    try:
        await database.transact(_run_on)
    finally:
        await database.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    asyncio.run(_run_online())

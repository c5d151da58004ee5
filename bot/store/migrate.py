"""Schema migrations, configured in code (no alembic.ini).

`upgrade()` and `current_revision()` are synchronous and run the app's `Database` under
`asyncio.run()` (in `migrations/env.py`): call them from a thread when an event loop is running,
e.g. `await asyncio.to_thread(upgrade, url)` or `await upgrade_async(url)`.

For Alembic's command line (e.g. to autogenerate a revision), use the config of this module:
`alembic.command.revision(alembic_config(url), message, autogenerate=True)`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from bot.store.db import Database

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def alembic_config(database_url: str) -> Config:
    """An Alembic config for this package's migrations and `database_url`."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Passed as an attribute, not as the sqlalchemy.url option: ini interpolation would mangle
    # a '%' in a password.
    config.attributes["database_url"] = database_url
    return config


def _refuse_in_event_loop(name: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        f"{name}() runs its own event loop: call it from a thread, "
        f"e.g. await asyncio.to_thread({name}, url)"
    )


def upgrade(database_url: str, revision: str = "head") -> None:
    """Migrate the database to `revision` (idempotent: a database at head is left alone)."""
    _refuse_in_event_loop("upgrade")
    command.upgrade(alembic_config(database_url), revision)


async def upgrade_async(database_url: str, revision: str = "head") -> None:
    """`upgrade()` in a worker thread, for callers inside an event loop."""
    await asyncio.to_thread(upgrade, database_url, revision)


def head_revision() -> str | None:
    """The newest revision this code knows."""
    return ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()


def current_revision(database_url: str) -> str | None:
    """The revision the database is at; None for a database that was never migrated."""
    _refuse_in_event_loop("current_revision")

    async def read() -> str | None:
        database = Database(database_url, poolclass=NullPool, checkpoint_interval=None)
        try:
            return await database.transact(_current_revision, write=False)
        finally:
            await database.dispose()

    return asyncio.run(read())


def _current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()

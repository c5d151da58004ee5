"""Alembic revisions of the store, applied in order by bot.store.migrate.upgrade()."""

"""Alembic migrations of the store (see bot.store.migrate)."""

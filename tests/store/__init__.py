"""Tests of bot.store, over SQLite and (with LARKGATE_TEST_POSTGRES_URL) PostgreSQL."""

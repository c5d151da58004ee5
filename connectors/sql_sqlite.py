"""SQLite's own read-only enforcement for ``sql_query``: the read PRAGMAs and the authorizer.

Reads go through a connection that opens the file with ``mode=ro``, runs
``PRAGMA query_only = ON`` and installs ``read_authorizer``: SQLite itself then denies
writes, DDL, ATTACH/DETACH, transaction control, setting PRAGMAs and ``load_extension``,
whatever the statement text looks like. ``connectors/sql_policy.py`` checks the text
before; this is the layer underneath it.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from pathlib import Path

from sqlalchemy import URL

# PRAGMAs a read may use (SQLAlchemy's inspector needs the table ones).
READ_PRAGMAS_WITH_ARGUMENT = frozenset(
    {
        "table_info",
        "table_xinfo",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "foreign_key_check",
        "integrity_check",
        "quick_check",
        "table_list",
    }
)
READ_PRAGMAS = READ_PRAGMAS_WITH_ARGUMENT | {
    "database_list",
    "collation_list",
    "function_list",
    "module_list",
    "pragma_list",
    "compile_options",
    "user_version",
    "schema_version",
    "application_id",
    "encoding",
    "page_count",
    "page_size",
    "freelist_count",
    "foreign_keys",
    "journal_mode",
    "query_only",
    "data_version",
}
_READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)


def read_authorizer(
    action_code: int, arg1: str | None, arg2: str | None, _db: str | None, _trigger: str | None
) -> int:
    """SQLite authorizer for read-only connections: reads pass, everything else is denied."""
    if action_code in _READ_ACTIONS:
        if action_code == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() == "load_extension":
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK
    if action_code == sqlite3.SQLITE_PRAGMA:
        name = (arg1 or "").lower()
        if name in READ_PRAGMAS and (arg2 is None or name in READ_PRAGMAS_WITH_ARGUMENT):
            return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def database_file(url: URL) -> Path | None:
    """The database file of a SQLite URL, or None for an in-memory database."""
    database = url.database or ""
    if database in ("", ":memory:") or "mode=memory" in database:
        return None
    if url.query.get("uri") in ("true", "1") or database.startswith("file:"):
        parsed = urllib.parse.urlsplit(database)
        if parsed.path in ("", ":memory:") or "mode=memory" in parsed.query:
            return None
        return Path(urllib.parse.unquote(parsed.path))
    return Path(database)


def read_only_url(url: URL, path: Path) -> URL:
    """``url`` opening ``path`` read-only (``mode=ro``)."""
    query = {key: value for key, value in url.query.items() if key not in ("mode", "uri")}
    query.update(mode="ro", uri="true")
    database = "file:" + urllib.parse.quote(str(path.resolve()))
    return url.set(database=database, query=query)


__all__ = [
    "READ_PRAGMAS",
    "READ_PRAGMAS_WITH_ARGUMENT",
    "database_file",
    "read_authorizer",
    "read_only_url",
]

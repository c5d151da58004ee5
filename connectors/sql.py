"""SQL databases through SQLAlchemy: list, describe, query (read-only) and execute.

Drivers. The connector uses SQLAlchemy's asyncio engine with the async drivers the
project already ships (``aiosqlite``, ``asyncpg``), so no extra dependency and no
thread pool of blocking connections: ``sqlite:///`` becomes ``sqlite+aiosqlite:///``,
``postgresql://`` becomes ``postgresql+asyncpg://``, ``mysql://`` becomes
``mysql+aiomysql://`` (that driver must be installed to use MySQL). Async URLs are
kept as given.

Read-only is enforced by the database, never by looking at the SQL text:

- SQLite: file databases are read through a second engine that opens the file with
  ``mode=ro``; every read connection also runs ``PRAGMA query_only = ON`` and an
  authorizer that lets through only reads (SELECT, reading columns, functions, a
  short list of read-only PRAGMAs): ATTACH, DETACH, writes, DDL, transaction control
  and setting PRAGMAs are denied by SQLite itself. In-memory databases (one shared
  connection) get the pragma and authorizer for the duration of the query only.
- PostgreSQL: each query runs in its own transaction opened with
  ``SET TRANSACTION READ ONLY`` (which a later statement cannot undo) and is rolled
  back; asyncpg prepares every statement, so a second statement cannot ride along.
- MySQL/MariaDB: ``START TRANSACTION READ ONLY``, rolled back.
- Other backends: ``sql_query`` refuses to run (fail closed) and says why.

Timeouts: PostgreSQL ``SET LOCAL statement_timeout``, MySQL ``max_execution_time``,
SQLite a progress handler that interrupts the statement past its deadline; an
``asyncio`` deadline backs all of them up.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import sqlite3
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr
from sqlalchemy import URL, inspect, make_url
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, NoSuchTableError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from bot.engine import Tool

from .base import Connector, ConnectorContext, ConnectorSettings, ConnectorStatus, ToolError, action

logger = logging.getLogger(__name__)

CELL_CHARS = 200
MAX_LISTED = 300

# Sync or default drivers replaced by the async driver of the same backend.
_ASYNC_DRIVERS = {
    "sqlite": ("aiosqlite", {"pysqlite", "aiosqlite", ""}),
    "postgresql": ("asyncpg", {"psycopg2", "psycopg2cffi", "pg8000", ""}),
    "mysql": ("aiomysql", {"mysqldb", "pymysql", "mysqlconnector", ""}),
    "mariadb": ("aiomysql", {"mysqldb", "pymysql", "mysqlconnector", ""}),
}

# PRAGMAs a read may use (SQLAlchemy's inspector needs the table ones).
_READ_PRAGMAS_WITH_ARGUMENT = frozenset(
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
_READ_PRAGMAS = _READ_PRAGMAS_WITH_ARGUMENT | {
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

_READ_ONLY_VIOLATION = re.compile(
    r"readonly database|read-only transaction|READ ONLY transaction|not authorized"
    r"|authorization denied",
    re.IGNORECASE,
)
_TIMEOUT = re.compile(
    r"interrupted|statement timeout|canceling statement|max_execution_time|exceeded", re.IGNORECASE
)
_MISSING_TABLE = re.compile(r"no such table|does not exist|doesn't exist", re.IGNORECASE)
_DRIVER_CLASS_PREFIX = re.compile(r"^<class '[\w.]+'>:\s*")


def _sqlite_read_authorizer(
    action_code: int, arg1: str | None, arg2: str | None, _db: str | None, _trigger: str | None
) -> int:
    """SQLite authorizer for read-only connections: reads pass, everything else is denied."""
    if action_code in _READ_ACTIONS:
        if action_code == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() == "load_extension":
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK
    if action_code == sqlite3.SQLITE_PRAGMA:
        name = (arg1 or "").lower()
        if name in _READ_PRAGMAS and (arg2 is None or name in _READ_PRAGMAS_WITH_ARGUMENT):
            return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def async_url(raw: str) -> URL:
    """``raw`` parsed, with a sync or default driver swapped for its async counterpart."""
    url = make_url(raw)
    backend = url.get_backend_name()
    explicit_driver = url.drivername.partition("+")[2]
    if backend in _ASYNC_DRIVERS:
        driver, replaceable = _ASYNC_DRIVERS[backend]
        if explicit_driver in replaceable:
            url = url.set(drivername=f"{backend}+{driver}")
    return url


def _sqlite_file(url: URL) -> Path | None:
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


def _read_only_sqlite_url(url: URL, path: Path) -> URL:
    query = {key: value for key, value in url.query.items() if key not in ("mode", "uri")}
    query.update(mode="ro", uri="true")
    database = "file:" + urllib.parse.quote(str(path.resolve()))
    return url.set(database=database, query=query)


@dataclasses.dataclass(frozen=True, slots=True)
class QueryResult:
    columns: list[str]
    rows: list[Sequence[Any]]
    more: bool
    rowcount: int


def _fetch(connection: Connection, sql: str, limit: int, stream: bool) -> QueryResult:
    """Run one statement, keeping at most ``limit`` rows (and noting whether more exist).

    With ``stream`` the rows come through a server-side cursor, so a huge result is
    never loaded: only ``limit + 1`` rows are fetched.
    """
    options = {"stream_results": True} if stream else {}
    result = connection.exec_driver_sql(sql, execution_options=options)
    try:
        if not result.returns_rows:
            return QueryResult([], [], False, result.rowcount)
        columns = list(result.keys())
        rows = [tuple(row) for row in result.fetchmany(limit + 1)]
        return QueryResult(columns, rows[:limit], len(rows) > limit, len(rows))
    finally:
        result.close()


def _cell(value: Any, width: int = CELL_CHARS) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(bytes(value))} bytes>"
    text = str(value).replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    text = text.replace("\t", " ").replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def render_table(result: QueryResult, *, max_rows: int, max_chars: int) -> str:
    """Header, rows and a footer that says how many rows there are and what was cut."""
    lines = [" | ".join(_cell(name, 80) for name in result.columns)]
    lines.append("-" * min(len(lines[0]), 80))
    used = sum(len(line) + 1 for line in lines)
    shown = 0
    for row in result.rows:
        line = " | ".join(_cell(value) for value in row)
        if used + len(line) + 1 > max_chars and shown:
            break
        lines.append(line)
        used += len(line) + 1
        shown += 1
    count = len(result.rows)
    noun = "row" if count == 1 else "rows"
    if result.more:
        footer = (
            f"{count} rows shown; the result has more (max_rows={max_rows}):"
            " narrow it with WHERE, aggregate it, or add LIMIT/OFFSET"
        )
    else:
        footer = f"{count} {noun}"
    if shown < count:
        footer += f"; only the first {shown} fit in {max_chars} characters"
    lines.append(f"({footer})")
    return "\n".join(lines)


class SQL(Connector):
    """A SQL database: list and describe tables, read-only queries, and writes."""

    name = "sql"

    class Settings(ConnectorSettings):
        url: SecretStr = Field(description="SQLAlchemy database URL (SQL_CONNECTOR_URL)")
        max_rows: int = Field(200, ge=1, le=10_000)
        max_chars: int = Field(8000, ge=500, le=200_000)
        statement_timeout_seconds: float = Field(15.0, gt=0, le=600)
        connect_timeout_seconds: float = Field(10.0, gt=0, le=120)

    settings: Settings

    def __init__(self, settings: ConnectorSettings, context: ConnectorContext) -> None:
        super().__init__(settings, context)
        self._engine: AsyncEngine | None = None
        self._read_engine: AsyncEngine | None = None
        self._backend = ""
        self._sqlite_path: Path | None = None
        self._config_error: str | None = None
        self._display_url = ""
        # An in-memory SQLite database is one shared connection: one operation at a time.
        self._memory_lock = asyncio.Lock()

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Build the engines (no connection yet): a bad URL is reported by check() and tools."""
        self._build()

    def _build(self) -> None:
        if self._engine is not None or self._config_error is not None:
            return
        try:
            url = async_url(self.settings.url.get_secret_value())
            self._display_url = url.render_as_string(hide_password=True)
            self._backend = url.get_backend_name()
            options: dict[str, Any] = {"pool_pre_ping": True}
            if self._backend == "postgresql" and url.get_driver_name() == "asyncpg":
                options["connect_args"] = {"timeout": self.settings.connect_timeout_seconds}
            if self._backend == "sqlite":
                self._sqlite_path = _sqlite_file(url)
            self._engine = create_async_engine(url, **options)
            if self._backend == "sqlite" and self._sqlite_path is not None:
                read_url = _read_only_sqlite_url(url, self._sqlite_path)
                self._read_engine = create_async_engine(read_url, **options)
            else:
                self._read_engine = self._engine
        except Exception as exc:  # a bad URL or a missing driver: report, do not crash
            self._config_error = f"{type(exc).__name__}: {exc}"
            logger.warning("SQL connector: cannot use the configured URL: %s", self._config_error)

    async def aclose(self) -> None:
        engines = {id(e): e for e in (self._read_engine, self._engine) if e is not None}
        for engine in engines.values():
            await engine.dispose()

    def tools(self) -> list[Tool]:
        """The actions, with a tool timeout that leaves room for the configured limits."""
        budget = self.settings.statement_timeout_seconds + self.settings.connect_timeout_seconds
        return [dataclasses.replace(tool, timeout=budget + 10) for tool in super().tools()]

    async def check(self) -> ConnectorStatus:
        self._build()
        tools = len(self.tools())
        if self._config_error:
            return ConnectorStatus(
                self.name, False, f"bad database URL: {self._config_error}", tools
            )
        if self._sqlite_path is not None and not self._sqlite_path.exists():
            detail = f"SQLite database file not found: {self._sqlite_path}"
            return ConnectorStatus(self.name, False, detail, tools)
        try:
            async with asyncio.timeout(self.settings.connect_timeout_seconds + 5):
                async with self._read_transaction() as connection:
                    await connection.exec_driver_sql("SELECT 1")
        except Exception as exc:
            return ConnectorStatus(
                self.name, False, f"{self._display_url}: {_describe(exc)}", tools
            )
        return ConnectorStatus(self.name, True, f"{self._backend} at {self._display_url}", tools)

    # ---------------------------------------------------------------- tools

    @action(side_effect="read", timeout=60, max_result_chars=20_000)
    async def sql_list_tables(
        self,
        schema_name: Annotated[
            str | None,
            Field(description="Schema to list; the database's default schema when omitted."),
        ] = None,
    ) -> str:
        """List the tables and views of the SQL database (and the other schemas there are)."""

        def listing(connection: Connection) -> str:
            inspector = inspect(connection)
            tables = inspector.get_table_names(schema=schema_name)
            views = inspector.get_view_names(schema=schema_name)
            schemas = inspector.get_schema_names()
            default = inspector.default_schema_name
            where = schema_name or default or "default schema"
            lines = [f"{len(tables)} tables in {where}:"]
            lines += [f"  {name}" for name in tables[:MAX_LISTED]]
            if len(tables) > MAX_LISTED:
                lines.append(f"  … and {len(tables) - MAX_LISTED} more")
            if views:
                lines.append(f"{len(views)} views: " + ", ".join(views[:MAX_LISTED]))
            others = [s for s in schemas if s != where and not _system_schema(s)]
            if others:
                lines.append("other schemas: " + ", ".join(others[:50]))
            return "\n".join(lines)

        return await self._inspect(listing)

    @action(side_effect="read", timeout=60, max_result_chars=20_000)
    async def sql_describe_table(
        self,
        table: Annotated[str, Field(description="Table or view name, e.g. 'orders'.")],
        schema_name: Annotated[
            str | None, Field(description="Schema of the table; the default schema when omitted.")
        ] = None,
    ) -> str:
        """Describe a table: columns (type, nullability), primary key, foreign keys, indexes."""

        def describe(connection: Connection) -> str:
            inspector = inspect(connection)
            name, where = table, schema_name
            if not inspector.has_table(name, schema=where) and where is None and "." in name:
                where, _, name = name.rpartition(".")
            if not inspector.has_table(name, schema=where):
                known = inspector.get_table_names(schema=where)
                known += inspector.get_view_names(schema=where)
                hint = ", ".join(sorted(known)[:50]) or "none"
                raise ToolError(f"no table or view named {table!r}; tables here: {hint}")
            return _describe_table(inspector, name, where)

        return await self._inspect(describe)

    @action(side_effect="read", timeout=60, max_result_chars=20_000)
    async def sql_query(
        self,
        sql: Annotated[
            str,
            Field(
                description=(
                    "One read-only SQL statement (SELECT, WITH … SELECT, EXPLAIN)."
                    " Write literal values inline; no bind parameters."
                )
            ),
        ],
    ) -> str:
        """Run one read-only SQL query and return the rows as a table. The database itself
        enforces read-only (any write fails: use sql_execute for changes). At most max_rows
        rows come back, so filter or aggregate in SQL for large tables.
        """
        statement = _one_statement(sql)
        limit = self.settings.max_rows
        async with self._errors(reading=True), self._read_transaction() as connection:
            result = await connection.run_sync(_fetch, statement, limit, True)
        if not result.columns:
            return "(the statement returned no rows)"
        return render_table(result, max_rows=limit, max_chars=self.settings.max_chars)

    @action(side_effect="write", timeout=60, max_result_chars=20_000)
    async def sql_execute(
        self,
        sql: Annotated[
            str,
            Field(
                description=(
                    "One SQL statement that changes data or schema: INSERT, UPDATE, DELETE,"
                    " CREATE, ALTER, DROP. Write literal values inline."
                )
            ),
        ],
    ) -> str:
        """Execute one SQL statement that changes the database, commit, and report rows affected."""
        statement = _one_statement(sql)
        limit = self.settings.max_rows
        async with self._errors(reading=False), self._write_transaction() as connection:
            result = await connection.run_sync(_fetch, statement, limit, False)
        if result.columns:  # e.g. INSERT … RETURNING
            table = render_table(result, max_rows=limit, max_chars=self.settings.max_chars)
            return "committed; the statement returned:\n" + table
        if result.rowcount is None or result.rowcount < 0:
            return "committed (the statement does not report a row count)"
        noun = "row" if result.rowcount == 1 else "rows"
        return f"committed: {result.rowcount} {noun} affected"

    # ---------------------------------------------------------------- connections

    async def _inspect(self, work: Callable[[Connection], str]) -> str:
        async with self._errors(reading=True), self._read_transaction() as connection:
            return await connection.run_sync(work)

    def _engines(self, *, reading: bool) -> tuple[AsyncEngine, AsyncEngine]:
        self._build()
        if self._engine is None or self._read_engine is None:
            raise ToolError(f"the SQL connector cannot use its database URL: {self._config_error}")
        # A clear message, and no doomed connection attempt (aiosqlite leaves a thread
        # behind when opening fails).
        path = self._sqlite_path
        if path is not None and reading and not path.is_file():
            raise ToolError(f"the SQLite database file does not exist: {path}")
        if path is not None and not path.parent.is_dir():
            raise ToolError(f"the directory of the SQLite database does not exist: {path.parent}")
        return self._engine, self._read_engine

    @contextlib.asynccontextmanager
    async def _read_transaction(self) -> AsyncIterator[AsyncConnection]:
        """A connection inside a transaction the database keeps read-only; rolled back after."""
        _, engine = self._engines(reading=True)
        if self._backend not in ("sqlite", "postgresql", "mysql", "mariadb"):
            raise ToolError(
                f"read-only queries are not supported for {self._backend}: the connector can"
                " enforce read-only only on SQLite, PostgreSQL and MySQL"
            )
        async with self._serialized(), self._guarded(engine) as connection:
            if self._backend == "sqlite":
                async with self._sqlite_guard(connection, read_only=True):
                    yield connection
            else:
                await self._begin(connection, read_only=True)
                yield connection
            await connection.rollback()

    @contextlib.asynccontextmanager
    async def _write_transaction(self) -> AsyncIterator[AsyncConnection]:
        engine, _ = self._engines(reading=False)
        async with self._serialized(), self._guarded(engine) as connection:
            if self._backend == "sqlite":
                async with self._sqlite_guard(connection, read_only=False):
                    yield connection
            else:
                await self._begin(connection, read_only=False)
                yield connection
            await connection.commit()

    @contextlib.asynccontextmanager
    async def _serialized(self) -> AsyncIterator[None]:
        if self._backend == "sqlite" and self._sqlite_path is None:
            async with self._memory_lock:
                yield
        else:
            yield

    @contextlib.asynccontextmanager
    async def _guarded(self, engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
        """A connection, discarded rather than reused if the work was cancelled or timed out."""
        deadline = self.settings.statement_timeout_seconds + self.settings.connect_timeout_seconds
        async with engine.connect() as connection:
            try:
                async with asyncio.timeout(deadline + 2):
                    yield connection
            except (SQLAlchemyError, ToolError):
                raise
            except BaseException:
                with contextlib.suppress(Exception):
                    await connection.invalidate()
                raise

    async def _begin(self, connection: AsyncConnection, *, read_only: bool) -> None:
        """Open the transaction with its mode and statement timeout (PostgreSQL, MySQL)."""
        milliseconds = int(self.settings.statement_timeout_seconds * 1000)
        if self._backend == "postgresql":
            if read_only:
                await connection.exec_driver_sql("SET TRANSACTION READ ONLY")
            await connection.exec_driver_sql(f"SET LOCAL statement_timeout = {milliseconds}")
            if read_only:
                # A first query takes the snapshot; from then on PostgreSQL refuses any
                # SET TRANSACTION READ WRITE ("must be set before any query").
                await connection.exec_driver_sql("SELECT 1")
        elif self._backend in ("mysql", "mariadb"):
            variable = "max_statement_time" if self._backend == "mariadb" else "max_execution_time"
            value = milliseconds if self._backend == "mysql" else milliseconds / 1000
            await connection.exec_driver_sql(f"SET SESSION {variable} = {value}")
            if read_only:
                await connection.exec_driver_sql("START TRANSACTION READ ONLY")

    @contextlib.asynccontextmanager
    async def _sqlite_guard(
        self, connection: AsyncConnection, *, read_only: bool
    ) -> AsyncIterator[None]:
        """SQLite: a deadline on every statement, and for reads query_only plus the authorizer."""
        raw = (await connection.get_raw_connection()).driver_connection
        assert raw is not None
        deadline = time.monotonic() + self.settings.statement_timeout_seconds

        def past_deadline() -> int:
            return 1 if time.monotonic() > deadline else 0

        if read_only:
            await connection.exec_driver_sql("PRAGMA query_only = ON")
            await raw.set_authorizer(_sqlite_read_authorizer)
        await raw.set_progress_handler(past_deadline, 1000)
        try:
            yield
        finally:
            await raw.set_progress_handler(None, 0)
            if read_only:
                await raw.set_authorizer(None)
                await connection.rollback()
                await connection.exec_driver_sql("PRAGMA query_only = OFF")

    @contextlib.asynccontextmanager
    async def _errors(self, *, reading: bool) -> AsyncIterator[None]:
        """Database failures as ToolErrors the model can act on."""
        try:
            yield
        except ToolError:
            raise
        except TimeoutError as exc:
            raise ToolError(self._timeout_message()) from exc
        except Exception as exc:
            message = _describe(exc)
            if reading and _READ_ONLY_VIOLATION.search(message):
                raise ToolError(
                    f"refused: sql_query is read-only, enforced by the database ({message})."
                    " Use sql_execute for INSERT, UPDATE, DELETE or schema changes."
                ) from exc
            if _TIMEOUT.search(message):
                raise ToolError(f"{self._timeout_message()} ({message})") from exc
            if _MISSING_TABLE.search(message):
                message += " (use sql_list_tables to see the tables)"
            raise ToolError(f"SQL error: {message}") from exc

    def _timeout_message(self) -> str:
        seconds = self.settings.statement_timeout_seconds
        return f"the statement ran longer than {seconds:g} s and was cancelled"


def _one_statement(sql: str) -> str:
    statement = sql.strip()
    if not statement:
        raise ToolError("the SQL statement is empty")
    return statement


def _describe(exc: BaseException) -> str:
    """A short, password-free description of a database failure."""
    if isinstance(exc, NoSuchTableError):
        return f"no such table: {exc}"
    original = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    text = str(original).strip() or type(original).__name__
    text = _DRIVER_CLASS_PREFIX.sub("", text.splitlines()[0])
    if isinstance(original, OSError | ConnectionError):
        return f"cannot connect to the database: {text}"
    kind = type(original).__name__
    return text if kind in ("Error", "DatabaseError") else f"{text} [{kind}]"


def _system_schema(schema: str) -> bool:
    return schema in ("information_schema", "temp") or schema.startswith("pg_")


def _describe_table(inspector: Any, table: str, schema: str | None) -> str:
    columns = inspector.get_columns(table, schema=schema)
    primary = inspector.get_pk_constraint(table, schema=schema) or {}
    primary_columns = primary.get("constrained_columns") or []
    title = f"{schema}.{table}" if schema else table
    lines = [f"table {title} ({len(columns)} columns):"]
    for column in columns:
        parts = [column["name"], str(column["type"])]
        parts.append("NULL" if column.get("nullable", True) else "NOT NULL")
        if column["name"] in primary_columns:
            parts.append("PRIMARY KEY")
        if column.get("default") is not None:
            parts.append(f"default {_cell(column['default'], 60)}")
        if column.get("comment"):
            parts.append(f"-- {_cell(column['comment'], 80)}")
        lines.append("  " + " | ".join(parts))
    lines.append("primary key: " + (", ".join(primary_columns) or "none"))
    foreign = inspector.get_foreign_keys(table, schema=schema)
    if foreign:
        lines.append("foreign keys:")
        for key in foreign:
            target = key["referred_table"]
            if key.get("referred_schema"):
                target = f"{key['referred_schema']}.{target}"
            local = ", ".join(key["constrained_columns"])
            remote = ", ".join(key["referred_columns"])
            lines.append(f"  ({local}) -> {target}({remote})")
    else:
        lines.append("foreign keys: none")
    if inspector.dialect.name == "sqlite":
        # Column-level UNIQUE lives only in SQLite's automatic indexes.
        indexes = inspector.get_indexes(table, schema=schema, include_auto_indexes=True)
    else:
        indexes = inspector.get_indexes(table, schema=schema)
    try:
        uniques = inspector.get_unique_constraints(table, schema=schema)
    except NotImplementedError:
        uniques = []
    entries = [
        f"  {index.get('name') or '(unnamed)'}"
        f"{' UNIQUE' if index.get('unique') else ''}"
        f" ({', '.join(str(c) for c in index.get('column_names') or [])})"
        for index in indexes
    ]
    entries += [
        f"  {u.get('name') or '(unnamed)'} UNIQUE constraint ({', '.join(u['column_names'])})"
        for u in uniques
    ]
    lines.append("indexes:" if entries else "indexes: none")
    lines += entries
    return "\n".join(lines)


__all__ = ["SQL", "QueryResult", "async_url", "render_table"]

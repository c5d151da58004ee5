"""SQL databases through SQLAlchemy: list, describe, query (read-only) and execute.

Drivers. The connector uses SQLAlchemy's asyncio engine with the async drivers the
project already ships (``aiosqlite``, ``asyncpg``), so no extra dependency and no
thread pool of blocking connections: ``sqlite:///`` becomes ``sqlite+aiosqlite:///``,
``postgresql://`` becomes ``postgresql+asyncpg://``, ``mysql://`` becomes
``mysql+aiomysql://`` (that driver must be installed to use MySQL). Async URLs are
kept as given.

Read-only is enforced in layers; each holds on its own:

- The role (``connectors/sql_roles.py``): on PostgreSQL and MySQL the connector refuses,
  at start, on first use and in ``larkgate check``, a role that could reach past the data
  (superuser, server files and programs, signalling other sessions, …), and says how to
  create one that can only read.
- The statement (``connectors/sql_policy.py``): ``sql_query`` runs only one SELECT,
  WITH … SELECT, EXPLAIN or SHOW, parsed with sqlglot in the connection's dialect, with
  no data-modifying part, no row locks and only functions known to be read-only; what
  runs is rebuilt from the checked tokens.
- The database, whatever the text:
  - SQLite: file databases are read through a second engine that opens the file with
    ``mode=ro``; every read connection also runs ``PRAGMA query_only = ON`` and an
    authorizer that lets through only reads (SELECT, reading columns, functions, a
    short list of read-only PRAGMAs): ATTACH, DETACH, writes, DDL, transaction control
    and setting PRAGMAs are denied by SQLite itself. In-memory databases (one shared
    connection) get the pragma and authorizer for the duration of the query only.
  - PostgreSQL: each query runs in its own transaction opened with
    ``SET TRANSACTION READ ONLY`` (which a later statement cannot undo) and is rolled
    back; asyncpg prepares every statement, so a second statement cannot ride along.
    ``standard_conforming_strings`` is on in it, as the statement policy assumes.
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
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr
from sqlalchemy import URL, inspect, make_url
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, NoSuchTableError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from bot.engine import Tool

from . import sql_sqlite
from .base import (
    CommaList,
    Connector,
    ConnectorContext,
    ConnectorSettings,
    ConnectorStatus,
    ToolError,
    action,
)
from .sql_policy import check_read_statement
from .sql_results import QueryResult, cell, fetch, render_table
from .sql_roles import ROLE_BACKENDS, PrivilegedRoleError, RoleReport, inspect_role

logger = logging.getLogger(__name__)

MAX_LISTED = 300

# Sync or default drivers replaced by the async driver of the same backend.
_ASYNC_DRIVERS = {
    "sqlite": ("aiosqlite", {"pysqlite", "aiosqlite", ""}),
    "postgresql": ("asyncpg", {"psycopg2", "psycopg2cffi", "pg8000", ""}),
    "mysql": ("aiomysql", {"mysqldb", "pymysql", "mysqlconnector", ""}),
    "mariadb": ("aiomysql", {"mysqldb", "pymysql", "mysqlconnector", ""}),
}

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


class SQL(Connector):
    """A SQL database: list and describe tables, read-only queries, and writes."""

    name = "sql"

    class Settings(ConnectorSettings):
        url: SecretStr = Field(description="SQLAlchemy database URL (SQL_CONNECTOR_URL)")
        max_rows: int = Field(200, ge=1, le=10_000)
        max_chars: int = Field(8000, ge=500, le=200_000)
        statement_timeout_seconds: float = Field(15.0, gt=0, le=600)
        connect_timeout_seconds: float = Field(10.0, gt=0, le=120)
        read_functions: CommaList = Field(
            default_factory=list,
            description="Functions sql_query may call besides its built-in list, by name or"
            " schema.name; only functions that compute or read (SQL_CONNECTOR_READ_FUNCTIONS)",
        )

    settings: Settings

    def __init__(self, settings: ConnectorSettings, context: ConnectorContext) -> None:
        super().__init__(settings, context)
        self._engine: AsyncEngine | None = None
        self._read_engine: AsyncEngine | None = None
        self._backend = ""
        self._sqlite_path: Path | None = None
        self._config_error: str | None = None
        self._display_url = ""
        self._database = ""
        # An in-memory SQLite database is one shared connection: one operation at a time.
        self._memory_lock = asyncio.Lock()
        self._role: RoleReport | None = None
        self._role_lock = asyncio.Lock()

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Build the engines and inspect the database role: a privileged one is refused.

        A bad URL or an unreachable database is reported by check() and the tools, and the
        role is then inspected on first use instead.
        """
        self._build()
        if self._config_error or self._backend not in ROLE_BACKENDS:
            return
        try:
            async with asyncio.timeout(self.settings.connect_timeout_seconds + 5):
                await self._checked_role()
        except PrivilegedRoleError:
            await self.aclose()  # the hub leaves out a connector that fails, unclosed
            raise
        except Exception as exc:
            logger.warning("SQL connector: role not inspected yet: %s", _describe(exc))

    def _build(self) -> None:
        if self._engine is not None or self._config_error is not None:
            return
        try:
            url = async_url(self.settings.url.get_secret_value())
            self._display_url = url.render_as_string(hide_password=True)
            self._backend = url.get_backend_name()
            self._database = url.database or ""
            options: dict[str, Any] = {"pool_pre_ping": True}
            if self._backend == "postgresql" and url.get_driver_name() == "asyncpg":
                options["connect_args"] = {"timeout": self.settings.connect_timeout_seconds}
            if self._backend == "sqlite":
                self._sqlite_path = sql_sqlite.database_file(url)
            self._engine = create_async_engine(url, **options)
            if self._backend == "sqlite" and self._sqlite_path is not None:
                read_url = sql_sqlite.read_only_url(url, self._sqlite_path)
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
        self._role = None  # inspected afresh: grants may have changed since the start
        try:
            async with asyncio.timeout(self.settings.connect_timeout_seconds + 5):
                async with self._read_transaction() as connection:
                    await connection.exec_driver_sql("SELECT 1")
        except PrivilegedRoleError as exc:
            return ConnectorStatus(self.name, False, str(exc), tools)
        except Exception as exc:
            return ConnectorStatus(
                self.name, False, f"{self._display_url}: {_describe(exc)}", tools
            )
        detail = f"{self._backend} at {self._display_url}"
        if self._role is not None:
            detail += f" as {self._role.role} (no server privileges)"
        if self.settings.read_functions:
            # Each one widens what sql_query may call without approval: keep it visible.
            detail += "; functions allowed by read_functions: "
            detail += ", ".join(self.settings.read_functions)
        return ConnectorStatus(self.name, True, detail, tools)

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
                    "One read-only SQL statement (SELECT, WITH … SELECT, EXPLAIN, SHOW)."
                    " Write literal values inline; no bind parameters."
                )
            ),
        ],
    ) -> str:
        """Run one read-only SQL query and return the rows as a table. Only reads run: no
        writes, locks or functions with side effects (use sql_execute for changes). At most
        max_rows rows come back, so filter or aggregate in SQL for large tables.
        """
        self._engines(reading=True)  # a bad URL or a missing file first, said plainly
        statement = check_read_statement(
            sql, self._backend, read_functions=self.settings.read_functions
        ).sql
        # Error positions refer to what ran: show it when it is not what was sent.
        rebuilt = statement if statement != sql.strip().rstrip(";").strip() else None
        limit = self.settings.max_rows
        async with (
            self._errors(reading=True, statement=rebuilt),
            self._read_transaction() as connection,
        ):
            result = await connection.run_sync(fetch, statement, limit, True)
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
            result = await connection.run_sync(fetch, statement, limit, False)
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

    async def _checked_role(self) -> None:
        """Inspect the role once (PostgreSQL, MySQL); ``PrivilegedRoleError`` if it can do more."""
        if self._backend not in ROLE_BACKENDS:
            return
        async with self._role_lock:
            if self._role is None:
                self._role = await self._inspect_role()
        if self._role.privileged:
            raise PrivilegedRoleError(self._role)

    async def _inspect_role(self) -> RoleReport:
        _, engine = self._engines(reading=True)
        async with self._guarded(engine) as connection:
            await self._begin(connection, read_only=True)

            async def rows(sql: str) -> list[tuple[Any, ...]]:
                return [tuple(row) for row in (await connection.exec_driver_sql(sql)).all()]

            try:
                return await inspect_role(self._backend, self._database, rows)
            finally:
                await connection.rollback()

    @contextlib.asynccontextmanager
    async def _read_transaction(self) -> AsyncIterator[AsyncConnection]:
        """A connection inside a transaction the database keeps read-only; rolled back after."""
        _, engine = self._engines(reading=True)
        if self._backend not in ("sqlite", "postgresql", "mysql", "mariadb"):
            raise ToolError(
                f"read-only queries are not supported for {self._backend}: the connector can"
                " enforce read-only only on SQLite, PostgreSQL and MySQL"
            )
        await self._checked_role()
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
        await self._checked_role()
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
                # The statement policy reads '\' as a backslash, as PostgreSQL does with this.
                await connection.exec_driver_sql("SET LOCAL standard_conforming_strings = on")
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
            await raw.set_authorizer(sql_sqlite.read_authorizer)
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
    async def _errors(self, *, reading: bool, statement: str | None = None) -> AsyncIterator[None]:
        """Database failures as ToolErrors the model can act on."""
        try:
            yield
        except ToolError:
            raise
        except TimeoutError as exc:
            raise ToolError(self._timeout_message()) from exc
        except Exception as exc:
            message = _describe(exc)
            if statement is not None:
                message += f" (in the statement as run, comments removed: {statement[:300]})"
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
            parts.append(f"default {cell(column['default'], 60)}")
        if column.get("comment"):
            parts.append(f"-- {cell(column['comment'], 80)}")
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

"""The SQL connector over SQLite files and (with LARKGATE_TEST_POSTGRES_URL) PostgreSQL.

Every test drives the tools the way the agent does, through ``connector.tools()``.
The read-only tests check two things: the write is refused with a clear error, and a
second, independent connection sees the data unchanged.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from bot.engine import Tool, ToolError
from connectors import sql as sql_module
from connectors import sql_sqlite
from connectors.base import ConnectorContext
from connectors.sql import SQL, async_url
from connectors.sql_policy import ReadStatement

from support.postgres import BACKENDS, reset_public_schema, scratch_database, url_text

SEED = [
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name VARCHAR(100) NOT NULL,"
    " email VARCHAR(200) UNIQUE)",
    "CREATE TABLE orders (id INTEGER PRIMARY KEY,"
    " customer_id INTEGER NOT NULL REFERENCES customers (id),"
    " total NUMERIC(10, 2), note TEXT)",
    "CREATE INDEX ix_orders_customer ON orders (customer_id)",
    "CREATE VIEW big_orders AS SELECT * FROM orders WHERE total > 100",
    "INSERT INTO customers (id, name, email) VALUES (1, 'Ada', 'ada@example.com'),"
    " (2, 'Grace', 'grace@example.com'), (3, 'Linus', NULL)",
    "INSERT INTO orders (id, customer_id, total, note) VALUES "
    + ", ".join(
        f"({i}, {i % 3 + 1}, {i * 1.5:.2f}, {'NULL' if i % 10 == 0 else repr(f'order {i}')})"
        for i in range(1, 301)
    ),
]
ORDERS = 300


# ---------------------------------------------------------------- databases


@pytest.fixture(scope="module")
def postgres_database() -> Iterator[URL]:
    """A database of this module's own; each test resets its public schema."""
    with scratch_database("larkgate_sql_") as url:
        yield url


async def _seed(url: str, statements: list[str]) -> None:
    engine = create_async_engine(async_url(url))
    try:
        async with engine.begin() as connection:
            for statement in statements:
                await connection.exec_driver_sql(statement)
    finally:
        await engine.dispose()


class Database:
    """The seeded database, read over an engine of its own, never the connector's."""

    def __init__(self, backend: str, url: str, directory: Path) -> None:
        self.backend = backend
        self.url = url
        self.directory = directory
        self._engine: AsyncEngine | None = None

    async def scalar(self, sql: str) -> Any:
        if self._engine is None:
            self._engine = create_async_engine(async_url(self.url))
        async with self._engine.connect() as connection:
            return (await connection.exec_driver_sql(sql)).scalar()

    async def snapshot(self) -> tuple[Any, ...]:
        return (
            await self.scalar("SELECT count(*) FROM orders"),
            await self.scalar("SELECT count(*) FROM customers"),
            await self.scalar("SELECT sum(total) FROM orders"),
            await self.scalar("SELECT name FROM customers WHERE id = 1"),
        )

    async def dispose(self) -> None:
        if self._engine is not None:
            await self._engine.dispose()

    def long_text(self, n: int) -> str:
        """An SQL expression for a string of ``n`` x's."""
        if self.backend == "sqlite":
            return f"replace(hex(zeroblob({n // 2})), '0', 'x')"
        return f"repeat('x', {n})"


@pytest.fixture(params=BACKENDS)
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'shop.db'}"
    else:
        pg: URL = request.getfixturevalue("postgres_database")
        await reset_public_schema(pg)
        url = url_text(pg)
    await _seed(url, SEED)
    seeded = Database(request.param, url, tmp_path)
    yield seeded
    await seeded.dispose()


async def make(url: str, **settings: Any) -> SQL:
    connector = SQL(SQL.Settings(url=url, **settings), ConnectorContext())
    await connector.start()
    return connector


@pytest.fixture
async def sql(database: Database) -> AsyncIterator[SQL]:
    connector = await make(database.url, statement_timeout_seconds=5)
    yield connector
    await connector.aclose()


@functools.cache
def tools_of(connector: SQL) -> dict[str, Tool]:
    return {tool.name: tool for tool in connector.tools()}


async def call(connector: SQL, name: str, **arguments: Any) -> str:
    result = await tools_of(connector)[name].handler(**arguments)
    assert isinstance(result, str)
    return result


async def refused(connector: SQL, name: str, **arguments: Any) -> str:
    with pytest.raises(ToolError) as caught:
        await call(connector, name, **arguments)
    return str(caught.value)


# ---------------------------------------------------------------- the tools


async def test_tools_and_side_effects(sql: SQL) -> None:
    tools = tools_of(sql)
    assert {name: tool.side_effect for name, tool in tools.items()} == {
        "sql_list_tables": "read",
        "sql_describe_table": "read",
        "sql_query": "read",
        "sql_execute": "write",
    }
    assert tools["sql_query"].parameters["required"] == ["sql"]
    assert tools["sql_describe_table"].parameters["required"] == ["table"]
    assert "read-only" in tools["sql_query"].description
    # The tool timeout leaves room for the statement and connect timeouts.
    assert all(tool.timeout and tool.timeout > 5 for tool in tools.values())


async def test_check_reports_the_backend(sql: SQL, database: Database) -> None:
    status = await sql.check()
    assert status.ok, status.detail
    assert database.backend in status.detail
    assert status.tools == 4
    assert "larkgate:larkgate@" not in status.detail  # no password


async def test_list_tables(sql: SQL) -> None:
    listing = await call(sql, "sql_list_tables")
    assert "2 tables" in listing
    assert "customers" in listing and "orders" in listing
    assert "views: big_orders" in listing


async def test_describe_table(sql: SQL) -> None:
    text = await call(sql, "sql_describe_table", table="orders")
    assert "table orders (4 columns)" in text
    assert "customer_id | INTEGER | NOT NULL" in text
    assert "total | NUMERIC(10, 2) | NULL" in text
    assert "primary key: id" in text
    assert "(customer_id) -> customers(id)" in text
    assert "ix_orders_customer (customer_id)" in text
    customers = await call(sql, "sql_describe_table", table="customers")
    assert "name | VARCHAR(100) | NOT NULL" in customers
    assert "UNIQUE" in customers and "(email)" in customers


async def test_describe_missing_table_lists_the_tables(sql: SQL) -> None:
    message = await refused(sql, "sql_describe_table", table="invoices")
    assert "no table or view named 'invoices'" in message
    assert "customers" in message and "orders" in message


async def test_query_renders_a_compact_table(sql: SQL) -> None:
    text = await call(sql, "sql_query", sql="SELECT id, name, email FROM customers ORDER BY id")
    lines = text.splitlines()
    assert lines[0] == "id | name | email"
    assert lines[2:5] == [
        "1 | Ada | ada@example.com",
        "2 | Grace | grace@example.com",
        "3 | Linus | NULL",
    ]
    assert lines[-1] == "(3 rows)"
    one = await call(sql, "sql_query", sql="SELECT name FROM customers WHERE id = 2")
    assert one.splitlines()[-1] == "(1 row)"
    none = await call(sql, "sql_query", sql="SELECT name FROM customers WHERE id = 99")
    assert none.splitlines()[-1] == "(0 rows)"


async def test_literals_are_not_bind_parameters(sql: SQL) -> None:
    text = await call(sql, "sql_query", sql="SELECT ':name' AS a, '%s' AS b, 'x|y\nz' AS c")
    assert text.splitlines()[2] == ":name | %s | x\\|y\\nz"


async def test_row_limit_says_when_cut(database: Database) -> None:
    connector = await make(database.url, max_rows=25)
    try:
        text = await call(connector, "sql_query", sql="SELECT * FROM orders ORDER BY id")
    finally:
        await connector.aclose()
    rows = [line for line in text.splitlines()[2:-1]]
    assert len(rows) == 25
    assert "25 rows shown; the result has more (max_rows=25)" in text.splitlines()[-1]


async def test_huge_result_is_streamed_not_loaded(sql: SQL) -> None:
    started = time.perf_counter()
    text = await call(
        sql,
        "sql_query",
        sql="WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 50000000)"
        " SELECT x FROM c",
    )
    assert time.perf_counter() - started < 3
    assert "200 rows shown; the result has more" in text


async def test_long_cells_and_output_are_cut(database: Database) -> None:
    connector = await make(database.url, max_chars=2000)
    try:
        cell = await call(connector, "sql_query", sql=f"SELECT {database.long_text(5000)} AS t")
        many = await call(
            connector,
            "sql_query",
            sql=f"SELECT id, {database.long_text(150)} AS t FROM orders ORDER BY id",
        )
    finally:
        await connector.aclose()
    row = cell.splitlines()[2]
    assert row.endswith("…") and len(row) <= 200
    assert len(many) < 2300
    assert "only the first" in many.splitlines()[-1]
    assert "fit in 2000 characters" in many


async def test_bad_sql_is_a_tool_error(sql: SQL) -> None:
    typo = await refused(sql, "sql_query", sql="SELEC * FROM orders")
    assert "refused" in typo and "starts with SELEC" in typo
    unfinished = await refused(sql, "sql_query", sql="SELECT * FROM orders WHERE")
    assert "could not parse" in unfinished
    assert "SQL error" in await refused(sql, "sql_query", sql="SELECT nowhere FROM orders")
    missing = await refused(sql, "sql_query", sql="SELECT * FROM invoices")
    assert "sql_list_tables" in missing
    assert "empty" in await refused(sql, "sql_query", sql="   ")
    # The connector is fine afterwards.
    assert "(1 row)" in await call(sql, "sql_query", sql="SELECT count(*) FROM orders")


async def test_parallel_queries(sql: SQL) -> None:
    queries = [call(sql, "sql_query", sql=f"SELECT {i} AS n") for i in range(8)]
    results = await asyncio.gather(*queries)
    assert [r.splitlines()[2] for r in results] == [str(i) for i in range(8)]


# ---------------------------------------------------------------- read-only enforcement

COMMON_WRITES = [
    "INSERT INTO customers (id, name) VALUES (10, 'Mallory')",
    "UPDATE customers SET name = 'Mallory' WHERE id = 1",
    "DELETE FROM orders",
    "DROP TABLE orders",
    "DROP VIEW big_orders",
    "CREATE TABLE evil (x INTEGER)",
    "ALTER TABLE customers ADD COLUMN evil INTEGER",
    "CREATE INDEX ix_evil ON customers (name)",
    "SELECT 1; DROP TABLE orders",
    "SELECT 1; INSERT INTO customers (id, name) VALUES (11, 'Eve')",
    "  delete from orders where id > 0 ; ",
]
SQLITE_WRITES = [
    "WITH x AS (SELECT 12 AS id) INSERT INTO customers (id, name) SELECT id, 'Eve' FROM x",
    "REPLACE INTO customers (id, name) VALUES (1, 'Mallory')",
    "ATTACH DATABASE '{directory}/other.db' AS other",
    "PRAGMA query_only = OFF",
    "PRAGMA user_version = 7",
    "PRAGMA foreign_keys = OFF",
    "VACUUM",
    "BEGIN IMMEDIATE",
    "SELECT load_extension('/tmp/evil')",
    "REINDEX",
    "ANALYZE",
]
POSTGRES_WRITES = [
    "WITH x AS (INSERT INTO customers (id, name) VALUES (12, 'Eve') RETURNING *) SELECT * FROM x",
    "WITH x AS (DELETE FROM orders RETURNING id) SELECT count(*) FROM x",
    "SELECT * FROM orders FOR UPDATE",
    "SET TRANSACTION READ WRITE",
    "CREATE TEMP TABLE t AS SELECT 1",
    "TRUNCATE orders",
    "DO $$ BEGIN DELETE FROM orders; END $$",
    "CREATE SEQUENCE s",
    "COPY customers FROM STDIN",
]


def _writes(backend: str) -> list[str]:
    return COMMON_WRITES + (SQLITE_WRITES if backend == "sqlite" else POSTGRES_WRITES)


def _without_statement_policy(sql: str, backend: str, **_options: Any) -> ReadStatement:
    return ReadStatement("query", sql)


@pytest.fixture(params=["policy", "database alone"])
def layers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each write is refused by the statement policy, and again with the policy switched off."""
    if request.param == "database alone":
        monkeypatch.setattr(sql_module, "check_read_statement", _without_statement_policy)
    return str(request.param)


@pytest.mark.usefixtures("layers")
async def test_sql_query_cannot_write(sql: SQL, database: Database) -> None:
    before = await database.snapshot()
    for statement in _writes(database.backend):
        statement = statement.format(directory=database.directory)
        message = await refused(sql, "sql_query", sql=statement)
        assert message, statement
        assert await database.snapshot() == before, statement
    tables = await call(sql, "sql_list_tables")
    assert "evil" not in tables and "2 tables" in tables
    assert not (database.directory / "other.db").exists()
    # Pooled connections were not left writable, nor left read-only for sql_execute.
    assert "refused" in await refused(sql, "sql_query", sql=COMMON_WRITES[0])
    assert "1 row affected" in await call(sql, "sql_execute", sql=COMMON_WRITES[0])


async def test_refusal_names_the_write_tool(sql: SQL) -> None:
    message = await refused(sql, "sql_query", sql="DELETE FROM orders")
    assert "read-only" in message and "sql_execute" in message


async def test_sqlite_pragma_tricks_do_not_unlock_writes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    await _seed(url, SEED)
    connector = await make(url)
    try:
        for statement in ["PRAGMA query_only = OFF", "PRAGMA main.query_only = 0"]:
            await refused(connector, "sql_query", sql=statement)
            await refused(connector, "sql_query", sql="DELETE FROM orders")
        # Read-only pragmas stay available.
        info = await call(connector, "sql_query", sql="PRAGMA table_info(orders)")
        assert "customer_id" in info
    finally:
        await connector.aclose()
    database = Database("sqlite", url, tmp_path)
    assert await database.scalar("SELECT count(*) FROM orders") == ORDERS
    await database.dispose()


def _allow_everything(*_arguments: Any) -> int:
    return sqlite3.SQLITE_OK


@pytest.mark.parametrize("kind", ["file", "memory"])
async def test_sqlite_layers_hold_without_the_authorizer(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defence in depth: with the policy and the authorizer off, mode=ro / query_only refuse."""
    monkeypatch.setattr(sql_sqlite, "read_authorizer", _allow_everything)
    monkeypatch.setattr(sql_module, "check_read_statement", _without_statement_policy)
    url = f"sqlite:///{tmp_path / 'x.db'}" if kind == "file" else "sqlite://"
    connector = await make(url)
    try:
        await call(connector, "sql_execute", sql="CREATE TABLE IF NOT EXISTS t (x INTEGER)")
        await call(connector, "sql_execute", sql="INSERT INTO t VALUES (1)")
        for statement in ["INSERT INTO t VALUES (2)", "DROP TABLE t", "CREATE TABLE u (x)"]:
            message = await refused(connector, "sql_query", sql=statement)
            assert "readonly database" in message, message
        assert "(1 row)" in await call(connector, "sql_query", sql="SELECT x FROM t")
    finally:
        await connector.aclose()


# ---------------------------------------------------------------- sql_execute


async def test_execute_reports_rows_affected(sql: SQL, database: Database) -> None:
    inserted = await call(
        sql, "sql_execute", sql="INSERT INTO customers (id, name) VALUES (4, 'Barbara')"
    )
    assert inserted == "committed: 1 row affected"
    updated = await call(sql, "sql_execute", sql="UPDATE orders SET note = 'x' WHERE id <= 30")
    assert updated == "committed: 30 rows affected"
    deleted = await call(sql, "sql_execute", sql="DELETE FROM orders WHERE id > 290")
    assert deleted == "committed: 10 rows affected"
    assert await database.scalar("SELECT count(*) FROM orders") == ORDERS - 10
    assert await database.scalar("SELECT name FROM customers WHERE id = 4") == "Barbara"


async def test_execute_ddl_and_returning(sql: SQL) -> None:
    created = await call(sql, "sql_execute", sql="CREATE TABLE notes (id INTEGER PRIMARY KEY)")
    assert created.startswith("committed")
    assert "notes" in await call(sql, "sql_list_tables")
    returned = await call(
        sql, "sql_execute", sql="INSERT INTO notes (id) VALUES (1), (2) RETURNING id"
    )
    assert returned.startswith("committed; the statement returned:")
    assert returned.splitlines()[-1] == "(2 rows)"
    dropped = await call(sql, "sql_execute", sql="DROP TABLE notes")
    assert dropped.startswith("committed")
    assert "notes" not in await call(sql, "sql_list_tables")


async def test_execute_failure_changes_nothing(sql: SQL, database: Database) -> None:
    before = await database.snapshot()
    message = await refused(
        sql, "sql_execute", sql="INSERT INTO customers (id, name) VALUES (1, 'Duplicate')"
    )
    assert "SQL error" in message
    assert "SQL error" in await refused(sql, "sql_execute", sql="UPDATE nowhere SET x = 1")
    assert await database.snapshot() == before


# ---------------------------------------------------------------- timeouts and failures


async def test_statement_timeout(database: Database) -> None:
    connector = await make(database.url, statement_timeout_seconds=0.2)
    # Endless work, not pg_sleep: sql_query refuses pg_sleep (see test_sql_attacks.py).
    slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    try:
        started = time.perf_counter()
        message = await refused(connector, "sql_query", sql=slow)
        assert time.perf_counter() - started < 3
        assert "ran longer than 0.2 s" in message
        message = await refused(connector, "sql_execute", sql=slow)
        assert "ran longer than 0.2 s" in message
        # The connector recovers.
        assert "(1 row)" in await call(connector, "sql_query", sql="SELECT 1 AS one")
    finally:
        await connector.aclose()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("notadialect://x/y", "bad database URL"),
        ("not a url at all", "bad database URL"),
        ("mysql://user@127.0.0.1/db", "bad database URL"),  # aiomysql is not installed
        ("postgresql+asyncpg://u:secret@127.0.0.1:1/db", "cannot connect"),
    ],
)
async def test_broken_backends_are_reported_not_raised(url: str, expected: str) -> None:
    connector = await make(url, connect_timeout_seconds=2)
    try:
        status = await connector.check()
        assert not status.ok
        assert expected in status.detail
        assert "secret" not in status.detail
        for name, arguments in [
            ("sql_list_tables", {}),
            ("sql_query", {"sql": "SELECT 1"}),
            ("sql_execute", {"sql": "DELETE FROM t"}),
        ]:
            message = await refused(connector, name, **arguments)
            assert "secret" not in message
    finally:
        await connector.aclose()


async def test_missing_sqlite_file(tmp_path: Path) -> None:
    connector = await make(f"sqlite:///{tmp_path / 'absent.db'}")
    try:
        status = await connector.check()
        assert not status.ok and "not found" in status.detail
        assert "does not exist" in await refused(connector, "sql_query", sql="SELECT 1")
        assert "does not exist" in await refused(connector, "sql_list_tables")
        # sql_execute may create the database.
        await call(connector, "sql_execute", sql="CREATE TABLE t (x INTEGER)")
        assert "t" in await call(connector, "sql_list_tables")
        assert (await connector.check()).ok
    finally:
        await connector.aclose()
    nowhere = await make(f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}")
    message = await refused(nowhere, "sql_execute", sql="CREATE TABLE t (x INTEGER)")
    assert "directory" in message and "does not exist" in message


# ---------------------------------------------------------------- URLs


@pytest.mark.parametrize(
    ("given", "driver"),
    [
        ("sqlite:///shop.db", "sqlite+aiosqlite"),
        ("sqlite+pysqlite:///shop.db", "sqlite+aiosqlite"),
        ("sqlite+aiosqlite:///shop.db", "sqlite+aiosqlite"),
        ("sqlite://", "sqlite+aiosqlite"),
        ("postgresql://u:p@h/db", "postgresql+asyncpg"),
        ("postgresql+psycopg2://u:p@h/db", "postgresql+asyncpg"),
        ("postgresql+asyncpg://u:p@h/db", "postgresql+asyncpg"),
        ("postgresql+psycopg://u:p@h/db", "postgresql+psycopg"),
        ("mysql://u@h/db", "mysql+aiomysql"),
        ("mysql+asyncmy://u@h/db", "mysql+asyncmy"),
    ],
)
def test_async_driver_is_chosen(given: str, driver: str) -> None:
    assert async_url(given).drivername == driver


async def test_aiosqlite_url_and_relative_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    await _seed("sqlite:///relative.db", SEED)
    connector = await make("sqlite+aiosqlite:///relative.db")
    try:
        assert (await connector.check()).ok
        assert "(1 row)" in await call(connector, "sql_query", sql="SELECT count(*) FROM orders")
        await refused(connector, "sql_query", sql="DELETE FROM orders")
    finally:
        await connector.aclose()


async def test_in_memory_sqlite() -> None:
    connector = await make("sqlite://")
    try:
        await call(connector, "sql_execute", sql="CREATE TABLE t (x INTEGER)")
        await call(connector, "sql_execute", sql="INSERT INTO t VALUES (1), (2)")
        assert "refused" in await refused(connector, "sql_query", sql="DELETE FROM t")
        assert "refused" in await refused(connector, "sql_query", sql="PRAGMA query_only = OFF")
        assert "(2 rows)" in await call(connector, "sql_query", sql="SELECT x FROM t")
        # The shared connection is writable again for sql_execute.
        assert "1 row affected" in await call(
            connector, "sql_execute", sql="DELETE FROM t WHERE x = 1"
        )
        assert "(1 row)" in await call(connector, "sql_query", sql="SELECT x FROM t")
    finally:
        await connector.aclose()

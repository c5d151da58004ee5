"""The SQL connector against the attacks reproduced on PostgreSQL, and its role check.

Reproduced before the fix: through ``sql_query`` (a read tool, no approval) a superuser
role ran ``COPY … TO PROGRAM`` and ``COPY … TO '<file>'`` on the database host, and an
ordinary role terminated another session and took an advisory lock. Each is a test here,
with the database's state checked from another session, never from the connector.

Each layer is tested on its own: the statement policy with the role check switched off
(a superuser connection gets as far as the statement), and the role check on the real
server with roles this module creates and drops. Needs LARKGATE_TEST_POSTGRES_URL, and for
the superuser parts LARKGATE_TEST_POSTGRES_SUPERUSER_URL (or the role that
scripts/start_postgres.sh creates, derived from the first URL).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL, make_url

from bot.engine import ToolError
from connectors.base import ConnectorContext
from connectors.config import ConnectorsConfig
from connectors.hub import ConnectorHub
from connectors.sql import SQL
from connectors.sql_policy import check_read_statement
from connectors.sql_roles import PrivilegedRoleError

from support.postgres import (
    POSTGRES_URL_ENV,
    connect,
    execute,
    fetchval,
    run_blocking,
    scratch_database,
    url_text,
)

SUPERUSER_URL_ENV = "LARKGATE_TEST_POSTGRES_SUPERUSER_URL"
# What scripts/start_postgres.sh creates next to the test role.
SCRIPT_SUPERUSER = ("larkgate_super", "larkgate_super")

needs_postgres = pytest.mark.skipif(
    not os.environ.get(POSTGRES_URL_ENV),
    reason=f"{POSTGRES_URL_ENV} is not set (no PostgreSQL here: see scripts/start_postgres.sh)",
)
needs_superuser = pytest.mark.skipif(
    not (os.environ.get(SUPERUSER_URL_ENV) or os.environ.get(POSTGRES_URL_ENV)),
    reason=f"neither {SUPERUSER_URL_ENV} nor {POSTGRES_URL_ENV} is set (no PostgreSQL here)",
)

SEED = [
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT)",
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL"
    " REFERENCES customers (id), total NUMERIC(10, 2), note TEXT)",
    "INSERT INTO customers VALUES (1, 'Ada', 'ada@example.com'), (2, 'Grace', NULL),"
    " (3, 'Linus', 'linus@example.com')",
    "INSERT INTO orders SELECT i, i % 3 + 1, i * 1.5, CASE WHEN i % 4 = 0 THEN NULL"
    " ELSE 'order ' || i END FROM generate_series(1, 40) AS i",
]


# ---------------------------------------------------------------- databases and roles


@pytest.fixture(scope="module")
def database() -> Iterator[URL]:
    """A seeded database of this module's own, owned by the ordinary test role."""
    if not os.environ.get(POSTGRES_URL_ENV):
        pytest.skip(f"{POSTGRES_URL_ENV} is not set (no PostgreSQL here)")
    with scratch_database("larkgate_sqlsec_") as url:
        run_blocking(execute(url, *SEED))
        yield url


@pytest.fixture(scope="module")
def superuser(database: URL) -> URL:
    """The superuser, connected to this module's database."""
    given = os.environ.get(SUPERUSER_URL_ENV)
    if given:
        url = make_url(given)
    else:
        user, password = SCRIPT_SUPERUSER
        url = database.set(username=user, password=password)
    url = url.set(drivername="postgresql+asyncpg", database=database.database)

    async def probe() -> None:
        assert await fetchval(url, "SELECT rolsuper FROM pg_roles WHERE rolname = user")

    try:
        run_blocking(probe())
    except Exception as exc:
        pytest.fail(
            f"no superuser connection ({type(exc).__name__}: {exc}): run"
            f" scripts/start_postgres.sh (it creates {SCRIPT_SUPERUSER[0]}) or export"
            f" {SUPERUSER_URL_ENV}"
        )
    return url


class Roles:
    """Login roles made for one test with the superuser, and dropped after it."""

    def __init__(self, superuser: URL, database: URL) -> None:
        self.superuser = superuser
        self.database = database
        self.made: list[str] = []

    async def make(self, *grants: str, attributes: str = "") -> URL:
        name = f"larkgate_t_{uuid.uuid4().hex[:10]}"
        password = uuid.uuid4().hex
        self.made.append(name)
        statements = [
            f"CREATE ROLE {name} LOGIN PASSWORD '{password}' {attributes}",
            f'GRANT CONNECT ON DATABASE "{self.database.database}" TO {name}',
            f"GRANT USAGE ON SCHEMA public TO {name}",
            f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {name}",
        ]
        statements += [grant.format(role=name) for grant in grants]
        await execute(self.superuser, *statements)
        return self.database.set(username=name, password=password)

    async def grant(self, statement: str) -> None:
        await execute(self.superuser, statement)

    async def drop(self) -> None:
        for name in reversed(self.made):
            await execute(
                self.superuser, f"DROP OWNED BY {name} CASCADE", f"DROP ROLE IF EXISTS {name}"
            )


@pytest.fixture
async def roles(superuser: URL, database: URL) -> AsyncIterator[Roles]:
    made = Roles(superuser, database)
    yield made
    await made.drop()


async def make(url: URL | str, **settings: Any) -> SQL:
    text = url if isinstance(url, str) else url_text(url)
    connector = SQL(SQL.Settings(url=text, **settings), ConnectorContext())
    await connector.start()
    return connector


@pytest.fixture
async def sql(database: URL) -> AsyncIterator[SQL]:
    """The connector as an ordinary role (it may terminate its own role's sessions)."""
    connector = await make(database, statement_timeout_seconds=5)
    yield connector
    await connector.aclose()


async def _no_role_check(_connector: SQL) -> None:
    return None


@pytest.fixture
async def superuser_sql(superuser: URL, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SQL]:
    """A superuser connection with the role check off: only the statement policy is left."""
    monkeypatch.setattr(SQL, "_checked_role", _no_role_check)
    connector = await make(superuser, statement_timeout_seconds=5)
    yield connector
    await connector.aclose()


async def query(connector: SQL, statement: str) -> str:
    tool = next(t for t in connector.tools() if t.name == "sql_query")
    result = await tool.handler(sql=statement)
    assert isinstance(result, str)
    return result


async def refused(connector: SQL, statement: str) -> str:
    with pytest.raises(ToolError) as caught:
        await query(connector, statement)
    return str(caught.value)


async def _snapshot(url: URL) -> tuple[Any, ...]:
    return (
        await fetchval(url, "SELECT count(*) FROM orders"),
        await fetchval(url, "SELECT sum(total) FROM orders"),
        await fetchval(url, "SELECT string_agg(name, ',' ORDER BY id) FROM customers"),
    )


def _remove(path: str) -> None:
    """Clean up after a regression: the file exists only if the attack got through."""
    Path(path).unlink(missing_ok=True)


# ---------------------------------------------------------------- the reproduced attacks


@needs_superuser
async def test_copy_to_program_does_not_run(superuser_sql: SQL, superuser: URL) -> None:
    marker = f"/tmp/larkgate-copy-program-{uuid.uuid4().hex}"
    try:
        message = await refused(superuser_sql, f"COPY (SELECT 1) TO PROGRAM 'touch {marker}'")
        assert message.startswith("refused: ") and "COPY" in message
        # Asked on the database host itself, so it holds for a remote server too.
        assert await fetchval(superuser, f"SELECT pg_stat_file('{marker}', true)") is None
    finally:
        _remove(marker)


@needs_superuser
async def test_copy_to_a_file_does_not_write_it(superuser_sql: SQL, superuser: URL) -> None:
    target = f"/tmp/larkgate-copy-file-{uuid.uuid4().hex}"
    try:
        for statement in [f"COPY (SELECT 42) TO '{target}'", f"COPY orders TO '{target}'"]:
            assert (await refused(superuser_sql, statement)).startswith("refused: ")
        assert await fetchval(superuser, f"SELECT pg_stat_file('{target}', true)") is None
    finally:
        _remove(target)


@needs_postgres
async def test_another_session_is_not_terminated(sql: SQL, database: URL) -> None:
    other = await connect(database)
    try:
        pid = await other.fetchval("SELECT pg_backend_pid()")
        for statement in [
            f"SELECT pg_terminate_backend({pid})",
            f"SELECT pg_cancel_backend({pid})",
            f"SELECT pg_catalog.pg_terminate_backend({pid})",
            f'SELECT "pg_terminate_backend"({pid})',
            f"SELECT * FROM pg_terminate_backend({pid})",
            f"SELECT ({pid}).pg_terminate_backend",
            f"SELECT 1 WHERE EXISTS (SELECT PG_TERMINATE_BACKEND({pid}))",
        ]:
            message = await refused(sql, statement)
            assert "terminate" in message or "cancel" in message, message
        assert await other.fetchval("SELECT 1") == 1  # still alive
    finally:
        await other.close()


@needs_postgres
async def test_no_advisory_lock_is_taken(sql: SQL, database: URL) -> None:
    for statement in [
        "SELECT pg_advisory_lock(1)",
        "SELECT pg_try_advisory_lock(1)",
        "SELECT pg_advisory_lock_shared(1, 2)",
        "SELECT (1::bigint).pg_advisory_lock",
        "SELECT t.pg_advisory_lock FROM (SELECT 1::bigint AS x) AS t",
        "SELECT pg_catalog.pg_advisory_lock(1)",
        "SELECT * FROM ROWS FROM (pg_advisory_lock(1))",
        "EXPLAIN ANALYZE SELECT pg_advisory_lock(1)",
    ]:
        assert "advisory lock" in await refused(sql, statement), statement
    # In this database: another test run on the same server may hold one of its own.
    held = (
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    assert await fetchval(database, held) == 0  # seen from another session


# (statement, a phrase of the refusal)
ATTACKS = [
    ("SELECT query_to_xml('DELETE FROM orders RETURNING *', true, false, '')", "SQL text"),
    ("SELECT query_to_xml_and_xmlschema('DELETE FROM orders', true, false, '')", "SQL text"),
    ("SELECT table_to_xml('orders', true, false, '')", "runs SQL"),
    ("SELECT set_config('work_mem', '77MB', false)", "changes a setting"),
    ("SELECT * FROM orders FOR UPDATE", "FOR UPDATE"),
    ("SELECT * FROM orders FOR SHARE SKIP LOCKED", "FOR SHARE"),
    ("SELECT (SELECT id FROM orders LIMIT 1 FOR UPDATE)", "FOR UPDATE"),
    ("WITH d AS (DELETE FROM orders RETURNING *) SELECT count(*) FROM d", "DELETE"),
    ("WITH u AS (UPDATE customers SET name = 'x' RETURNING *) SELECT * FROM u", "UPDATE"),
    ("WITH i AS (INSERT INTO customers VALUES (9, 'Eve') RETURNING *) SELECT 1", "INSERT"),
    ("SELECT 1; DELETE FROM orders", "more than one"),
    ("SELECT 1 -- harmless\n; DELETE FROM orders", "more than one"),
    ("SELECT 1 /* ; */ ; UPDATE customers SET name = 'x'", "more than one"),
    ("SELECT '\\'; DELETE FROM orders; --'", "more than one"),
    ('SELECT U&"\\0070g_sleep"(5)', "not on sql_query's list"),
    ("SELECT U&'\\0044ELETE'", "U&"),
    ('SELECT "PG_SLEEP"(5)', "pg_sleep"),
    ("SELECT pg_sleep(5)", "denial of service"),
    ("SELECT nextval('orders_id_seq')", "sequence"),
    ("SELECT txid_current()", "transaction ids"),
    ("SELECT pg_notify('larkgate', 'x')", "notification"),
    ("SELECT lo_import('/etc/hostname')", "large objects"),
    ("SELECT pg_read_file('/etc/hostname')", "reads a file"),
    ("SELECT dblink_exec('dbname=postgres', 'DROP TABLE orders')", "outside the read-only"),
    ("DO $$ BEGIN DELETE FROM orders; END $$", "starts with DO"),
    ("SET work_mem = '77MB'", "starts with SET"),
    ("SELECT * INTO stolen FROM orders", "INTO"),
    ("LOCK TABLE orders", "starts with LOCK"),
    ("LISTEN larkgate", "starts with LISTEN"),
    ("NOTIFY larkgate", "starts with NOTIFY"),
    ("EXPLAIN ANALYZE DELETE FROM orders", "EXPLAIN only of a query"),
]


@needs_postgres
async def test_the_other_attacks_are_refused(sql: SQL, database: URL) -> None:
    before = await _snapshot(database)
    work_mem = await query(sql, "SHOW work_mem")
    for statement, why in ATTACKS:
        message = await refused(sql, statement)
        assert message.startswith("refused: ") and why.lower() in message.lower(), message
    assert await _snapshot(database) == before
    assert await query(sql, "SHOW work_mem") == work_mem  # the pooled session kept it
    # In this database: another test run on the same server may hold one of its own.
    held = (
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    assert await fetchval(database, held) == 0


@needs_postgres
async def test_quoting_tricks_run_as_the_literals_they_are(sql: SQL) -> None:
    started = asyncio.get_running_loop().time()
    text = await query(sql, "SELECT E'\\', pg_sleep(5) --' AS s")
    assert text.splitlines()[2] == "', pg_sleep(5) --"
    nested = await query(sql, "SELECT 1 AS one /* /* ; DELETE FROM orders */ */")
    assert nested.splitlines()[2] == "1"
    assert asyncio.get_running_loop().time() - started < 3


# ---------------------------------------------------------------- what runs is what was asked

FAITHFUL = [
    "SELECT id, name FROM customers ORDER BY id",
    "SELECT c.name, count(o.id), sum(o.total) FROM customers c LEFT JOIN orders o"
    " ON o.customer_id = c.id GROUP BY c.name ORDER BY c.name",
    "WITH big AS (SELECT * FROM orders WHERE total > 30) SELECT count(*) FROM big",
    "SELECT DISTINCT ON (customer_id) customer_id, total FROM orders"
    " ORDER BY customer_id, total DESC",
    "SELECT customer_id, total, row_number() OVER (PARTITION BY customer_id ORDER BY total)"
    " FROM orders ORDER BY 1, 2",
    "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY total) FROM orders",
    "SELECT count(*) FILTER (WHERE note IS NULL), string_agg(name, ', ' ORDER BY name)"
    " FROM orders JOIN customers ON customers.id = orders.customer_id",
    "SELECT to_hex(255), md5('x'), 'it''s', $$dollar$$, E'tab\\there', 'a'\n'b'",
    "SELECT name ~* '^g', name ILIKE 'a%', split_part(email, '@', 2) FROM customers ORDER BY id",
    "SELECT * FROM generate_series(1, 3) AS g(n)",
    "SELECT (ARRAY[1, 2, 3])[2], '{\"a\": 1}'::jsonb ->> 'a', 7 / 2, 7 % 2, 2 ^ 10",
    "SELECT date_trunc('day', timestamp '2024-05-06 07:08:09')",
    "SELECT -- a comment\n id /* another */ FROM customers WHERE id = 1",
    "VALUES (1, 'a'), (2, 'b')",
    "TABLE customers",
]


@needs_postgres
async def test_what_runs_answers_as_the_text_would(database: URL) -> None:
    """The statement rebuilt from the checked tokens returns what the text itself returns."""
    connection = await connect(database)
    try:
        for statement in FAITHFUL:
            rebuilt = check_read_statement(statement, "postgresql").sql
            assert await connection.fetch(rebuilt) == await connection.fetch(statement), rebuilt
    finally:
        await connection.close()


def test_what_runs_answers_as_the_text_would_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "faithful.db"
    with sqlite3.connect(path) as connection:
        connection.executescript(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT);"
            " INSERT INTO t VALUES (1, 'a'), (2, 'b''c'), (3, NULL);"
        )
        for statement in [
            "SELECT id, name FROM t ORDER BY id",
            "SELECT group_concat(name, '|'), count(*) FROM t",
            'SELECT [id], `name`, "id" FROM t -- note\n WHERE id > 1',
            "SELECT replace(hex(zeroblob(3)), '0', 'x'), typeof(1.5)",
            "PRAGMA table_info(t)",
        ]:
            rebuilt = check_read_statement(statement, "sqlite").sql
            expected = connection.execute(statement).fetchall()
            assert connection.execute(rebuilt).fetchall() == expected, rebuilt


@needs_postgres
async def test_explain_and_show_still_work(sql: SQL) -> None:
    assert "Seq Scan" in await query(sql, "EXPLAIN SELECT * FROM orders")
    analyzed = await query(sql, "EXPLAIN (ANALYZE, COSTS OFF) SELECT count(*) FROM orders")
    assert "actual time" in analyzed
    assert "public" in await query(sql, "SHOW search_path")


# ---------------------------------------------------------------- the role check


@needs_superuser
async def test_a_select_only_role_is_accepted(roles: Roles) -> None:
    reader = await roles.make()
    connector = await make(reader)
    try:
        status = await connector.check()
        assert status.ok, status.detail
        assert "no server privileges" in status.detail
        assert "(3 rows)" in await query(connector, "SELECT id FROM customers")
    finally:
        await connector.aclose()


@needs_superuser
@pytest.mark.parametrize(
    ("grant", "attributes", "named"),
    [
        ("GRANT pg_execute_server_program TO {role}", "", "pg_execute_server_program"),
        ("GRANT pg_signal_backend TO {role}", "", "pg_signal_backend"),
        ("GRANT pg_write_server_files TO {role}", "", "pg_write_server_files"),
        ("GRANT pg_read_server_files TO {role}", "", "pg_read_server_files"),
        ("GRANT pg_monitor TO {role}", "", "pg_read_all_stats"),
        ("SELECT 1", "CREATEROLE", "CREATEROLE"),
        ("SELECT 1", "BYPASSRLS", "BYPASSRLS"),
        ("SELECT 1", "REPLICATION", "REPLICATION"),
    ],
)
async def test_a_privileged_role_is_refused_naming_what_it_has(
    roles: Roles, grant: str, attributes: str, named: str
) -> None:
    role = await roles.make(grant, attributes=attributes)
    with pytest.raises(PrivilegedRoleError) as caught:
        await make(role)
    message = str(caught.value)
    assert named in message and role.username in message
    assert "CREATE ROLE larkgate_reader LOGIN PASSWORD" in message
    assert f"GRANT CONNECT ON DATABASE {role.database}" in message
    assert "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES" in message


@needs_superuser
async def test_membership_through_another_role_counts(roles: Roles) -> None:
    group = f"larkgate_g_{uuid.uuid4().hex[:10]}"
    await roles.grant(f"CREATE ROLE {group} NOLOGIN")
    roles.made.insert(0, group)  # dropped last
    await roles.grant(f"GRANT pg_signal_backend TO {group}")
    member = await roles.make(f"GRANT {group} TO {{role}}")
    with pytest.raises(PrivilegedRoleError, match="member of pg_signal_backend"):
        await make(member)


@needs_superuser
async def test_the_superuser_itself_is_refused(superuser: URL) -> None:
    with pytest.raises(PrivilegedRoleError) as caught:
        await make(superuser)
    assert "superuser" in str(caught.value)


@needs_superuser
async def test_the_hub_and_check_report_a_privileged_role(superuser: URL) -> None:
    """What ``larkgate check`` prints: the connector's status, FAIL, naming the attribute."""
    config = ConnectorsConfig(sections={"sql": {"url": url_text(superuser)}}, explicit=True)
    hub = await ConnectorHub.build(config, ConnectorContext(), feishu_credentials=False)
    try:
        assert "sql" not in {c.name for c in hub.connectors}
        assert not any(tool.name.startswith("sql_") for tool in hub.registry)
        [status] = [s for s in await hub.check() if s.name == "sql"]
        assert not status.ok
        assert "PrivilegedRoleError" in status.detail and "superuser" in status.detail
        assert "larkgate_super:" not in status.detail  # no password
    finally:
        await hub.aclose()


@needs_superuser
async def test_privileges_granted_after_the_start_are_caught(roles: Roles) -> None:
    role = await roles.make()
    connector = await make(role)
    try:
        await roles.grant(f"GRANT pg_signal_backend TO {role.username}")
        status = await connector.check()  # inspects afresh
        assert not status.ok and "pg_signal_backend" in status.detail
        for tool in ("sql_query", "sql_execute"):
            handler = next(t for t in connector.tools() if t.name == tool).handler
            with pytest.raises(ToolError, match="pg_signal_backend"):
                await handler(sql="SELECT 1")
    finally:
        await connector.aclose()


async def test_an_unreachable_database_starts_and_is_checked_later() -> None:
    unreachable = "postgresql+asyncpg://u:secret@127.0.0.1:1/db"
    connector = await make(unreachable, connect_timeout_seconds=2)
    try:
        status = await connector.check()
        assert not status.ok and "cannot connect" in status.detail
    finally:
        await connector.aclose()

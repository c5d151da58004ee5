"""Prepared statements: straight to sqlite3 on the hot path, with SQLAlchemy's results.

The direct path is only worth having if it is taken (a refactor could make a hot statement
fall back without anyone noticing) and only allowed if it answers exactly what SQLAlchemy
answers, errors included. Both are pinned here; the stores' own tests run through it too.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, bindparam, create_engine, func, select
from sqlalchemy.exc import DBAPIError, IntegrityError

from bot.store import Database, upgrade
from bot.store import conversations as conversations_module
from bot.store import journal as journal_module
from bot.store.conversation_locks import ConversationLocks
from bot.store.ledger import _Statements
from bot.store.models import MessageClaimRow, table_of
from bot.store.prepared import Prepared

_claims = table_of(MessageClaimRow)


@pytest.fixture(scope="module")
def sqlite_file() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "prepared.db"
        upgrade(f"sqlite+aiosqlite:///{path}")
        yield path


@pytest.fixture
def connection(sqlite_file: Path) -> Iterator[Connection]:
    engine = create_engine(f"sqlite:///{sqlite_file}")
    with engine.connect() as connection:
        connection.connection.driver_connection.isolation_level = None  # as Database has it
        connection.exec_driver_sql("BEGIN")
        yield connection
        connection.connection.driver_connection.rollback()
    engine.dispose()


def claim_row(message_id: str = "om_1", **values: Any) -> dict[str, Any]:
    return {
        "app": "",
        "message_id": message_id,
        "state": "claimed",
        "owner": "host:1",
        "lease_until": 1_700_000_060.0,
        "attempts": 1,
        "payload": "{}",
        "conversation_key": None,
        "created_at": 1_700_000_000.0,
        "updated_at": 1_700_000_000.0,
        **values,
    }


def _hot_autocommit_statements(db: Database) -> list[tuple[Prepared, dict[str, Any]]]:
    """The hot path's statements that run in `transact(atomic=False)`."""
    ledger = _Statements(db)
    owned = {"p_app": "", "p_message_id": "m", "p_owner": "o", "now": 1.0}
    return [
        (ledger.insert_claim, claim_row()),
        (ledger.row, {"p_app": "", "p_message_id": "m"}),
        (ledger.take_one, {**owned, "max_attempts": 3, "p_lease_until": 2.0}),
        (
            ledger.fail_one,
            {"p_app": "", "p_message_id": "m", "now": 1.0, "max_attempts": 3, "p_reason": "x"},
        ),
        (ledger.renew, {**owned, "p_lease_until": 2.0}),
        (ledger.mark_replied, {**owned, "p_reply": "r"}),
        (conversations_module._LOAD, {"scope_key": "k", "limit": 20}),
        (
            ConversationLocks(db, owner="o", lease_seconds=9)._take,
            {"scope_key": "k", "owner": "o", "lease_until": 2.0, "now": 1.0},
        ),
    ]


def test_the_statements_of_a_message_run_straight_on_sqlite(connection: Connection):
    db = Database("sqlite+aiosqlite:///:memory:")
    ledger = _Statements(db)
    owned = {"p_app": "", "p_message_id": "m", "p_owner": "o", "now": 1.0}
    hot = [
        *_hot_autocommit_statements(db),
        (ledger.complete, owned),
        (ledger.complete_replied, {**owned, "p_reply": "r"}),
        (ledger.release, owned),
        (ledger.drop_owned, {**owned, "p_reason": "stale"}),
        (
            conversations_module.conversation_insert(db),
            {"id": "c", "scope_key": "k", "generation": 1, "created_at": 1.0},
        ),
        (
            journal_module._INSERT_ENTRIES,
            {"conversation_id": "c", "role": "user", "content": "hi", "message_id": None},
        ),
        (journal_module._INSERT_RUN, journal_module._run_row(_turn(), "c", 1.0)),
        (
            journal_module._COMPLETE_CLAIM,
            {"p_owner": "o", "first_message_id": "m", "p_reply": None, "now": 1.0},
        ),
    ]
    for statement, params in hot:
        assert statement.direct_on(connection, params), statement.statement


def _turn() -> journal_module.FinishedTurn:
    return journal_module.FinishedTurn(
        scope_key="k",
        run_id="r",
        message_id="m",
        status="completed",
        model="m",
        started_at=1.0,
        owner="o",
    )


texts = st.one_of(st.none(), st.text(max_size=40))
floats = st.floats(allow_nan=False, allow_infinity=False, width=64)


# Each example deletes its row: the connection fixture is shared safely.
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    owner=st.text(max_size=40),
    payload=st.text(max_size=200),
    key=texts,
    lease=floats,
    attempts=st.integers(min_value=-(2**62), max_value=2**62),
)
def test_the_direct_path_answers_what_sqlalchemy_answers(
    connection: Connection, owner: str, payload: str, key: str | None, lease: float, attempts: int
):
    insert = Prepared(
        Database("sqlite+aiosqlite:///:memory:").insert(_claims).returning(*_claims.c)
    )
    by_id = select(_claims).where(_claims.c.message_id == bindparam("p_message_id"))
    row = claim_row(
        "direct", owner=owner, payload=payload, conversation_key=key, lease_until=lease
    ) | {"attempts": attempts}
    inserted = insert.first(connection, row)
    expected = dict(connection.execute(by_id, {"p_message_id": "direct"}).mappings().one())
    assert inserted == expected
    assert Prepared(by_id).first(connection, {"p_message_id": "direct"}) == expected
    assert Prepared(by_id).all(connection, {"p_message_id": "direct"}) == [expected]
    assert Prepared(by_id).first(connection, {"p_message_id": "nothing"}) is None
    connection.exec_driver_sql("DELETE FROM message_claims WHERE message_id = 'direct'")


def test_an_integer_for_a_float_column_is_stored_as_a_float(connection: Connection):
    insert = Prepared(
        Database("sqlite+aiosqlite:///:memory:").insert(_claims).returning(*_claims.c)
    )
    insert.rowcount(connection, claim_row("ints", lease_until=5, created_at=1, updated_at=2))
    stored = connection.exec_driver_sql(
        "SELECT lease_until, typeof(lease_until), typeof(created_at) FROM message_claims"
        " WHERE message_id = 'ints'"
    ).one()
    assert tuple(stored) == (5.0, "real", "real")
    assert type(stored[0]) is float


def test_driver_errors_are_raised_as_sqlalchemys(connection: Connection):
    insert = Prepared(Database("sqlite+aiosqlite:///:memory:").insert(_claims))
    insert.rowcount(connection, claim_row("twice"))
    with pytest.raises(IntegrityError):
        insert.rowcount(connection, claim_row("twice"))
    with pytest.raises(IntegrityError):
        insert.many(connection, [claim_row("a"), claim_row("a")])


def test_a_missing_parameter_is_refused_before_running(connection: Connection):
    by_id = Prepared(select(_claims).where(_claims.c.message_id == bindparam("p_message_id")))
    assert by_id.direct_on(connection, {"other": 1})
    with pytest.raises(KeyError, match="p_message_id"):
        by_id.first(connection, {"other": 1})


def test_what_needs_sqlalchemy_is_run_by_it(connection: Connection):
    some = Prepared(
        select(_claims.c.message_id).where(
            _claims.c.message_id.in_(bindparam("ids", expanding=True))
        )
    )
    Prepared(Database("sqlite+aiosqlite:///:memory:").insert(_claims)).many(
        connection, [claim_row("x"), claim_row("y")]
    )
    assert not some.direct_on(connection, {"ids": ["x"]})
    assert {r["message_id"] for r in some.all(connection, {"ids": ["x", "y", "z"]})} == {"x", "y"}
    assert some.scalar(connection, {"ids": ["y"]}) == "y"


# -- PostgreSQL: straight to asyncpg in autocommit, through SQLAlchemy in a transaction ----


def _postgres_only(db: Database) -> None:
    if db.dialect != "postgresql":
        pytest.skip("PostgreSQL")


async def test_on_postgresql_autocommit_statements_go_straight_to_asyncpg(db: Database):
    _postgres_only(db)
    hot = _hot_autocommit_statements(db)

    def direct(connection: Connection) -> list[bool]:
        return [statement.direct_on(connection, params) for statement, params in hot]

    assert await db.transact(direct, atomic=False) == [True] * len(hot)
    # In a transaction, SQLAlchemy's adapter runs them (it sends the BEGIN).
    assert await db.transact(direct) == [False] * len(hot)


_EDGE_ROWS = [
    claim_row("plain"),
    claim_row("unicode", owner="主机:1 \u2028", payload='{"t":"你好 😀"}', conversation_key="k"),
    claim_row("empty", owner="", payload="", conversation_key=None),
    claim_row("ints", lease_until=5, created_at=-1, updated_at=2**40) | {"attempts": -(2**31)},
    claim_row("floats", lease_until=-0.0, created_at=1e-300, updated_at=1.7976931348623157e308),
]


async def test_on_postgresql_the_direct_path_answers_what_sqlalchemy_answers(db: Database):
    _postgres_only(db)
    insert = Prepared(db.insert(_claims).returning(*_claims.c))
    by_id = select(_claims).where(_claims.c.message_id == bindparam("p_message_id"))

    def insert_and_read(connection: Connection, row: dict[str, Any]) -> tuple[Any, ...]:
        assert insert.direct_on(connection, row)
        inserted = insert.first(connection, row)
        params = {"p_message_id": row["message_id"]}
        expected = dict(connection.execute(by_id, params).mappings().one())
        return (
            inserted,
            expected,
            Prepared(by_id).first(connection, params),
            Prepared(by_id).all(connection, params),
            Prepared(select(_claims.c.lease_until).where(by_id.whereclause)).scalar(
                connection, params
            ),
        )

    for row in _EDGE_ROWS:
        inserted, expected, first, every, lease = await db.transact(
            insert_and_read, row, atomic=False
        )
        assert inserted == expected == first
        assert every == [expected]
        assert lease == expected["lease_until"] == float(row["lease_until"])
        assert type(lease) is float and type(expected["attempts"]) is int


async def test_on_postgresql_direct_errors_are_raised_as_sqlalchemys(db: Database):
    _postgres_only(db)
    insert = Prepared(db.insert(_claims))
    await db.transact(insert.rowcount, claim_row("twice"), atomic=False)
    with pytest.raises(IntegrityError):
        await db.transact(insert.rowcount, claim_row("twice"), atomic=False)
    renew = _Statements(db).renew
    params = {"p_app": "", "p_message_id": "twice", "p_owner": "host:1", "now": 1.0}
    params["p_lease_until"] = 9.0
    assert await db.transact(renew.rowcount, params, atomic=False) == 1  # still usable


async def test_on_postgresql_a_dead_connection_under_a_direct_statement_is_replaced(
    db: Database, other_db: Database
):
    """A pooled connection the server dropped fails at its first (direct) statement; that
    transaction, which ran nothing, runs once more on a new connection. One whose first
    statement had run is not run again."""
    _postgres_only(db)
    insert = Prepared(db.insert(_claims))
    pid = Prepared(select(func.pg_backend_pid()))
    terminate = Prepared(select(func.pg_terminate_backend(bindparam("pid"))))

    victim = await db.transact(pid.scalar, {}, atomic=False)
    await other_db.transact(terminate.scalar, {"pid": victim}, atomic=False)
    assert await db.transact(insert.rowcount, claim_row("after"), atomic=False) == 1
    assert await db.transact(pid.scalar, {}, atomic=False) != victim

    def insert_then_terminate_self(connection: Connection) -> None:
        insert.rowcount(connection, claim_row("half"))
        terminate.scalar(connection, {"pid": pid.scalar(connection, {})})

    with pytest.raises(DBAPIError) as died:
        await db.transact(insert_then_terminate_self, atomic=False)
    assert died.value.connection_invalidated
    ids = select(_claims.c.message_id).order_by(_claims.c.message_id)
    stored = await db.transact(lambda c: list(c.execute(ids).scalars()), write=False)
    assert stored == ["after", "half"]  # autocommit kept the insert, and ran it once

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
from sqlalchemy import Connection, bindparam, create_engine, select
from sqlalchemy.exc import IntegrityError

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


def test_the_statements_of_a_message_run_straight_on_sqlite(connection: Connection):
    ledger = _Statements(Database("sqlite+aiosqlite:///:memory:"))
    owned = {"p_message_id": "m", "p_owner": "o", "now": 1.0}
    hot = [
        (ledger.insert_claim, claim_row()),
        (ledger.row, {"p_message_id": "m"}),
        (ledger.take_one, {**owned, "max_attempts": 3, "p_lease_until": 2.0}),
        (ledger.fail_one, {"p_message_id": "m", "now": 1.0, "max_attempts": 3, "p_reason": "x"}),
        (ledger.renew, {**owned, "p_lease_until": 2.0}),
        (ledger.mark_replied, {**owned, "p_reply": "r"}),
        (ledger.complete, owned),
        (ledger.complete_replied, {**owned, "p_reply": "r"}),
        (ledger.release, owned),
        (ledger.drop_owned, {**owned, "p_reason": "stale"}),
        (conversations_module._LOAD, {"scope_key": "k", "limit": 20}),
        (
            conversations_module.conversation_insert(Database("sqlite+aiosqlite:///:memory:")),
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
        (
            ConversationLocks(
                Database("sqlite+aiosqlite:///:memory:"), owner="o", lease_seconds=9
            )._take,
            {"scope_key": "k", "owner": "o", "lease_until": 2.0, "now": 1.0},
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

"""Statements of the hot path, run with the fewest layers between them and SQLite.

SQLAlchemy's execution of a cached Core statement costs 25-40 µs of CPU (execution
context, result proxy, events), about ten times what sqlite3 needs to run it; a message
runs about eight statements (claim, conversation lock and history, finished turn), so on
SQLite the difference was a fifth of the CPU a message costs (issue 14). A `Prepared`
statement is compiled by SQLAlchemy once per dialect and parameter set, and on SQLite its
SQL text goes straight to the sqlite3 connection of the transaction (the same
transaction: `Database` sends BEGIN to the driver itself).

On PostgreSQL, where SQLAlchemy's share was larger still (its execution layer and
asyncpg adapter, ~1,200 function calls a message), a statement run in autocommit
(`Database.transact(atomic=False)`, where every statement is its own transaction
anyway) goes straight to the asyncpg connection, in the same greenlet and with the
same compiled SQL (its ``$n::TYPE`` casts included). Its errors are raised as
SQLAlchemy raises them, translated by SQLAlchemy's own asyncpg adapter, and a
connection that died under it is invalidated, so that `Database` can tell a dead
pooled connection (retried) from a statement that ran. Inside a transaction a
statement runs through SQLAlchemy, which begins it.

Only statements that need nothing of SQLAlchemy at run time go straight: no expanding
``IN`` lists, no bind or result type processors (the tables store text, integers and
floats). A statement that needs more is run by SQLAlchemy on SQLite too; ``direct_on``
tells which path a statement takes, so a test can pin the hot ones. Engine events do not
see the direct statements, nor does ``echo``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Float
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import Executable
from sqlalchemy.util import await_only

from bot.store.db import mark_ran


@dataclass(frozen=True, slots=True)
class _Direct:
    """The SQLite form of a statement: its text, bind names in order, and fixed values."""

    sql: str
    names: tuple[str, ...]
    fixed: dict[str, Any]
    # Positions bound to a Float/Double: SQLAlchemy's processor makes the value a float.
    floats: tuple[int, ...]


class Prepared:
    """A Core statement run directly on SQLite (see the module) and by SQLAlchemy elsewhere.

    The parameters are the names of the statement's bind parameters (for an INSERT, its
    column keys), as for ``Connection.execute``.
    """

    __slots__ = ("_direct", "_postgres", "statement")

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        # By the tuple of parameter names given (an INSERT compiles to the columns given);
        # None: this statement needs SQLAlchemy. One cache a dialect.
        self._direct: dict[tuple[str, ...], _Direct | None] = {}
        self._postgres: dict[tuple[str, ...], _Direct | None] = {}

    def first(self, connection: Connection, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """The first row as a dict, or None."""
        cursor = self._cursor(connection, params)
        if cursor is None:
            straight = self._postgres_direct(connection, params)
            if straight is not None:
                record = _asyncpg(connection, straight, params, "fetchrow")
                return None if record is None else dict(record)
            row = connection.execute(self.statement, params).mappings().first()
            return None if row is None else dict(row)
        found = cursor.fetchone()
        result = None if found is None else _as_dict(cursor, found)
        cursor.close()
        return result

    def all(self, connection: Connection, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        cursor = self._cursor(connection, params)
        if cursor is None:
            straight = self._postgres_direct(connection, params)
            if straight is not None:
                return [dict(record) for record in _asyncpg(connection, straight, params, "fetch")]
            return [dict(row) for row in connection.execute(self.statement, params).mappings()]
        names = [column[0] for column in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        cursor.close()
        return rows

    def scalar(self, connection: Connection, params: Mapping[str, Any]) -> Any:
        """The first column of the first row, or None."""
        cursor = self._cursor(connection, params)
        if cursor is None:
            straight = self._postgres_direct(connection, params)
            if straight is not None:
                return _asyncpg(connection, straight, params, "fetchval")
            return connection.execute(self.statement, params).scalar()
        found = cursor.fetchone()
        cursor.close()
        return None if found is None else found[0]

    def rowcount(self, connection: Connection, params: Mapping[str, Any]) -> int:
        """Runs a statement without rows (UPDATE, DELETE, INSERT); the rows it changed."""
        cursor = self._cursor(connection, params)
        if cursor is None:
            straight = self._postgres_direct(connection, params)
            if straight is not None:
                # The command tag: "UPDATE 3", "DELETE 0", "INSERT 0 1".
                tag: str = _asyncpg(connection, straight, params, "execute")
                return int(tag.rsplit(" ", 1)[-1])
            return connection.execute(self.statement, params).rowcount
        count = cursor.rowcount
        cursor.close()
        return count

    def many(self, connection: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Runs the statement once a row (all with the same parameter names)."""
        if not rows:
            return
        direct = self._prepare(connection, rows[0])
        if direct is None:
            connection.execute(self.statement, list(rows))
            return
        values = [_values(direct, row) for row in rows]
        try:
            _driver(connection).executemany(direct.sql, values).close()
        except sqlite3.Error as error:
            raise _wrapped(direct, values, error) from error

    def direct_on(self, connection: Connection, params: Mapping[str, Any]) -> bool:
        """Whether these parameters run straight on the driver on this connection."""
        return (
            self._prepare(connection, params) is not None
            or self._postgres_direct(connection, params) is not None
        )

    def _postgres_direct(self, connection: Connection, params: Mapping[str, Any]) -> _Direct | None:
        """The asyncpg form of the statement, on PostgreSQL in autocommit; None otherwise."""
        dialect = connection.dialect
        if dialect.name != "postgresql" or dialect.driver != "asyncpg":
            return None
        if connection.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            return None  # in a transaction: SQLAlchemy's adapter begins it
        return self._compiled(self._postgres, dialect, params)

    def _cursor(self, connection: Connection, params: Mapping[str, Any]) -> sqlite3.Cursor | None:
        direct = self._prepare(connection, params)
        if direct is None:
            return None
        values = _values(direct, params)
        try:
            return _driver(connection).execute(direct.sql, values)
        except sqlite3.Error as error:
            raise _wrapped(direct, values, error) from error

    def _prepare(self, connection: Connection, params: Mapping[str, Any]) -> _Direct | None:
        dialect = connection.dialect
        if dialect.name != "sqlite":
            return None
        return self._compiled(self._direct, dialect, params)

    def _compiled(
        self,
        cache: dict[tuple[str, ...], _Direct | None],
        dialect: Dialect,
        params: Mapping[str, Any],
    ) -> _Direct | None:
        key = tuple(params)
        try:
            return cache[key]
        except KeyError:
            direct = cache[key] = _compile(self.statement, dialect, key)
            return direct


def _compile(statement: Any, dialect: Dialect, keys: tuple[str, ...]) -> _Direct | None:
    compiled: Any = statement.compile(dialect=dialect, column_keys=list(keys))
    names = compiled.positiontup
    if (
        names is None
        or "__[POSTCOMPILE_" in compiled.string
        or compiled.literal_execute_params
        or compiled.post_compile_params
        # Python-side column defaults, computed by SQLAlchemy at each execution
        or compiled.insert_prefetch
        or compiled.update_prefetch
        or not _plain_results(compiled, dialect)
    ):
        return None
    processed = {name for name in names if compiled._bind_processors.get(name) is not None}
    floats = {name for name in processed if isinstance(compiled.binds[name].type, Float)}
    if processed - floats:
        return None
    fixed = {
        name: bind.value
        for name, bind in compiled.binds.items()
        if name not in keys and not bind.required and bind.callable is None
    }
    positions = tuple(i for i, name in enumerate(names) if name in floats)
    return _Direct(compiled.string, tuple(names), fixed, positions)


def _plain_results(compiled: Any, dialect: Dialect) -> bool:
    """Whether every result column comes back from the driver as it should be returned."""
    for column in compiled._result_columns:
        column_type = column[3]
        if dialect.name == "postgresql" and isinstance(column_type, Float):
            # asyncpg returns a float for FLOAT (double precision); only NUMERIC, which
            # comes back as a Decimal, needs SQLAlchemy's processing.
            if column_type.asdecimal:
                return False
            continue
        if column_type._cached_result_processor(dialect, None) is not None:
            return False
    return True


def _values(direct: _Direct, params: Mapping[str, Any]) -> list[Any]:
    # C-speed lookups: this runs for every statement of every message.
    given = {**direct.fixed, **params} if direct.fixed else params
    try:
        values = list(map(given.__getitem__, direct.names))
    except KeyError as missing:
        raise KeyError(f"a value is required for the bind parameter {missing}") from None
    for position in direct.floats:
        value = values[position]
        if value is not None:
            values[position] = float(value)
    return values


def _wrapped(direct: _Direct, values: Any, error: sqlite3.Error) -> Exception:
    """The driver's error as SQLAlchemy raises it (IntegrityError, OperationalError, ...):
    callers catch those, whichever path ran the statement."""
    wrapped: Exception = DBAPIError.instance(direct.sql, values, error, sqlite3.Error)
    return wrapped


def _asyncpg(
    connection: Connection, direct: _Direct, params: Mapping[str, Any], method: str
) -> Any:
    """``asyncpg.Connection.<method>(sql, *values)``, from the greenlet the statement runs in."""
    values = _values(direct, params)
    driver: Any = connection.connection.driver_connection
    try:
        result = await_only(getattr(driver, method)(direct.sql, *values))
    except Exception as error:
        raise _wrapped_asyncpg(connection, direct, values, error) from error
    mark_ran(connection)
    return result


def _wrapped_asyncpg(
    connection: Connection, direct: _Direct, values: list[Any], error: Exception
) -> Exception:
    """asyncpg's error as SQLAlchemy raises it for a statement it runs itself: translated
    by its asyncpg adapter (a unique violation is an IntegrityError, a closed connection
    an InterfaceError), and, when the connection is gone, with the connection invalidated
    (the pool drops it) and ``connection_invalidated`` set."""
    dialect = connection.dialect
    dbapi: Any = dialect.loaded_dbapi
    adapted: Any = connection.connection.dbapi_connection
    try:
        adapted._handle_exception(error)  # raises the DB-API form of the error
    except dbapi.Error as translated:
        dbapi_error = translated
    except Exception as other:  # not one the adapter knows: as it came
        return other
    disconnect = bool(dialect.is_disconnect(dbapi_error, adapted, None))
    if disconnect:
        connection.invalidate(dbapi_error)
    wrapped: Exception = DBAPIError.instance(
        direct.sql,
        values,
        dbapi_error,
        dbapi.Error,
        connection_invalidated=disconnect,
        dialect=dialect,
    )
    return wrapped


def _driver(connection: Connection) -> sqlite3.Connection:
    # pysqlite's DB-API connection is sqlite3's own: the pool's plain attribute, not the
    # driver_connection properties (four calls a statement, a sixth of this module's).
    driver: sqlite3.Connection = connection.connection.dbapi_connection  # type: ignore[assignment]  # sqlite only here
    return driver


def _as_dict(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    return {column[0]: value for column, value in zip(cursor.description, row, strict=True)}


__all__ = ["Prepared"]

"""Rows of a statement, fetched with a limit, and rendered as the compact table the model reads."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection

CELL_CHARS = 200


@dataclasses.dataclass(frozen=True, slots=True)
class QueryResult:
    columns: list[str]
    rows: list[Sequence[Any]]
    more: bool
    rowcount: int


def fetch(connection: Connection, sql: str, limit: int, stream: bool) -> QueryResult:
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
        rows: list[Sequence[Any]] = [tuple(row) for row in result.fetchmany(limit + 1)]
        return QueryResult(columns, rows[:limit], len(rows) > limit, len(rows))
    finally:
        result.close()


def cell(value: Any, width: int = CELL_CHARS) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(bytes(value))} bytes>"
    text = str(value).replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    text = text.replace("\t", " ").replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def render_table(result: QueryResult, *, max_rows: int, max_chars: int) -> str:
    """Header, rows and a footer that says how many rows there are and what was cut."""
    lines = [" | ".join(cell(name, 80) for name in result.columns)]
    lines.append("-" * min(len(lines[0]), 80))
    used = sum(len(line) + 1 for line in lines)
    shown = 0
    for row in result.rows:
        line = " | ".join(cell(value) for value in row)
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


__all__ = ["CELL_CHARS", "QueryResult", "cell", "fetch", "render_table"]

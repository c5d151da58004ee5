"""Spreadsheets as Markdown tables: Excel (.xlsx, every sheet, openpyxl) and CSV/TSV.

openpyxl reads in read-only mode, streaming each sheet's XML rather than building every cell
in memory, with ``data_only`` so a formula shows the value Excel last computed (what a person
sees), not ``=SUM(B2:B9)``. A sheet's declared dimensions are dropped (``reset_dimensions``): a
hostile or sloppy file can claim A1:XFD1048576 and openpyxl would pad every row to 16,384
cells. Columns past ``MAX_COLUMNS`` are left out with a remark (noticed when the column right
after the cap has something in it: each row is read only that wide, which bounds the work per
row whatever the file claims); empty rows are skipped.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Sequence
from typing import Any

from bot.media.extraction import Budget, Extraction, cell_text, markdown_table

__all__ = ["MAX_COLUMNS", "read_csv", "read_xlsx"]

# A Markdown table wider than this is unreadable for a model and a person alike.
MAX_COLUMNS = 100
_DELIMITERS = (",", ";", "\t", "|")


def read_xlsx(data: bytes, budget: Budget) -> Extraction:
    import openpyxl

    workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        sheets = list(workbook.worksheets)
        result = Extraction(unit="sheet", units_total=len(sheets))
        for number, sheet in enumerate(sheets, start=1):
            result.sections.append(_sheet(sheet, budget, result))
            if budget.spent and number < len(sheets):
                result.complete = False
                break
    finally:
        workbook.close()
    if not any("\n|" in section for section in result.sections):
        result.sections = []
        result.empty_hint = f"[no text: the workbook's {len(sheets)} sheets are empty]"
    return result


def _sheet(sheet: Any, budget: Budget, result: Extraction) -> str:
    hidden = " (hidden)" if getattr(sheet, "sheet_state", "visible") != "visible" else ""
    heading = f"## Sheet: {sheet.title}{hidden}"
    budget.take(heading)
    if hasattr(sheet, "reset_dimensions"):
        sheet.reset_dimensions()
    rows: list[list[str]] = []
    wide = False
    # One column past the cap is read only to learn whether anything is there.
    for values in sheet.iter_rows(values_only=True, max_col=MAX_COLUMNS + 1):
        if values.count(None) == len(values):
            if budget.expired:  # a million of them must end too
                result.complete = False
                break
            continue  # the gaps openpyxl fills between rows: a million of them must be cheap
        cells = [_value(value) for value in values]
        wide = wide or any(cells[MAX_COLUMNS:])
        cells = cells[:MAX_COLUMNS]
        if not any(cells):
            if budget.expired:
                result.complete = False
                break
            continue
        rows.append(cells)
        # Counted as rendered, without the padding to the cap that _trim_columns drops.
        if not budget.take(" | ".join(cells[: _last_used(cells) + 1])):
            result.complete = False
            break
    if wide:
        result.remarks.append(f"sheet {sheet.title!r}: columns after the {MAX_COLUMNS}th left out")
    table = markdown_table(_trim_columns(rows))
    return f"{heading}\n\n{table}" if table else f"{heading}\n\n(empty)"


def _value(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.15g}"
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat(" ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    return cell_text(value)


def _trim_columns(rows: list[list[str]]) -> list[list[str]]:
    """Drop the empty columns at the right, which padding to the cap left behind."""
    used = max((_last_used(row) for row in rows), default=-1)
    return [row[: used + 1] for row in rows]


def _last_used(row: list[str]) -> int:
    return max((i for i, cell in enumerate(row) if cell), default=-1)


def read_csv(text: str, *, tab_separated: bool) -> Extraction:
    """``text`` (already decoded) as one Markdown table; a text that is no table stays text."""
    delimiter = "\t" if tab_separated else _guess_delimiter(text)
    try:
        rows = _csv_rows(text, delimiter)
    except csv.Error:
        # An over-long field or stray quotes: still worth reading, just not as a table.
        return Extraction(sections=[text], remarks=["not a well-formed table, shown as text"])
    wide = any(len(row) > MAX_COLUMNS for row in rows)
    table = markdown_table([row[:MAX_COLUMNS] for row in rows])
    result = Extraction(sections=[table] if table else [], table_rows=max(len(rows) - 1, 0))
    if wide:
        result.remarks.append(f"columns after the {MAX_COLUMNS}th left out")
    return result


def _csv_rows(text: str, delimiter: str) -> list[list[str]]:
    rows: list[list[str]] = []
    for row in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter):
        cells = [cell_text(cell) for cell in row]
        if any(cells):
            rows.append(cells)
    return rows


def _guess_delimiter(text: str) -> str:
    """The candidate that splits the first lines most consistently; a comma when unsure.

    Not ``csv.Sniffer``: its regular expressions backtrack badly on hostile samples.
    """
    lines = [line for line in text[:65536].splitlines()[:20] if line.strip()]
    if not lines:
        return ","
    best, best_score = ",", 0
    for delimiter in _DELIMITERS:
        counts = [line.count(delimiter) for line in lines]
        score = counts[0] if _steady(counts) else 0
        if score > best_score:
            best, best_score = delimiter, score
    return best


def _steady(counts: Sequence[int]) -> bool:
    # The last line may be cut short; every other line must agree.
    body = counts[:-1] if len(counts) > 1 else counts
    return len(set(body)) == 1 and body[0] > 0

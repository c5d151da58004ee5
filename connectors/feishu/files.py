"""Sending a file into the conversation: text the model wrote, or a table as CSV or XLSX."""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import re
import unicodedata
from typing import Annotated, Literal

from pydantic import Field

from connectors.base import ToolError, action

from .common import stable_id
from .outbound import Cell, OutboundTools, Table, current_conversation, size_text

NAME_MAX_CHARS = 128
_NAME_MAX_BYTES = 255  # what most file systems take, so the file saves under its name
# Control, format (a right-to-left override makes "txt.exe" look like "exe.txt"), surrogate,
# private-use and unassigned characters, and line and paragraph separators.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_WINDOWS_RESERVED = frozenset('<>:"|?*')  # a name with these cannot be saved on Windows
_EXTENSION = re.compile(r"[A-Za-z0-9]{1,10}")
# Text written into one of these would not open as what its name says.
_BINARY_EXTENSIONS = frozenset(
    {
        *("xlsx", "xls", "docx", "doc", "pptx", "ppt", "pdf"),
        *("png", "jpg", "jpeg", "gif", "webp", "bmp", "mp3", "mp4", "opus", "wav"),
        *("zip", "gz", "tar", "7z", "rar", "exe", "dll"),
    }
)
# Excel runs a cell that starts with one of these as a formula, even from a CSV file.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_XLSX_ILLEGAL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")  # XML 1.0 cannot hold them
_XLSX_CELL_CHARS = 32_767  # Excel's most characters in a cell


class FileTools(OutboundTools):
    # No chat id argument: the run decides where the file goes (see .outbound).
    @action(side_effect="write", timeout=90.0)
    async def feishu_send_file(
        self,
        file_name: Annotated[str, Field(min_length=1, max_length=1000)],
        content: Annotated[str | None, Field(min_length=1)] = None,
        table: Table | None = None,
        format: Literal["csv", "xlsx"] | None = None,
    ) -> str:
        """Send a file into the current conversation (as a reply to the person's message),
        for them to download: give content (text such as Markdown, CSV, JSON or code) or a table
        (rendered as CSV or Excel). It goes only to this conversation.

        Args:
            file_name: A bare file name with an extension, e.g. "q3-report.md" or "orders.xlsx".
            content: The file's text, exactly as it should be saved (UTF-8).
            table: A table instead of content: {"columns": [...], "rows": [[...], ...]}.
            format: For a table: "csv" (UTF-8, opens in Excel) or "xlsx"; default from file_name.
        """
        name = check_file_name(file_name)
        if (content is None) == (table is None):
            raise ToolError("pass either content (text) or table, exactly one of them")
        where = current_conversation("feishu_send_file")
        self._client()  # unconfigured: say so before any rendering
        if content is not None:
            data = self._text_file(name, content)
        else:
            assert table is not None  # one of the two, checked above
            data = await self._table_file(name, table, format)
        self._check_size(len(data), name)
        key = await self._upload_file(data, name)
        digest = hashlib.sha256(data).hexdigest()
        # The same file for the same message is posted once, even when a run is retried.
        await self._post(
            where, "file", {"file_key": key}, stable_id("file", where.message_id, name, digest)
        )
        return f"Sent {name} ({size_text(len(data))}) to the conversation."

    def _text_file(self, name: str, content: str) -> bytes:
        extension = name.rpartition(".")[2].lower()
        if extension in _BINARY_EXTENSIONS:
            raise ToolError(
                f"a .{extension} file cannot be written from text: give a table with "
                'format "xlsx" for a spreadsheet, or name a text file (.md, .txt, .csv, ...)'
            )
        return content.encode("utf-8", "replace")  # a lone surrogate becomes "?"

    async def _table_file(self, name: str, table: Table, format: str | None) -> bytes:
        extension = name.rpartition(".")[2].lower()
        kind = format or extension
        if kind not in ("csv", "xlsx"):
            raise ToolError(
                'a table is sent as CSV or Excel: pass format "csv" or "xlsx", and a '
                "file_name ending in .csv or .xlsx"
            )
        if extension != kind:
            raise ToolError(f"file_name {name!r} must end in .{kind} for a {kind} file")
        cap = self.settings.send_table_max_rows
        if len(table.rows) > cap:
            raise ToolError(
                f"the table has {len(table.rows)} rows; at most {cap} can be sent as a file. "
                "Nothing was sent."
            )
        # XLSX for many rows takes seconds of CPU: off the event loop.
        render = csv_bytes if kind == "csv" else xlsx_bytes
        return await asyncio.to_thread(render, table)


def check_file_name(raw: str) -> str:
    """``raw`` as a bare file name with an extension, or a ToolError saying what is wrong.

    It is shown to people and saved by their Feishu clients under this name: no folders,
    no hidden or control characters, nothing Windows refuses, a sensible length.
    """
    if not raw.strip():
        raise ToolError("file_name is empty: give a name like report.md")
    if "/" in raw or "\\" in raw:
        raise ToolError(f"file_name {raw!r} must be a bare name, without folders or / or \\")
    if any(unicodedata.category(c) in _UNSAFE_CATEGORIES for c in raw):
        raise ToolError("file_name must not hold control characters, line breaks or invisible ones")
    if reserved := sorted(set(raw) & _WINDOWS_RESERVED):
        raise ToolError(f"file_name must not hold any of {' '.join(reserved)}")
    name = raw.strip()
    if name.startswith("."):
        raise ToolError(f"file_name {name!r} must not start with a dot")
    if len(name) > NAME_MAX_CHARS or len(name.encode("utf-8")) > _NAME_MAX_BYTES:
        raise ToolError(f"file_name is too long: at most {NAME_MAX_CHARS} characters")
    stem, dot, extension = name.rpartition(".")
    if not dot or not stem.strip() or not _EXTENSION.fullmatch(extension):
        raise ToolError(
            f"file_name {name!r} needs an extension of letters or digits, like report.md or "
            "data.csv"
        )
    return name


def csv_bytes(table: Table) -> bytes:
    """The table as CSV: UTF-8 with a byte-order mark, or Excel shows Chinese as mojibake."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([_csv_cell(column) for column in table.columns])
    for row in table.rows:
        writer.writerow([_csv_cell(cell) for cell in row])
    return out.getvalue().encode("utf-8-sig")


def _csv_cell(cell: Cell) -> str:
    if cell is None:
        return ""
    if isinstance(cell, bool):
        return "TRUE" if cell else "FALSE"
    if not isinstance(cell, str):
        return str(cell)
    # Text from a tool result may be an attacker's "=HYPERLINK(...)": the quote makes
    # Excel show it as text. A number written as text ("-5") is no formula: kept as is.
    if cell.startswith(_FORMULA_START) and not _is_number(cell):
        return "'" + cell
    return cell


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def xlsx_bytes(table: Table) -> bytes:
    """The table as one Excel sheet, every text cell stored as text, never as a formula."""
    from openpyxl import Workbook  # only needed here; a sizeable import
    from openpyxl.cell import WriteOnlyCell

    workbook = Workbook(write_only=True)
    sheet = workbook.create_sheet("Sheet1")

    def cells(values: list[Cell] | list[str]) -> list[WriteOnlyCell]:
        row = []
        for value in values:
            if isinstance(value, str):
                cell = WriteOnlyCell(sheet, value=_XLSX_ILLEGAL.sub("", value)[:_XLSX_CELL_CHARS])
                cell.data_type = "s"  # openpyxl makes "=..." a formula otherwise
            else:
                cell = WriteOnlyCell(sheet, value=value)
            row.append(cell)
        return row

    sheet.append(cells(table.columns))
    for values in table.rows:
        sheet.append(cells(values))
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


__all__ = ["NAME_MAX_CHARS", "FileTools", "check_file_name", "csv_bytes", "xlsx_bytes"]

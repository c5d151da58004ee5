"""Feishu Base (bitable): searching a table's records and adding one; cells read as text."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, tzinfo
from typing import Annotated, Any, Literal

from lark_oapi.api.bitable.v1 import (
    AppTableRecord,
    Condition,
    CreateAppTableRecordRequest,
    FilterInfo,
    GetAppRequest,
    SearchAppTableRecordRequest,
    SearchAppTableRecordRequestBody,
    Sort,
)
from pydantic import BaseModel, ConfigDict, Field

from connectors.base import ToolError, action

from .audience import current_audience
from .common import WorkspaceTools, clip, items_of, more_hint, object_of, stable_id
from .docs import not_shared
from .shares import is_token
from .times import format_time

_CELL_CHARS = 200
_BASE_URL = re.compile(r"/base/([A-Za-z0-9]+)")
_FIELDS_HELP = (
    'Column name to value, e.g. {"Name": "Ship v2", "Points": 3}. Values by column type: '
    "text: a string; number: a number; single select: the option's name; multi select: "
    "a list of names; date: epoch milliseconds; checkbox: true/false; person: "
    '[{"id": "ou_..."}]; link: {"link": url, "text": label}'
)


class BitableCondition(BaseModel):
    """One Base filter condition, as Feishu's record search takes it."""

    model_config = ConfigDict(extra="forbid")

    field_name: str = Field(description="Column name, exactly as in the table")
    operator: Literal[
        "is",
        "isNot",
        "contains",
        "doesNotContain",
        "isEmpty",
        "isNotEmpty",
        "isGreater",
        "isGreaterEqual",
        "isLess",
        "isLessEqual",
    ] = "is"
    value: list[str] = Field(
        default_factory=list,
        description='Values as strings; dates: ["ExactDate", "<epoch ms>"], or ["Today"]',
    )


class BitableTools(WorkspaceTools):
    # The app reads and writes only the Bases it was added to. It reads one for a run only
    # when its audience may open it (shares.py), and never one with advanced permissions,
    # whose per-role rules on tables and rows no app-token call reveals.

    @action(side_effect="read")
    async def feishu_search_bitable_records(
        self,
        app_token: Annotated[str, Field(min_length=1)],
        table_id: Annotated[str, Field(min_length=1)],
        conditions: list[BitableCondition] | None = None,
        conjunction: Literal["and", "or"] = "and",
        field_names: list[str] | None = None,
        sort_field: str | None = None,
        sort_desc: bool = False,
        view_id: str | None = None,
        limit: Annotated[int | None, Field(ge=1, le=100)] = None,
        page_token: str | None = None,
    ) -> str:
        """Find records in a Feishu Base (bitable) table, optionally filtered and sorted.
        The app must have been added to the Base, and the Base shared with the asker (in
        a group chat: with this chat). Date columns show as dates.

        Args:
            app_token: The Base's app_token (bascn...), or the Base URL.
            table_id: The table's id (tbl...).
            conditions: Filters: [{"field_name": "Status", "operator": "is", "value": ["Done"]}].
            conjunction: "and": every condition must hold; "or": any.
            field_names: Only these columns in the result.
            sort_field: Sort by this column.
            sort_desc: Sort descending.
            view_id: Read through this view (ignored by Feishu when filtering or sorting).
            limit: The most records to return (default: the configured page size).
            page_token: From a previous result's "more" line, to continue.
        """
        audience = current_audience("Searching a Base")
        base = _base_token(app_token)
        if not is_token(base) or not is_token(table_id):
            raise ToolError("app_token and table_id are letters and digits (or give the Base URL)")
        if not await self._shares.audience_may_open(audience, "bitable", base):
            raise ToolError(not_shared(audience, f"Base {base}"))
        await self._refuse_advanced(base)
        body = _search_body(conditions, conjunction, field_names, sort_field, sort_desc, view_id)
        request = (
            SearchAppTableRecordRequest.builder()
            .app_token(base)
            .table_id(table_id)
            .user_id_type(self.settings.user_id_type)
            .page_size(limit or self.settings.page_size)
            .request_body(body)
        )
        if page_token:
            request.page_token(page_token)
        data = await self._data("bitable.record.search", request.build(), "Searching records")
        return self._render_records(table_id, data)

    @action(side_effect="write")
    async def feishu_create_bitable_record(
        self,
        app_token: Annotated[str, Field(min_length=1)],
        table_id: Annotated[str, Field(min_length=1)],
        fields: Annotated[dict[str, Any], Field(min_length=1, description=_FIELDS_HELP)],
    ) -> str:
        """Add a record (row) to a Feishu Base (bitable) table the app was added to.

        Args:
            app_token: The Base's app_token (bascn...), or the Base URL.
            table_id: The table's id (tbl...).
        """
        app_token = _base_token(app_token)
        request = (
            CreateAppTableRecordRequest.builder()
            .app_token(app_token)
            .table_id(table_id)
            .user_id_type(self.settings.user_id_type)
            .client_token(stable_id("record", app_token, table_id, fields))
            .request_body(AppTableRecord.builder().fields(fields).build())
            .build()
        )
        data = await self._data("bitable.record.create", request, "Creating the record")
        record = object_of(data, "record")
        written = _fields_text(record.get("fields") or fields, self._tz)
        return f"Created record {record.get('record_id')} in table {table_id}: {written}"

    async def _refuse_advanced(self, base: str) -> None:
        request = GetAppRequest.builder().app_token(base).build()
        data = await self._data("bitable.app.get", request, "Reading the Base's settings")
        if object_of(data, "app").get("is_advanced") is True:
            raise ToolError(
                f"Base {base} uses advanced permissions (who sees which tables and rows is "
                "set per role inside the Base), which the bot cannot check for anyone as the "
                "app. Nothing was read. Open the Base in Feishu yourself."
            )

    def _render_records(self, table_id: str, data: dict[str, Any]) -> str:
        records = items_of(data)
        if not records:
            return f"No records in table {table_id} match."
        total = data.get("total")
        count = f"{len(records)} of {total}" if isinstance(total, int) else str(len(records))
        lines = [f"Records in table {table_id} ({count}):"]
        for record in records:
            fields = _fields_text(record.get("fields"), self._tz)
            lines.append(f"- {record.get('record_id')} · {fields}")
        lines += more_hint(data)
        return "\n".join(lines)


def _search_body(
    conditions: list[BitableCondition] | None,
    conjunction: str,
    field_names: list[str] | None,
    sort_field: str | None,
    sort_desc: bool,
    view_id: str | None,
) -> SearchAppTableRecordRequestBody:
    body = SearchAppTableRecordRequestBody.builder().automatic_fields(False)
    if view_id:
        body.view_id(view_id)
    if field_names:
        body.field_names(field_names)
    if sort_field:
        body.sort([Sort.builder().field_name(sort_field).desc(sort_desc).build()])
    if conditions:
        body.filter(
            FilterInfo.builder()
            .conjunction(conjunction)
            .conditions(
                [
                    Condition.builder()
                    .field_name(c.field_name)
                    .operator(c.operator)
                    .value(c.value)
                    .build()
                    for c in conditions
                ]
            )
            .build()
        )
    return body.build()


def _base_token(value: str) -> str:
    match = _BASE_URL.search(value)
    return match.group(1) if match else value.strip()


def _fields_text(fields: Any, zone: tzinfo) -> str:
    if not isinstance(fields, dict) or not fields:
        return "(no values)"
    parts = []
    for name, value in fields.items():
        text = cell_text(value, zone)
        if text:
            parts.append(f"{name}: {clip(text, _CELL_CHARS)}")
    return " · ".join(parts) or "(no values)"


def cell_text(value: Any, zone: tzinfo) -> str:
    """One Base cell as text, whatever its column type."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and 10**12 <= value < 10**13:  # a date column: epoch ms
        return format_time(datetime.fromtimestamp(value / 1000, UTC), zone)
    if isinstance(value, int | float):
        return f"{value:g}"
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        if value and all(isinstance(item, dict) and "type" in item for item in value):
            # Rich text: segments of one text (plain, @mention, link) read as one string.
            return "".join(str(item.get("text") or "") for item in value)
        return ", ".join(filter(None, (cell_text(item, zone) for item in value)))
    if isinstance(value, dict):
        if "link" in value:
            return f"{value.get('text') or value['link']} ({value['link']})"
        for key in ("text", "name", "full_address", "en_name", "id"):
            if value.get(key):
                return str(value[key])
        if "link_record_ids" in value:
            return ", ".join(map(str, value["link_record_ids"]))
        if "value" in value:  # formula and lookup columns
            return cell_text(value["value"], zone)
    return json.dumps(value, ensure_ascii=False)


__all__ = ["BitableCondition", "BitableTools", "cell_text"]

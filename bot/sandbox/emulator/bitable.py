"""Base (bitable): the Base itself (``is_advanced``), record search (view, fields, sort,
and/or filters) and record create, with each column type's checks; Base answers its errors
with HTTP 200."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .params import paged, user_id_type
from .wire import DEFAULT_MSGS, FakeError, request_body
from .workspace_state import WorkspaceState

BITABLE_FIELD_TYPES = {  # field type name -> Feishu's numeric type (wire ``type``)
    "text": 1,
    "number": 2,
    "single_select": 3,
    "multi_select": 4,
    "date": 5,
    "checkbox": 7,
    "person": 11,
    "url": 15,
}
BITABLE_OPERATORS = (
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
)


@dataclass
class FakeBitableTable:
    table_id: str
    name: str
    fields: dict[str, str]  # field name -> type name (BITABLE_FIELD_TYPES)
    records: list[dict[str, Any]] = field(default_factory=list)  # {record_id, fields}
    options: dict[str, list[str]] = field(default_factory=dict)  # select field -> options
    views: list[str] = field(default_factory=lambda: ["vewFakeGrid"])
    client_tokens: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class FakeBitableApp:
    app_token: str
    name: str
    tables: dict[str, FakeBitableTable] = field(default_factory=dict)
    app_has_access: bool = True
    # Its collaborators, as for a document (``FakeDocument``): people, group chats, owner.
    readers: set[str] = field(default_factory=set)
    chats: set[str] = field(default_factory=set)
    owner_open_id: str = ""
    # Advanced permissions: who sees which tables and rows is set per role in the Base.
    is_advanced: bool = False
    revision: int = 1

    def to_wire(self) -> dict[str, Any]:
        """The ``app`` of ``GET /bitable/v1/apps/:app_token``."""
        return {
            "app_token": self.app_token,
            "name": self.name,
            "revision": self.revision,
            "is_advanced": self.is_advanced,
            "time_zone": "Asia/Shanghai",
        }


class BitableApi(WorkspaceState):
    def add_record(self, app_token: str, table_id: str, fields: dict[str, Any]) -> str:
        table = self.bitables[app_token].tables[table_id]
        record_id = f"rec{secrets.token_hex(5)}"
        table.records.append({"record_id": record_id, "fields": dict(fields)})
        return record_id

    async def _search_records(self, request: web.Request) -> web.Response:
        table = self._table(request)
        body = request_body(request)
        view = body.get("view_id")
        if view and view not in table.views:
            raise _base_error(1254042)
        names = body.get("field_names")
        if names is not None and (
            not isinstance(names, list) or any(n not in table.fields for n in names)
        ):
            raise _base_error(1254024)
        records = [r for r in table.records if _record_matches(table, r, body.get("filter"))]
        for sort in reversed(body.get("sort") or []):
            name = sort.get("field_name") if isinstance(sort, dict) else None
            if name not in table.fields:
                raise _base_error(1254016)
            field_name: str = name
            records.sort(
                key=lambda r: _sort_key(r["fields"].get(field_name)),
                reverse=bool(sort.get("desc")),
            )
        page = paged(records, request, default=20, maximum=500)
        page["items"] = [
            {"record_id": r["record_id"], "fields": self._record_out(table, r["fields"], names)}
            for r in page["items"]
        ]
        page["total"] = len(records)
        return self._fake._ok(page)

    async def _create_record(self, request: web.Request) -> web.Response:
        table = self._table(request)
        id_type = user_id_type(request)
        token = request.query.get("client_token")
        if token and token in table.client_tokens:
            return self._fake._ok({"record": table.client_tokens[token]})
        fields = request_body(request).get("fields")
        if not isinstance(fields, dict) or not fields:
            raise _base_error(1254001, "WrongRequestBody: fields must be a non-empty object")
        for name, value in fields.items():
            kind = table.fields.get(name)
            if kind is None:
                raise _base_error(1254045, f"FieldNameNotFound: {name}")
            self._check_field(table, name, kind, value, id_type)
        record = {"record_id": f"rec{secrets.token_hex(5)}", "fields": dict(fields)}
        table.records.append(record)
        if token:
            table.client_tokens[token] = record
        return self._fake._ok({"record": record})

    def _check_field(
        self, table: FakeBitableTable, name: str, kind: str, value: Any, id_type: str
    ) -> None:
        checks: dict[str, tuple[int, Callable[[Any], bool]]] = {
            "text": (1254060, lambda v: isinstance(v, str)),
            "number": (1254061, lambda v: isinstance(v, int | float) and not isinstance(v, bool)),
            "single_select": (1254062, lambda v: isinstance(v, str)),
            "multi_select": (
                1254063,
                lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
            ),
            "date": (1254064, lambda v: isinstance(v, int) and not isinstance(v, bool)),
            "checkbox": (1254065, lambda v: isinstance(v, bool)),
            "person": (
                1254066,
                lambda v: (
                    isinstance(v, list)
                    and all(
                        isinstance(p, dict) and self._user(str(p.get("id")), id_type) for p in v
                    )
                ),
            ),
            "url": (1254068, lambda v: isinstance(v, dict) and isinstance(v.get("link"), str)),
        }
        code, ok = checks[kind]
        if not ok(value):
            raise _base_error(code, f"{DEFAULT_MSGS.get(code, 'ConvFail')}: field {name!r}")
        if kind in ("single_select", "multi_select"):  # new options are added, as Feishu does
            options = table.options.setdefault(name, [])
            options.extend(
                v for v in ([value] if isinstance(value, str) else value) if v not in options
            )

    def _record_out(
        self, table: FakeBitableTable, fields: dict[str, Any], names: Any
    ) -> dict[str, Any]:
        """Field values as search answers them: text as segments, people with names."""
        out: dict[str, Any] = {}
        for name, value in fields.items():
            if names is not None and name not in names:
                continue
            kind = table.fields.get(name)
            if kind == "text":
                value = [{"type": "text", "text": value}]
            elif kind == "person":
                people = [self._user(str(p.get("id")), "open_id") for p in value]
                value = [
                    {"id": u.open_id, "name": u.name, "en_name": u.en_name, "email": u.email}
                    for u in people
                    if u is not None
                ]
            out[name] = value
        return out

    async def _get_app(self, request: web.Request) -> web.Response:
        return self._fake._ok({"app": self._app(request).to_wire()})

    def _app(self, request: web.Request) -> FakeBitableApp:
        app = self.bitables.get(request.match_info["app_token"])
        if app is None:
            raise _base_error(1254040)
        if not app.app_has_access:
            raise FakeError(91403, http_status=403)
        return app

    def _table(self, request: web.Request) -> FakeBitableTable:
        table = self._app(request).tables.get(request.match_info["table_id"])
        if table is None:
            raise _base_error(1254041)
        return table


def _base_error(code: int, msg: str | None = None) -> FakeError:
    # Base answers its own errors with HTTP 200 (see the error table of its API pages).
    return FakeError(code, msg, http_status=200)


def _record_matches(table: FakeBitableTable, record: Mapping[str, Any], spec: Any) -> bool:
    """Whether ``record`` passes a search ``filter`` (checked as Feishu checks it)."""
    if spec is None:
        return True
    if not isinstance(spec, dict) or spec.get("conjunction", "and") not in ("and", "or"):
        raise _base_error(1254018, "InvalidFilter: conjunction must be and/or")
    results = []
    for condition in spec.get("conditions") or []:
        if not isinstance(condition, dict) or condition.get("operator") not in BITABLE_OPERATORS:
            raise _base_error(1254018, f"InvalidFilter: {condition!r}")
        name = condition.get("field_name")
        if name not in table.fields:
            raise _base_error(1254045, f"FieldNameNotFound: {name}")
        values = condition.get("value") or []
        if not isinstance(values, list) or len(values) > 10:
            raise _base_error(1254018, "InvalidFilter: value must be a list of at most 10")
        stored = record["fields"].get(name)
        results.append(_matches(table.fields[name], stored, condition["operator"], values))
    if not results:
        return True
    return any(results) if spec.get("conjunction") == "or" else all(results)


def _matches(kind: str, stored: Any, operator: str, values: list[Any]) -> bool:
    empty = stored in (None, "", [], False) if kind != "number" else stored is None
    if operator in ("isEmpty", "isNotEmpty"):
        return empty == (operator == "isEmpty")
    if operator.startswith("doesNot") or operator == "isNot":
        positive = {"isNot": "is", "doesNotContain": "contains"}[operator]
        return not _matches(kind, stored, positive, values)
    target = str(values[0]) if values else ""
    if kind in ("number", "date") or operator.startswith(("isGreater", "isLess")):
        if kind == "date" and target in ("ExactDate",) and len(values) > 1:
            target = str(values[1])
        try:
            left, right = float(stored if stored is not None else "nan"), float(target)
        except (TypeError, ValueError):
            raise _base_error(1254018, f"InvalidFilter: {target!r} is not a number") from None
        compare = {
            "is": left == right,
            "contains": left == right,
            "isGreater": left > right,
            "isGreaterEqual": left >= right,
            "isLess": left < right,
            "isLessEqual": left <= right,
        }
        return compare[operator]
    if kind == "checkbox":
        return bool(stored) == (target.lower() == "true")
    texts = _comparable(stored)
    wanted = [str(v) for v in values]
    if operator == "is":
        return (
            sorted(texts) == sorted(wanted) if kind == "multi_select" else texts[:1] == wanted[:1]
        )
    return any(w.lower() in t.lower() for w in wanted for t in texts)


def _comparable(stored: Any) -> list[str]:
    if isinstance(stored, list):
        return [str(p.get("id", "")) if isinstance(p, dict) else str(p) for p in stored]
    if isinstance(stored, dict):
        return [str(stored.get("text", "")), str(stored.get("link", ""))]
    return [] if stored is None else [str(stored)]


def _sort_key(value: Any) -> tuple[int, Any]:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, value)
    return (1, json.dumps(value, ensure_ascii=False, sort_keys=True))

"""Query parameters and paging of the list endpoints, checked as Feishu checks them."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from .wire import FakeError

PAGE_PREFIX = "fake_page_"


def user_id_type(request: web.Request) -> str:
    id_type = request.query.get("user_id_type", "open_id")
    if id_type not in ("open_id", "user_id", "union_id"):
        raise FakeError(99992402, "field validation failed: user_id_type")
    return id_type


def query_int(
    request: web.Request, name: str, default: int, low: int = 0, high: int = 2**62
) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise FakeError(99992402, f"field validation failed: {name}") from None
    if not low <= value <= high:
        raise FakeError(99992402, f"field validation failed: {name} must be in [{low}, {high}]")
    return value


def query_bool(request: web.Request, name: str) -> bool | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    # Feishu parses booleans like Go's strconv.ParseBool; the SDK sends str(True) == "True".
    if raw not in ("true", "True", "1", "false", "False", "0"):
        raise FakeError(99992402, f"field validation failed: {name}")
    return raw in ("true", "True", "1")


def paged(
    items: list[Any], request: web.Request, *, default: int, maximum: int, minimum: int = 1
) -> dict[str, Any]:
    """One page of ``items`` with Feishu's ``has_more`` / ``page_token`` (an offset here)."""
    size = query_int(request, "page_size", default, minimum, maximum)
    token = request.query.get("page_token") or ""
    start = 0
    if token:
        offset = token.removeprefix(PAGE_PREFIX)
        if not token.startswith(PAGE_PREFIX) or not offset.isdigit():
            raise FakeError(99992402, "field validation failed: page_token")
        start = int(offset)
    more = start + size < len(items)
    return {
        "items": items[start : start + size],
        "has_more": more,
        "page_token": f"{PAGE_PREFIX}{start + size}" if more else "",
    }

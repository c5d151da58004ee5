"""What every emulated family shares on the wire: Feishu's error, the recorded request and
its parsed body, the tenant key and the applink domain."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from bot.feishu.errors import CODES

TENANT_KEY = "fake_tenant"
APPLINK = "https://applink.feishu.cn"

# Feishu's own msg for each code, from the one table the client reads too.
DEFAULT_MSGS = {code: entry.msg for code, entry in CODES.items() if entry.msg}


class FakeError(Exception):
    """Raised by a handler; rendered as Feishu's error envelope by the middleware."""

    def __init__(
        self,
        code: int,
        msg: str | None = None,
        *,
        http_status: int = 400,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(code)
        self.code = code
        self.msg = msg
        self.http_status = http_status
        # More of Feishu's ``error`` object, e.g. ``permission_violations`` on scope errors.
        self.extra = extra


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: Mapping[str, str]  # case-insensitive
    body: bytes
    json: Any  # the parsed body, or None when it is empty or not JSON
    peer: tuple[str, int] | None = None  # the client's address: shows connection reuse
    time: float = 0.0  # time.monotonic() when it arrived


RECORDED = web.RequestKey("recorded", RecordedRequest)


def request_body(request: web.Request) -> dict[str, Any]:
    parsed = request[RECORDED].json
    if not isinstance(parsed, dict):
        raise FakeError(99992402, "field validation failed: body is not a JSON object")
    return parsed


def parse_json(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def now_ms() -> int:
    return int(time.time() * 1000)

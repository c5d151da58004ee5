"""Injected faults, delays, holds and missing scopes: the errors a test makes Feishu's
gateway answer with, on any route, before the token is checked."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .core import EmulatorCore


@dataclass
class FaultRule:
    """A fault or a delay for the requests that match ``method`` and ``path``."""

    method: str
    path: re.Pattern[str]
    times: int | None  # None: forever
    delay: float = 0.0
    code: int | None = None  # None: a delay only
    http_status: int = 400
    msg: str | None = None
    raw_body: str | bytes | None = None
    error: Mapping[str, Any] | None = None
    body: re.Pattern[str] | None = None  # None: any body

    def matches(self, method: str, path: str, body: bytes = b"") -> bool:
        if self.times is not None and self.times <= 0:
            return False
        if self.body is not None and self.body.search(body.decode("utf-8", "replace")) is None:
            return False
        return self.method in ("*", method) and self.path.search(path) is not None

    def consume(self) -> None:
        if self.times is not None:
            self.times -= 1


@dataclass(eq=False)
class Hold:
    """Requests kept unanswered until the test says (``FaultControls.hold``): so that a
    test acts while a call is in flight, knowing it is, instead of guessing with a delay."""

    rule: FaultRule
    arrived: asyncio.Event = field(default_factory=asyncio.Event)  # one is held now
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        """Answer the held requests (and any later match) normally."""
        self.released.set()


class FaultControls(EmulatorCore):
    def fail(
        self,
        method: str,
        path_regex: str,
        code: int,
        *,
        http_status: int = 400,
        msg: str | None = None,
        times: int | None = 1,
        delay: float = 0.0,
        raw_body: str | bytes | None = None,
        error: Mapping[str, Any] | None = None,
    ) -> None:
        """Answer the next ``times`` matching requests with this error (see the module doc)."""
        self._faults.append(
            FaultRule(
                method.upper(),
                re.compile(path_regex),
                times,
                delay,
                code,
                http_status,
                msg,
                raw_body,
                error,
            )
        )

    def deny_scopes(
        self, method: str, path_regex: str, scopes: list[str], *, times: int | None = None
    ) -> None:
        """Answer matching requests as Feishu does when the app lacks ``scopes`` (any one
        of them would do): 99991672, the scopes in the message and in
        ``error.permission_violations``, and the console link to grant them."""
        names = ", ".join(scopes)
        link = (
            f"https://open.feishu.cn/app/{self.app_id}/auth?q={','.join(scopes)}"
            "&op_from=openapi&token_type=tenant"
        )
        msg = (
            f"Access denied. One of the following scopes is required: [{names}]."
            f"应用尚未开通所需的应用身份权限：[{names}]，点击链接申请并开通任一权限即可：{link}"
        )
        violations = [{"type": "action_scope_required", "subject": name} for name in scopes]
        error = {
            "permission_violations": violations,
            "helps": [{"url": link, "description": "Troubleshooting suggestions"}],
        }
        self.fail(method, path_regex, 99991672, msg=msg, times=times, error=error)

    def slow(
        self,
        method: str,
        path_regex: str,
        seconds: float,
        *,
        times: int | None = None,
        body_regex: str | None = None,
    ) -> None:
        """Delay matching requests (those whose body matches ``body_regex`` too, when
        given) by ``seconds``, then answer them normally."""
        body = re.compile(body_regex) if body_regex is not None else None
        self._slow.append(
            FaultRule(method.upper(), re.compile(path_regex), times, seconds, body=body)
        )

    def hold(self, method: str, path_regex: str, *, times: int | None = 1) -> Hold:
        """Keep the next ``times`` matching requests waiting, unanswered, until
        ``release()`` (or until the server stops); ``arrived`` is set once one waits."""
        held = Hold(FaultRule(method.upper(), re.compile(path_regex), times))
        self._holds.append(held)
        return held

    async def _wait_if_held(self, method: str, path: str, body: bytes) -> None:
        held = next((h for h in self._holds if h.rule.matches(method, path, body)), None)
        if held is None or held.released.is_set():
            return
        held.rule.consume()
        held.arrived.set()
        waits = [asyncio.ensure_future(e.wait()) for e in (held.released, self._closing)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    def _fault_response(self, fault: FaultRule) -> web.Response:
        if fault.raw_body is not None:
            return web.Response(
                status=fault.http_status, body=_bytes(fault.raw_body), content_type="text/html"
            )
        assert fault.code is not None
        return self._error(fault.code, fault.msg, http_status=fault.http_status, extra=fault.error)


def _bytes(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode()

"""A fake of Feishu's long-connection gateway, speaking the real protocol.

Two routes, served on 127.0.0.1 by their own aiohttp app (``async with
FakeLongConnection() as gateway``; point ``FeishuConfig.domain`` at ``gateway.domain``),
or mounted on the fake OpenAPI server so one domain serves both
(``fake_feishu.add_routes(gateway.routes(), public=True)`` before it starts):

    POST /callback/ws/endpoint   ``{"AppID", "AppSecret"}`` (any Content-Type) ->
         ``{"code": 0, "data": {"URL": "ws://<host>/callback/ws/fake?device_id=d1&
         service_id=7&access_key=…&ticket=…", "ClientConfig": client_config}}``. Wrong
         credentials answer code 10003 (app id) / 10014 (secret), as the token endpoint
         does (what Feishu answers here is not documented). ``fail_endpoint`` queues
         other refusals.
    GET  /callback/ws/fake       the WebSocket. Every message is a binary
         ``pbbp2.Frame``, built and parsed with lark-oapi's generated class, so the bytes
         are the SDK's own. A ping (control frame, header type=ping) is answered with a
         pong carrying ``client_config`` (or ``pong_config``) as JSON, unless pings are
         stalled. Data frames the client sends back are its answers to pushed frames
         (``responses``).
         ``refuse_handshake`` answers the upgrade with Feishu's handshake-* headers.

Pushing, as Feishu does: ``push_event(envelope, parts=n)`` sends a data frame of type
"event" (message events and card.action.trigger alike), split over ``n`` frames with
sum/seq headers; ``push_payload`` sends any bytes; ``push_raw`` sends bytes that need
not be a frame. Each returns the frame's message_id; ``response_to(message_id)`` waits
for the client's answer (:class:`ClientAnswer`: code, decoded ``data``, headers).

Faults: ``drop()`` closes the current connection (``abrupt=True``: kills the socket
without a close frame), ``stall()`` stops answering pings on it (a half-dead
connection; the next one answers again), ``fail_endpoint(times, code)``,
``refuse_handshake(times, status)``.
"""

from __future__ import annotations

import base64
import itertools
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web
from lark_oapi.ws.pb.pbbp2_pb2 import Frame

from support.servers import AppServer
from support.waiting import wait_until

ENDPOINT_PATH = "/callback/ws/endpoint"
WS_PATH = "/callback/ws/fake"
SERVICE_ID = 7
# Feishu's defaults (seconds); tests shrink them.
FEISHU_CLIENT_CONFIG = {
    "ReconnectCount": -1,
    "ReconnectInterval": 120,
    "ReconnectNonce": 30,
    "PingInterval": 120,
}


@dataclass(frozen=True)
class ClientAnswer:
    """The client's response to a pushed data frame."""

    message_id: str
    code: int | None
    data: Any  # the base64 "data" decoded as JSON, or None
    payload: dict[str, Any]  # the response JSON as sent
    headers: dict[str, str]
    connection: int  # which connection (0-based) carried it
    at: float  # time.monotonic()


@dataclass
class Connection:
    index: int
    ws: web.WebSocketResponse
    request: web.Request
    device_id: str
    app_id: str = ""  # the app whose credentials opened it
    answer_pings: bool = True
    pings: int = 0
    pongs: int = 0
    closed: bool = False
    ping_times: list[float] = field(default_factory=list)


@dataclass
class _Fault:
    times: int
    code: int
    msg: str
    http_status: int
    auth_code: int = 0


class FakeLongConnection(AppServer):
    not_started = "is not started (or is mounted elsewhere)"

    def __init__(
        self,
        app_id: str = "cli_test",
        app_secret: str = "secret",
        *,
        client_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.app_id = app_id
        self.app_secret = app_secret
        # Other apps of the tenant that may connect too (app_id -> secret); each connection
        # is the app's whose credentials opened it (``push_event(app_id=...)``).
        self.other_apps: dict[str, str] = {}
        self.client_config: dict[str, Any] = dict(client_config or FEISHU_CLIENT_CONFIG)
        self.pong_config: dict[str, Any] | None = None  # what pongs carry; None: client_config
        self.endpoint_requests: list[dict[str, Any]] = []
        self.endpoint_times: list[float] = []
        self.connections: list[Connection] = []
        self.responses: list[ClientAnswer] = []
        self.unexpected: list[Any] = []  # text messages, undecodable frames
        self._endpoint_faults: list[_Fault] = []
        self._handshake_faults: list[_Fault] = []
        self._ids = itertools.count(1)

    # -- serving ------------------------------------------------------------------------

    def routes(self) -> list[tuple[str, str, Any]]:
        return [("POST", ENDPOINT_PATH, self._endpoint), ("GET", WS_PATH, self._ws)]

    def make_app(self) -> web.Application:
        app = web.Application()
        for method, path, handler in self.routes():
            app.router.add_route(method, path, handler)
        return app

    async def stop(self) -> None:
        for connection in self.connections:
            if not connection.closed:
                await connection.ws.close(code=WSCloseCode.GOING_AWAY)
        await super().stop()

    @property
    def domain(self) -> str:
        return self.url

    # -- controls -----------------------------------------------------------------------

    def fail_endpoint(
        self, times: int = 1, *, code: int = 1, msg: str = "system busy", http_status: int = 200
    ) -> None:
        """Refuse the next ``times`` endpoint requests with ``code``."""
        self._endpoint_faults.append(_Fault(times, code, msg, http_status))

    def refuse_handshake(
        self, times: int = 1, *, status: int = 514, msg: str = "auth failed", auth_code: int = 0
    ) -> None:
        """Answer the next ``times`` upgrades with HTTP 403 and Feishu's handshake headers."""
        self._handshake_faults.append(_Fault(times, status, msg, 403, auth_code))

    @property
    def current(self) -> Connection:
        return self.current_of(self.app_id)

    def current_of(self, app_id: str) -> Connection:
        """The newest open connection of ``app_id``."""
        open_ = [c for c in self.connections if not c.closed and c.app_id == app_id]
        if not open_:
            raise AssertionError(f"no open long connection of {app_id}")
        return open_[-1]

    def open_connections(self) -> int:
        return sum(1 for c in self.connections if not c.closed)

    async def drop(self, *, abrupt: bool = False) -> None:
        """Close the current connection as a server restart does (or kill its socket)."""
        connection = self.current
        if abrupt and connection.request.transport is not None:
            connection.request.transport.abort()
        else:
            await connection.ws.close(code=WSCloseCode.GOING_AWAY, message=b"server restart")

    def stall(self) -> None:
        """Stop answering pings on the current connection; it stays open."""
        self.current.answer_pings = False

    async def push_event(
        self, envelope: Mapping[str, Any], *, parts: int = 1, app_id: str | None = None
    ) -> str:
        """Send an envelope as Feishu does: a data frame of type "event", on the connection
        of ``app_id`` (the main app's by default)."""
        payload = json.dumps(envelope, ensure_ascii=False, separators=(",", ":")).encode()
        return await self.push_payload(payload, parts=parts, app_id=app_id)

    async def push_payload(
        self,
        payload: bytes,
        *,
        parts: int = 1,
        message_type: str = "event",
        headers: Mapping[str, str] | None = None,
        app_id: str | None = None,
    ) -> str:
        """Send ``payload`` in ``parts`` data frames; returns their message_id."""
        message_id = f"msg_{uuid.uuid4().hex[:12]}"
        size = -(-len(payload) // parts) if payload else 0
        chunks = [payload[i * size : (i + 1) * size] for i in range(parts)]
        connection = self.current_of(app_id or self.app_id)
        for seq, chunk in enumerate(chunks):
            frame = Frame(SeqID=next(self._ids), LogID=next(self._ids), service=SERVICE_ID)
            frame.method = 1  # data
            fields = {
                "type": message_type,
                "message_id": message_id,
                "trace_id": f"trace_{message_id}",
                "sum": str(parts),
                "seq": str(seq),
                **(headers or {}),
            }
            for key, value in fields.items():
                frame.headers.add(key=key, value=value)
            frame.payload = chunk
            await connection.ws.send_bytes(frame.SerializeToString())
        return message_id

    async def push_raw(self, data: bytes) -> None:
        """Send bytes as they are (e.g. not a frame at all)."""
        await self.current.ws.send_bytes(data)

    async def response_to(self, message_id: str, *, within: float = 5.0) -> ClientAnswer:
        await wait_until(lambda: any(r.message_id == message_id for r in self.responses), within)
        return next(r for r in self.responses if r.message_id == message_id)

    async def wait_connections(
        self, count: int, *, within: float = 5.0, app_id: str | None = None
    ) -> Connection:
        """Wait until ``count`` connections were opened and the last of ``app_id`` (the
        main app by default) is still open."""
        app = app_id or self.app_id

        def opened() -> bool:
            mine = [c for c in self.connections if c.app_id == app]
            return len(self.connections) >= count and any(not c.closed for c in mine)

        await wait_until(opened, within)
        return self.current_of(app)

    # -- handlers -----------------------------------------------------------------------

    async def _endpoint(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        self.endpoint_requests.append(body if isinstance(body, dict) else {})
        self.endpoint_times.append(time.monotonic())
        fault = _take(self._endpoint_faults)
        if fault is not None:
            return web.json_response(
                {"code": fault.code, "msg": fault.msg, "data": None}, status=fault.http_status
            )
        secrets = {self.app_id: self.app_secret, **self.other_apps}
        app_id = body.get("AppID")
        if app_id not in secrets:
            return web.json_response({"code": 10003, "msg": "invalid param: app_id"})
        if body.get("AppSecret") != secrets[app_id]:
            return web.json_response({"code": 10014, "msg": "app secret invalid"})
        # Which app a connection is: in its device id (Feishu's is opaque too).
        device_id = f"d{len(self.endpoint_requests)}-{app_id}"
        url = (
            f"{'wss' if request.secure else 'ws'}://{request.host}{WS_PATH}?device_id={device_id}&service_id={SERVICE_ID}"
            f"&access_key=ak_{uuid.uuid4().hex[:8]}&ticket=tk_{uuid.uuid4().hex[:8]}"
        )
        data = {"URL": url, "ClientConfig": self.client_config}
        return web.json_response({"code": 0, "msg": "ok", "data": data})

    async def _ws(self, request: web.Request) -> web.StreamResponse:
        fault = _take(self._handshake_faults)
        if fault is not None:
            headers = {
                "handshake-status": str(fault.code),
                "handshake-msg": fault.msg,
                "handshake-autherrcode": str(fault.auth_code),
            }
            return web.Response(status=fault.http_status, headers=headers)
        if "device_id" not in request.query or "service_id" not in request.query:
            return web.Response(status=400, text="missing device_id or service_id")
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        device_id = request.query["device_id"]
        app_id = device_id.partition("-")[2] or self.app_id
        connection = Connection(len(self.connections), ws, request, device_id, app_id)
        self.connections.append(connection)
        try:
            async for message in ws:
                if message.type is WSMsgType.BINARY:
                    await self._on_frame(connection, message.data)
                else:
                    self.unexpected.append(message.data)
        finally:
            connection.closed = True
        return ws

    async def _on_frame(self, connection: Connection, data: bytes) -> None:
        try:
            frame = Frame.FromString(data)
        except Exception:
            self.unexpected.append(data)
            return
        headers = {h.key: h.value for h in frame.headers}
        if frame.method == 0:
            if headers.get("type") == "ping":
                connection.pings += 1
                connection.ping_times.append(time.monotonic())
                if connection.answer_pings:
                    await connection.ws.send_bytes(self._pong(frame.service))
                    connection.pongs += 1
            return
        try:
            payload = json.loads(frame.payload)
        except ValueError:
            payload = {"unreadable": frame.payload.decode(errors="replace")}
        encoded = payload.get("data") if isinstance(payload, dict) else None
        decoded = json.loads(base64.b64decode(encoded)) if encoded else None
        self.responses.append(
            ClientAnswer(
                message_id=headers.get("message_id", ""),
                code=payload.get("code") if isinstance(payload, dict) else None,
                data=decoded,
                payload=payload if isinstance(payload, dict) else {},
                headers=headers,
                connection=connection.index,
                at=time.monotonic(),
            )
        )

    def _pong(self, service: int) -> bytes:
        frame = Frame(SeqID=0, LogID=0, service=service, method=0)
        frame.headers.add(key="type", value="pong")
        config = self.client_config if self.pong_config is None else self.pong_config
        frame.payload = json.dumps(config).encode()
        return frame.SerializeToString()


def _take(faults: list[_Fault]) -> _Fault | None:
    while faults and faults[0].times <= 0:
        faults.pop(0)
    if not faults:
        return None
    faults[0].times -= 1
    return faults[0]

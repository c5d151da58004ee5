"""A fake Feishu OpenAPI server for tests, speaking the real wire formats.

It is a real HTTP server (aiohttp on 127.0.0.1, a free port), so the code under test
runs through lark-oapi and its HTTP stack unchanged::

    async with FakeFeishu() as fake:                 # app_id "cli_test", secret "secret"
        config = FeishuConfig(app_id=fake.app_id, app_secret=fake.app_secret,
                              verification_token="vt", encrypt_key="ek", domain=fake.domain)
        async with FeishuClient(config) as client:
            await client.reply_message("om_1", msg_type="text", content='{"text":"hi"}')
        assert fake.sent[0].content == {"text": "hi"}
        assert fake.sent[0].reply_to == "om_1"

Endpoints (research/lark-sdk.md §3; bodies parsed whatever the Content-Type says)
    POST  /open-apis/auth/v3/tenant_access_token/internal   flat ``{code,msg,tenant_access_token,
          expire}``; a wrong secret answers 10014, a wrong app id 10003. Like Feishu, the
          current token is handed out again (with its remaining ``expire``) until less
          than ``token_reissue_below`` seconds (30 min) are left; then a new one is issued.
          Tokens live ``token_ttl`` seconds (7200); ``revoke_tokens()`` kills them all.
    GET   /open-apis/bot/v3/info                            ``{code,msg,bot:{...}}`` (no ``data``)
    POST  /open-apis/im/v1/messages?receive_id_type=...     create; ``data`` = the message
    POST  /open-apis/im/v1/messages/{id}/reply              reply; sets root/parent/thread
    PATCH /open-apis/im/v1/messages/{id}                    interactive cards only (230054)
    GET   /open-apis/im/v1/messages/{id}                    ``data.items[0]`` = the message
    Every route but the token one wants ``Authorization: Bearer <valid token>``: missing
    answers 99991661, unknown/expired/revoked 99991663 (HTTP 400). Unknown routes get
    aiohttp's plain-text 404, as a real gateway answers with a non-JSON page.

Messages
    ``uuid`` is honoured: a second create/reply with a uuid already seen returns the first
    message and adds nothing. Content must be a JSON string (else 230001); over 150 KB
    (text) or 30 KB (post, interactive) answers 230025. A reply to a message in a topic
    (``thread_id``) stays in it; ``reply_in_thread`` on a plain message starts a topic.
    Replying to an id the fake has never seen creates that parent on the fly, in chat
    ``default_chat_id``, unless ``strict = True`` (then 230001). Seed real parents with
    ``add_message(...)`` or ``add_event_message(envelope)`` (an envelope from
    ``fakes.feishu_push.message_event``) to get their chat and thread right.

Inspection
    ``requests``        every request, in order (:class:`RecordedRequest`: method, path,
                        query, headers (case-insensitive), body bytes, json, peer address)
    ``sent``            the messages the bot created or replied, in order (:class:`FakeMessage`:
                        chat_id, reply_to, root_id, parent_id, thread_id, msg_type, content
                        (decoded JSON), uuid, reply_in_thread, history of patched contents)
    ``message_by_id``   every message the fake knows, seeded ones included
    ``count(method, path_regex)``, ``token_requests``

Faults and delays
    ``fail(method, path_regex, code, *, http_status=400, msg=None, times=1, delay=0.0,
    raw_body=None, error=None)`` answers the next ``times`` matching requests (``None``:
    all of them) with ``{"code", "msg", "error": {"log_id", **error}}`` and an
    ``X-Tt-Logid`` header, after ``delay`` seconds; HTTP 429 also carries the
    ``x-ogw-ratelimit-*`` headers. ``raw_body`` sends that text instead, as ``text/html``
    (a gateway's 502 page). ``slow(method, path_regex, seconds, times=None)`` delays
    matching requests, which are then answered normally. ``method`` may be ``"*"``;
    ``path_regex`` is searched in the path (no query). Faults are checked before the
    token, as a gateway would.

Extending (CardKit and more)
    Add a handler method, register it in ``_routes()``, read the parsed body from
    ``_body(request)``, answer with ``_ok(data)`` and refuse with ``raise FakeError(code)``
    (the middleware renders it, with a log id). Keep state in dataclasses on the fake.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import secrets
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
TENANT_KEY = "fake_tenant"
RECEIVE_ID_TYPES = ("open_id", "user_id", "union_id", "email", "chat_id")
MSG_TYPES = (
    "text",
    "post",
    "image",
    "file",
    "audio",
    "media",
    "sticker",
    "interactive",
    "share_chat",
    "share_user",
)
# Content limits in bytes, per msg_type (Feishu: text 150 KB, post and cards 30 KB).
CONTENT_LIMITS = {"text": 150 * 1024, "post": 30 * 1024, "interactive": 30 * 1024}

DEFAULT_MSGS = {
    10003: "invalid param",
    10014: "app secret invalid",
    11310: "card content is invalid",
    99991400: "request trigger frequency limit",
    99991661: "Missing access token for authorization. Please make a request with token attached.",
    99991663: "Invalid access token for authorization. Please make a request with token attached.",
    99991668: "Invalid access token for authorization. Please make a request with token attached.",
    99991672: "Access denied. One of the following scopes is required: "
    "[im:message, im:message:send_as_bot].",
    99992402: "field validation failed",
    200850: "card streaming timeout",
    230001: "Your request contains an invalid request parameter.",
    230011: "The message was withdrawn.",
    230020: "This operation triggers the frequency limit.",
    230025: "The length of the message content reaches its limit.",
    230031: "The message is too old to be edited.",
    230054: "This type of message can't be updated.",
    230099: "Failed to create card content.",
    230110: "Action unavailable as the message has been deleted.",
    231003: "The message is not found, maybe not exist or deleted.",
    300309: "streaming mode is closed",
    300317: "sequence number compare failed",
}


class FakeError(Exception):
    """Raised by a handler; rendered as Feishu's error envelope by the middleware."""

    def __init__(self, code: int, msg: str | None = None, *, http_status: int = 400) -> None:
        super().__init__(code)
        self.code = code
        self.msg = msg
        self.http_status = http_status


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: Mapping[str, str]  # case-insensitive
    body: bytes
    json: Any  # the parsed body, or None when it is empty or not JSON
    peer: tuple[str, int] | None = None  # the client's address: shows connection reuse


_RECORDED = web.RequestKey("recorded", RecordedRequest)


@dataclass
class FakeMessage:
    message_id: str
    chat_id: str
    msg_type: str
    content: Any  # decoded JSON
    sender_id: str  # app id for the bot's messages, open_id for users'
    sender_type: str  # "app" or "user"
    create_time_ms: int
    chat_type: str = "p2p"
    reply_to: str | None = None  # the message_id in the reply URL
    root_id: str | None = None
    parent_id: str | None = None
    thread_id: str | None = None
    uuid: str | None = None
    reply_in_thread: bool = False
    deleted: bool = False
    updated: bool = False
    update_time_ms: int = 0
    history: list[Any] = field(default_factory=list)  # contents before each patch

    def to_wire(self) -> dict[str, Any]:
        """The message object of Feishu's IM API (empty ids left out, times as strings)."""
        wire: dict[str, Any] = {
            "message_id": self.message_id,
            "msg_type": self.msg_type,
            "create_time": str(self.create_time_ms),
            "update_time": str(self.update_time_ms or self.create_time_ms),
            "deleted": self.deleted,
            "updated": self.updated,
            "chat_id": self.chat_id,
            "sender": {
                "id": self.sender_id,
                "id_type": "app_id" if self.sender_type == "app" else "open_id",
                "sender_type": self.sender_type,
                "tenant_key": TENANT_KEY,
            },
            "body": {"content": json.dumps(self.content, ensure_ascii=False)},
            "mentions": [],
            "upper_message_id": "",
        }
        for name in ("root_id", "parent_id", "thread_id"):
            if getattr(self, name):
                wire[name] = getattr(self, name)
        return wire


@dataclass
class _Rule:
    method: str
    path: re.Pattern[str]
    times: int | None  # None: forever
    delay: float = 0.0
    code: int | None = None  # None: a delay only
    http_status: int = 400
    msg: str | None = None
    raw_body: str | bytes | None = None
    error: Mapping[str, Any] | None = None

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        return self.method in ("*", method) and self.path.search(path) is not None

    def consume(self) -> None:
        if self.times is not None:
            self.times -= 1


class FakeFeishu:
    def __init__(
        self,
        app_id: str = "cli_test",
        app_secret: str = "secret",
        bot_open_id: str = "ou_bot",
        bot_name: str = "larkgate",
    ) -> None:
        self.app_id = app_id
        self.app_secret = app_secret
        self.bot_open_id = bot_open_id
        self.bot_name = bot_name
        self.token_ttl = 7200.0
        self.token_reissue_below = 1800.0
        self.strict = False
        self.default_chat_id = "oc_fake_chat"

        self.requests: list[RecordedRequest] = []
        self.sent: list[FakeMessage] = []
        self.message_by_id: dict[str, FakeMessage] = {}
        self._by_uuid: dict[str, FakeMessage] = {}
        self._tokens: dict[str, float] = {}  # token -> expiry (time.monotonic)
        self._current_token: str | None = None
        self._faults: list[_Rule] = []
        self._slow: list[_Rule] = []
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._closing = asyncio.Event()

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> Self:
        app = web.Application(middlewares=[self._middleware], client_max_size=4 * 1024 * 1024)
        for method, path, handler in self._routes():
            app.router.add_route(method, path, handler)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        return self

    async def stop(self) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def domain(self) -> str:
        if self._port is None:
            raise RuntimeError("FakeFeishu is not started")
        return f"http://127.0.0.1:{self._port}"

    def _routes(self) -> list[tuple[str, str, Any]]:
        return [
            ("POST", TOKEN_PATH, self._tenant_token),
            ("GET", "/open-apis/bot/v3/info", self._bot_info),
            ("POST", "/open-apis/im/v1/messages", self._create_message),
            ("POST", "/open-apis/im/v1/messages/{message_id}/reply", self._reply_message),
            ("PATCH", "/open-apis/im/v1/messages/{message_id}", self._patch_message),
            ("GET", "/open-apis/im/v1/messages/{message_id}", self._get_message),
        ]

    # -- test controls --------------------------------------------------------------

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
            _Rule(
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

    def slow(self, method: str, path_regex: str, seconds: float, *, times: int | None = None):
        """Delay matching requests by ``seconds``, then answer them normally."""
        self._slow.append(_Rule(method.upper(), re.compile(path_regex), times, seconds))

    def revoke_tokens(self) -> None:
        """Invalidate every token issued so far; they now answer 99991663."""
        self._tokens.clear()
        self._current_token = None

    def add_message(
        self,
        message_id: str,
        *,
        chat_id: str,
        chat_type: str = "p2p",
        msg_type: str = "text",
        content: Any = None,
        sender_open_id: str = "ou_user",
        root_id: str | None = None,
        parent_id: str | None = None,
        thread_id: str | None = None,
    ) -> FakeMessage:
        """Seed a message a user sent, so replies to it land in the right chat and topic."""
        message = FakeMessage(
            message_id=message_id,
            chat_id=chat_id,
            chat_type=chat_type,
            msg_type=msg_type,
            content={"text": ""} if content is None else content,
            sender_id=sender_open_id,
            sender_type="user",
            create_time_ms=_now_ms(),
            root_id=root_id,
            parent_id=parent_id,
            thread_id=thread_id,
        )
        self.message_by_id[message_id] = message
        return message

    def add_event_message(self, envelope: Mapping[str, Any]) -> FakeMessage:
        """Seed the message of an ``im.message.receive_v1`` envelope."""
        event = envelope["event"]
        msg = event["message"]
        return self.add_message(
            msg["message_id"],
            chat_id=msg["chat_id"],
            chat_type=msg.get("chat_type", "p2p"),
            msg_type=msg.get("message_type", "text"),
            content=json.loads(msg.get("content") or "{}"),
            sender_open_id=event["sender"]["sender_id"]["open_id"],
            root_id=msg.get("root_id") or None,
            parent_id=msg.get("parent_id") or None,
            thread_id=msg.get("thread_id") or None,
        )

    def count(self, method: str, path_regex: str) -> int:
        pattern = re.compile(path_regex)
        return sum(
            1
            for r in self.requests
            if method.upper() in ("*", r.method) and pattern.search(r.path) is not None
        )

    @property
    def token_requests(self) -> int:
        return self.count("POST", re.escape(TOKEN_PATH))

    # -- middleware: record, faults, auth ---------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        raw = await request.read()
        recorded = RecordedRequest(
            method=request.method,
            path=request.path,
            query=dict(request.query),
            headers=CIMultiDictProxy(CIMultiDict(request.headers)),
            body=raw,
            json=_parse_json(raw),
            peer=request.transport.get_extra_info("peername") if request.transport else None,
        )
        self.requests.append(recorded)
        request[_RECORDED] = recorded
        for rule in self._slow:
            if rule.matches(request.method, request.path):
                rule.consume()
                await self._pause(rule.delay)
        fault = next((f for f in self._faults if f.matches(request.method, request.path)), None)
        if fault is not None:
            fault.consume()
            await self._pause(fault.delay)
            return self._fault_response(fault)
        try:
            if request.path != TOKEN_PATH:
                self._check_token(request)
            return await handler(request)
        except FakeError as exc:
            return self._error(exc.code, exc.msg, http_status=exc.http_status)

    def _check_token(self, request: web.Request) -> None:
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or not auth[len("Bearer ") :].strip():
            raise FakeError(99991661)
        expiry = self._tokens.get(auth[len("Bearer ") :].strip())
        if expiry is None or expiry <= time.monotonic():
            raise FakeError(99991663)

    def _fault_response(self, fault: _Rule) -> web.Response:
        if fault.raw_body is not None:
            return web.Response(
                status=fault.http_status, body=_bytes(fault.raw_body), content_type="text/html"
            )
        assert fault.code is not None
        return self._error(fault.code, fault.msg, http_status=fault.http_status, extra=fault.error)

    def _error(
        self,
        code: int,
        msg: str | None = None,
        *,
        http_status: int = 400,
        extra: Mapping[str, Any] | None = None,
    ) -> web.Response:
        log_id = self._log_id()
        headers = {"X-Tt-Logid": log_id}
        if http_status == 429:
            headers |= {"x-ogw-ratelimit-limit": "5", "x-ogw-ratelimit-reset": "1"}
        body = {
            "code": code,
            "msg": msg if msg is not None else DEFAULT_MSGS.get(code, f"fake error {code}"),
            "error": {"log_id": log_id, **(extra or {})},
        }
        return web.json_response(body, status=http_status, headers=headers)

    def _ok(self, data: Any = None, **top_level: Any) -> web.Response:
        body: dict[str, Any] = {"code": 0, "msg": "success"}
        if data is not None:
            body["data"] = data
        body.update(top_level)
        return web.json_response(body, headers={"X-Tt-Logid": self._log_id()})

    async def _pause(self, seconds: float) -> None:
        # Ends early when the server stops, so a test never waits on a long delay.
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), seconds)

    # -- handlers -------------------------------------------------------------------

    async def _tenant_token(self, request: web.Request) -> web.Response:
        body = _body(request)
        if body.get("app_id") != self.app_id:
            raise FakeError(10003)
        if body.get("app_secret") != self.app_secret:
            raise FakeError(10014)
        now = time.monotonic()
        token = self._current_token
        left = self._tokens.get(token, 0.0) - now if token else 0.0
        if token is None or left < self.token_reissue_below:
            token = "t-" + secrets.token_hex(16)
            self._tokens[token] = now + self.token_ttl
            self._current_token = token
            left = self.token_ttl
        # Flat body: no "data" envelope on this endpoint.
        return web.json_response(
            {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": int(left)}
        )

    async def _bot_info(self, request: web.Request) -> web.Response:
        bot = {
            "activate_status": 2,
            "app_name": self.bot_name,
            "avatar_url": "https://example.invalid/avatar.png",
            "ip_white_list": [],
            "open_id": self.bot_open_id,
        }
        return web.json_response({"code": 0, "msg": "ok", "bot": bot})

    async def _create_message(self, request: web.Request) -> web.Response:
        id_type = request.query.get("receive_id_type")
        if id_type not in RECEIVE_ID_TYPES:
            raise FakeError(99992402, "field validation failed: receive_id_type")
        body = _body(request)
        receive_id = body.get("receive_id")
        if not isinstance(receive_id, str) or not receive_id:
            raise FakeError(99992402, "field validation failed: receive_id")
        if (earlier := self._by_uuid.get(body.get("uuid") or "")) is not None:
            return self._ok(earlier.to_wire())
        msg_type, content = _message_content(body)
        chat_id = receive_id if id_type == "chat_id" else f"oc_p2p_{receive_id}"
        message = self._new_message(chat_id, msg_type, content, uuid=body.get("uuid"))
        return self._ok(message.to_wire())

    async def _reply_message(self, request: web.Request) -> web.Response:
        parent = self._target(request.match_info["message_id"], create=not self.strict)
        body = _body(request)
        if (earlier := self._by_uuid.get(body.get("uuid") or "")) is not None:
            return self._ok(earlier.to_wire())
        msg_type, content = _message_content(body)
        in_thread = bool(body.get("reply_in_thread"))
        root_id = parent.root_id or parent.message_id
        thread_id = parent.thread_id
        if thread_id is None and in_thread:
            thread_id = f"omt_fake_{next(self._ids):04d}"
            parent.thread_id = thread_id
        message = self._new_message(
            parent.chat_id,
            msg_type,
            content,
            uuid=body.get("uuid"),
            reply_to=parent.message_id,
            root_id=root_id,
            # Inside a topic the parent is always the topic's root.
            parent_id=root_id if thread_id else parent.message_id,
            thread_id=thread_id,
            reply_in_thread=in_thread,
            chat_type=parent.chat_type,
        )
        return self._ok(message.to_wire())

    async def _patch_message(self, request: web.Request) -> web.Response:
        message = self._target(request.match_info["message_id"], create=False)
        if message.msg_type != "interactive":
            raise FakeError(230054)
        body = _body(request)
        _, content = _message_content({"msg_type": "interactive", "content": body.get("content")})
        message.history.append(message.content)
        message.content = content
        message.updated = True
        message.update_time_ms = _now_ms()
        return self._ok({})

    async def _get_message(self, request: web.Request) -> web.Response:
        message = self._target(request.match_info["message_id"], create=False)
        return self._ok({"items": [message.to_wire()]})

    # -- state helpers --------------------------------------------------------------

    def _target(self, message_id: str, *, create: bool) -> FakeMessage:
        message = self.message_by_id.get(message_id)
        if message is None:
            if not create:
                raise FakeError(230001, f"fake: unknown message_id {message_id}")
            message = self.add_message(message_id, chat_id=self.default_chat_id)
        if message.deleted:
            raise FakeError(230011)
        return message

    def _new_message(self, chat_id: str, msg_type: str, content: Any, **fields: Any) -> FakeMessage:
        message = FakeMessage(
            message_id=f"om_fake_{next(self._ids):04d}",
            chat_id=chat_id,
            msg_type=msg_type,
            content=content,
            sender_id=self.app_id,
            sender_type="app",
            create_time_ms=_now_ms(),
            **fields,
        )
        self.message_by_id[message.message_id] = message
        self.sent.append(message)
        if message.uuid:
            self._by_uuid[message.uuid] = message
        return message

    def _log_id(self) -> str:
        return f"fake-log-{next(self._ids):06d}"


def _body(request: web.Request) -> dict[str, Any]:
    parsed = request[_RECORDED].json
    if not isinstance(parsed, dict):
        raise FakeError(99992402, "field validation failed: body is not a JSON object")
    return parsed


def _message_content(body: Mapping[str, Any]) -> tuple[str, Any]:
    """(msg_type, decoded content) of a create/reply/patch body, as Feishu validates them."""
    msg_type, raw = body.get("msg_type"), body.get("content")
    if msg_type not in MSG_TYPES:
        raise FakeError(230001, f"invalid msg_type {msg_type!r}")
    if not isinstance(raw, str):
        raise FakeError(230001, "content must be a JSON string")
    try:
        content = json.loads(raw)
    except ValueError:
        raise FakeError(230001, "content is not valid JSON") from None
    if not isinstance(content, dict):
        raise FakeError(230001, "content must be a JSON object")
    if len(raw.encode()) > CONTENT_LIMITS.get(msg_type, 150 * 1024):
        raise FakeError(230025)
    return msg_type, content


def _parse_json(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _bytes(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode()


def _now_ms() -> int:
    return int(time.time() * 1000)

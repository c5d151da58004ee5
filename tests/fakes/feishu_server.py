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
    PATCH /open-apis/im/v1/messages/{id}                    interactive cards only (230054);
          older than ``edit_window_s`` (14 days) answers 230031
    GET   /open-apis/im/v1/messages/{id}                    ``data.items[0]`` = the message
    POST  /open-apis/cardkit/v1/cards                       create a card entity; ``data.card_id``
    PUT   /open-apis/cardkit/v1/cards/{card_id}/elements/{element_id}/content   stream text
    PATCH /open-apis/cardkit/v1/cards/{card_id}/settings    ``config`` (streaming_mode, summary)
    PUT   /open-apis/cardkit/v1/cards/{card_id}             replace the whole card
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

CardKit (research/lark-sdk.md §2.5, §3 rows 10-13)
    Create takes ``{"type": "card_json", "data": "<card JSON>"}`` and checks, in order:
    valid JSON (200220), not empty (300307), ≤ ``card_size_limit`` bytes (30 KB, 200860),
    ``schema == "2.0"`` (300303), ``config.update_multi`` not false (300302), ≤ 200
    components (dicts with a ``tag`` under ``body``; 300305), unique ``element_id`` values
    (300301). Card ids look like Feishu's (``"7355..."``). Streaming is on when the card's
    ``config.streaming_mode`` is true, at creation or later through settings or update.
    Content, settings and update ("card ops") check, in order: the card exists (200740);
    the per-card rate limit (230020); the body; a ``uuid`` already used on this card for
    the same op and body answers success and changes nothing (another body: 200770);
    then per op:
      content   the element exists (300313) and is ``markdown``/``plain_text`` (300310);
                streaming is on (300309), and not older than ``stream_timeout_s`` (600 s;
                past it: 200850 once, then 300309); ``sequence`` > the card's last (300317);
                content is a string of 1..100000 characters (99992402).
      settings  ``settings`` is a JSON object string (99992402); ``sequence`` (300317);
                ``config`` keys are merged into the card's config (``streaming_mode``,
                ``summary``, ...); other top-level keys than ``config``/``card_link`` are
                ignored, like Feishu ignores a bare ``{"streaming_mode": false}``.
      update    ``{"card": {"type": "card_json", "data": str}}``, ``sequence`` (300317), then
                create's checks; the new card replaces the old, its config included.
    A refused op changes nothing (``last_sequence`` included). Sending an entity:
    create/reply with ``msg_type: "interactive"`` and content
    ``{"type": "card", "data": {"card_id": ...}}``. An unknown card or one already sent
    answers 230099 (a resend with the same message ``uuid`` returns the first message).
    Rate limit: a card op is refused with 230020 when ``card_ops_limit`` (10) ops were
    already admitted on that card within the last ``card_ops_window_s`` (1.0) seconds of
    ``clock`` (admitted = not refused by this limit; failures for other reasons count).
    Card times use ``clock``, ``time.monotonic`` unless given (``FakeFeishu(clock=...)``
    or set the attribute), so tests step time instead of sleeping. Tokens and message
    timestamps keep the real clocks.

Inspection
    ``requests``        every request, in order (:class:`RecordedRequest`: method, path,
                        query, headers (case-insensitive), body bytes, json, peer address)
    ``sent``            the messages the bot created or replied, in order (:class:`FakeMessage`:
                        chat_id, reply_to, root_id, parent_id, thread_id, msg_type, content
                        (decoded JSON), uuid, reply_in_thread, history of patched contents)
    ``message_by_id``   every message the fake knows, seeded ones included
    ``count(method, path_regex)``, ``token_requests``
    ``cards``           card_id → :class:`FakeCard`: ``card`` (the current card JSON, element
                        contents updated by content PUTs), ``last_sequence``,
                        ``streaming_mode``, ``summary``, ``message_id`` it was sent in,
                        ``timeline`` (:class:`CardOp`: time, op, sequence, element_id, text,
                        code; every op that reached the card, refused ones included), and
                        ``settings_history`` (each settings object as sent)
    ``card_text(card_id, element_id)``   the element's current text
    ``max_ops_per_second(card_id)``      the most card ops (content/settings/update, refused
                                         ones included) in any ``card_ops_window_s`` window
    ``rate_limited``    the card ops refused with 230020, in order
    A sent card message has ``card_id`` set (:class:`FakeMessage`).

Faults and delays
    ``fail(method, path_regex, code, *, http_status=400, msg=None, times=1, delay=0.0,
    raw_body=None, error=None)`` answers the next ``times`` matching requests (``None``:
    all of them) with ``{"code", "msg", "error": {"log_id", **error}}`` and an
    ``X-Tt-Logid`` header, after ``delay`` seconds; HTTP 429 also carries the
    ``x-ogw-ratelimit-*`` headers. ``raw_body`` sends that text instead, as ``text/html``
    (a gateway's 502 page). ``slow(method, path_regex, seconds, times=None)`` delays
    matching requests, which are then answered normally. ``method`` may be ``"*"``;
    ``path_regex`` is searched in the path (no query). Faults are checked before the
    token, as a gateway would, and work on every route, e.g.
    ``fail("PUT", r"/elements/.+/content$", 230020)``. An injected fault leaves no
    trace on the card (its timeline and sequence are untouched).

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
from collections.abc import Callable, Iterator, Mapping
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
CARD_ROUTE = "/open-apis/cardkit/v1/cards/{card_id}"
STREAMABLE_TAGS = ("markdown", "plain_text")
CARD_OPS = ("content", "settings", "update")  # the ops the per-card rate limit counts
MAX_CARD_COMPONENTS = 200
MAX_STREAM_CONTENT = 100_000

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
    200220: "card json is invalid",
    200740: "card not found",
    200770: "uuid conflict",
    200850: "card streaming timeout",
    200860: "card content exceeds the size limit",
    230001: "Your request contains an invalid request parameter.",
    230011: "The message was withdrawn.",
    230020: "This operation triggers the frequency limit.",
    230025: "The length of the message content reaches its limit.",
    230031: "The message is too old to be edited.",
    230054: "This type of message can't be updated.",
    230099: "Failed to create card content.",
    230110: "Action unavailable as the message has been deleted.",
    231003: "The message is not found, maybe not exist or deleted.",
    300301: "duplicate element_id",
    300302: "update_multi must be true",
    300303: "card schema must be 2.0",
    300305: "too many card components",
    300307: "card content is empty",
    300309: "streaming mode is closed",
    300310: "element type does not support streaming content",
    300313: "element not found",
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
    time: float = 0.0  # time.monotonic() when it arrived


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
    card_id: str | None = None  # set when the message carries a CardKit card entity

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
class CardOp:
    """One operation on a card entity, as the fake saw it."""

    time: float  # FakeFeishu.clock()
    op: str  # "create", "send", "content", "settings" or "update"
    sequence: int | None = None
    element_id: str | None = None
    text: str | None = None  # content: the element text; settings/update: the JSON sent
    code: int = 0  # 0 when applied, else the error code answered
    duplicate: bool = False  # a uuid resend, answered without effect


@dataclass
class FakeCard:
    card_id: str
    card: dict[str, Any]  # the current card JSON
    created_at: float
    last_sequence: int = 0
    streaming_mode: bool = False
    streaming_since: float | None = None
    message_id: str | None = None  # the message it was sent in
    timeline: list[CardOp] = field(default_factory=list)
    settings_history: list[dict[str, Any]] = field(default_factory=list)
    uuids: dict[tuple[str, str], str] = field(default_factory=dict)  # (op, uuid) -> body

    @property
    def summary(self) -> str | None:
        summary = (self.card.get("config") or {}).get("summary")
        return summary.get("content") if isinstance(summary, dict) else None

    def element(self, element_id: str) -> dict[str, Any] | None:
        return next((n for n in _walk(self.card) if n.get("element_id") == element_id), None)

    def set_streaming(self, on: bool, now: float) -> None:
        self.streaming_mode = on
        self.streaming_since = now if on else None


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
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app_id = app_id
        self.app_secret = app_secret
        self.bot_open_id = bot_open_id
        self.bot_name = bot_name
        self.token_ttl = 7200.0
        self.token_reissue_below = 1800.0
        self.strict = False
        self.default_chat_id = "oc_fake_chat"
        self.edit_window_s = 14 * 24 * 3600.0
        self.clock = clock  # card timings only
        self.card_ops_limit = 10
        self.card_ops_window_s = 1.0
        self.stream_timeout_s: float | None = 600.0
        self.card_size_limit = 30 * 1024

        self.requests: list[RecordedRequest] = []
        self.sent: list[FakeMessage] = []
        self.message_by_id: dict[str, FakeMessage] = {}
        self._by_uuid: dict[str, FakeMessage] = {}
        self.cards: dict[str, FakeCard] = {}
        self.rate_limited: list[CardOp] = []
        self._card_ids = itertools.count(7355372766134157313)
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
            ("POST", "/open-apis/cardkit/v1/cards", self._create_card),
            ("PUT", CARD_ROUTE + "/elements/{element_id}/content", self._card_content),
            ("PATCH", CARD_ROUTE + "/settings", self._card_settings),
            ("PUT", CARD_ROUTE, self._update_card),
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
        create_time_ms: int | None = None,
    ) -> FakeMessage:
        """Seed a message a user sent, so replies to it land in the right chat and topic.

        ``create_time_ms`` (epoch ms, default now) makes an old message, e.g. for 230031.
        """
        message = FakeMessage(
            message_id=message_id,
            chat_id=chat_id,
            chat_type=chat_type,
            msg_type=msg_type,
            content={"text": ""} if content is None else content,
            sender_id=sender_open_id,
            sender_type="user",
            create_time_ms=_now_ms() if create_time_ms is None else create_time_ms,
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

    def card_text(self, card_id: str, element_id: str) -> str:
        """The current text of an element of a card entity (KeyError if there is none)."""
        element = self.cards[card_id].element(element_id)
        if element is None:
            raise KeyError(f"card {card_id} has no element {element_id!r}")
        return str(element.get("content", ""))

    def max_ops_per_second(self, card_id: str) -> int:
        """The most card ops on ``card_id`` that fell within one ``card_ops_window_s``."""
        times = sorted(op.time for op in self.cards[card_id].timeline if op.op in CARD_OPS)
        best, start = 0, 0
        for end, now in enumerate(times):
            while times[start] <= now - self.card_ops_window_s:
                start += 1
            best = max(best, end - start + 1)
        return best

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
            time=time.monotonic(),
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
        card = self._card_to_send(msg_type, content)
        chat_id = receive_id if id_type == "chat_id" else f"oc_p2p_{receive_id}"
        message = self._new_message(chat_id, msg_type, content, uuid=body.get("uuid"))
        self._mark_sent(card, message)
        return self._ok(message.to_wire())

    async def _reply_message(self, request: web.Request) -> web.Response:
        parent = self._target(request.match_info["message_id"], create=not self.strict)
        body = _body(request)
        if (earlier := self._by_uuid.get(body.get("uuid") or "")) is not None:
            return self._ok(earlier.to_wire())
        msg_type, content = _message_content(body)
        card = self._card_to_send(msg_type, content)
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
        self._mark_sent(card, message)
        return self._ok(message.to_wire())

    async def _patch_message(self, request: web.Request) -> web.Response:
        message = self._target(request.match_info["message_id"], create=False)
        if message.msg_type != "interactive":
            raise FakeError(230054)
        if _now_ms() - message.create_time_ms > self.edit_window_s * 1000:
            raise FakeError(230031)
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

    async def _create_card(self, request: web.Request) -> web.Response:
        body = _body(request)
        if body.get("type") != "card_json":
            raise FakeError(99992402, "field validation failed: type (the fake knows card_json)")
        card = self._parse_card(body.get("data"))
        now = self.clock()
        entity = FakeCard(card_id=str(next(self._card_ids)), card=card, created_at=now)
        entity.set_streaming(_streaming_in(card), now)
        entity.timeline.append(CardOp(now, "create", text=body["data"]))
        self.cards[entity.card_id] = entity
        return self._ok({"card_id": entity.card_id})

    async def _card_content(self, request: web.Request) -> web.Response:
        element_id = request.match_info["element_id"]

        def apply(card: FakeCard, body: dict[str, Any], op: CardOp) -> None:
            element = card.element(element_id)
            if element is None:
                raise FakeError(300313)
            if element.get("tag") not in STREAMABLE_TAGS:
                raise FakeError(300310)
            self._check_streaming(card, op.time)
            sequence = _next_sequence(card, body)
            content = body.get("content")
            if not isinstance(content, str) or not 1 <= len(content) <= MAX_STREAM_CONTENT:
                raise FakeError(99992402, "field validation failed: content")
            op.text = content
            element["content"] = content
            card.last_sequence = sequence

        return await self._card_op(request, "content", apply, element_id=element_id)

    async def _card_settings(self, request: web.Request) -> web.Response:
        def apply(card: FakeCard, body: dict[str, Any], op: CardOp) -> None:
            raw = body.get("settings")
            settings = _parse_json(raw.encode()) if isinstance(raw, str) else None
            if not isinstance(settings, dict):
                raise FakeError(99992402, "field validation failed: settings")
            config = settings.get("config")
            if config is not None and not isinstance(config, dict):
                raise FakeError(99992402, "field validation failed: settings.config")
            sequence = _next_sequence(card, body)
            op.text = raw
            if config and config.get("update_multi") is False:
                raise FakeError(300302)
            card.settings_history.append(settings)
            if config:
                card.card.setdefault("config", {}).update(config)
                if "streaming_mode" in config:
                    card.set_streaming(config["streaming_mode"] is True, op.time)
            if isinstance(settings.get("card_link"), dict):
                card.card["card_link"] = settings["card_link"]
            card.last_sequence = sequence

        return await self._card_op(request, "settings", apply)

    async def _update_card(self, request: web.Request) -> web.Response:
        def apply(card: FakeCard, body: dict[str, Any], op: CardOp) -> None:
            wrapper = body.get("card")
            if not isinstance(wrapper, dict) or wrapper.get("type") != "card_json":
                raise FakeError(99992402, "field validation failed: card")
            sequence = _next_sequence(card, body)
            op.text = wrapper.get("data")
            card.card = self._parse_card(wrapper.get("data"))
            card.set_streaming(_streaming_in(card.card), op.time)
            card.last_sequence = sequence

        return await self._card_op(request, "update", apply)

    async def _card_op(
        self,
        request: web.Request,
        name: str,
        apply: Callable[[FakeCard, dict[str, Any], CardOp], None],
        *,
        element_id: str | None = None,
    ) -> web.Response:
        """The checks every card op shares; ``apply`` does the rest and records its text."""
        card = self.cards.get(request.match_info["card_id"])
        if card is None:
            raise FakeError(200740)
        op = CardOp(self.clock(), name, element_id=element_id)
        try:
            if self._admitted_ops(card, op.time) >= self.card_ops_limit:
                self.rate_limited.append(op)
                raise FakeError(230020)
            body = _body(request)
            if isinstance(body.get("sequence"), int):
                op.sequence = body["sequence"]
            uuid = body.get("uuid")
            key = (name, uuid) if isinstance(uuid, str) and uuid else None
            fingerprint = json.dumps(body, sort_keys=True)
            if key is not None and key in card.uuids:
                if card.uuids[key] != fingerprint:
                    raise FakeError(200770)
                op.duplicate = True
                return self._ok({})
            apply(card, body, op)
            if key is not None:
                card.uuids[key] = fingerprint
        except FakeError as exc:
            op.code = exc.code
            raise
        finally:
            card.timeline.append(op)
        return self._ok({})

    def _admitted_ops(self, card: FakeCard, now: float) -> int:
        since = now - self.card_ops_window_s
        return sum(
            1
            for op in card.timeline
            if op.op in CARD_OPS and op.code != 230020 and since < op.time <= now
        )

    def _check_streaming(self, card: FakeCard, now: float) -> None:
        if not card.streaming_mode:
            raise FakeError(300309)
        since = card.streaming_since if card.streaming_since is not None else now
        if self.stream_timeout_s is not None and now - since >= self.stream_timeout_s:
            card.set_streaming(False, now)  # Feishu closes it; later updates get 300309
            raise FakeError(200850)

    def _parse_card(self, data: Any) -> dict[str, Any]:
        """A card JSON string checked as Feishu's create does (see the module doc)."""
        if not isinstance(data, str):
            raise FakeError(99992402, "field validation failed: data must be a string")
        if not data.strip():
            raise FakeError(300307)
        card = _parse_json(data.encode())
        if not isinstance(card, dict):
            raise FakeError(200220)
        if not card:
            raise FakeError(300307)
        if len(data.encode()) > self.card_size_limit:
            raise FakeError(200860)
        if card.get("schema") != "2.0":
            raise FakeError(300303)
        if (card.get("config") or {}).get("update_multi") is False:
            raise FakeError(300302)
        if sum(1 for node in _walk(card.get("body")) if "tag" in node) > MAX_CARD_COMPONENTS:
            raise FakeError(300305)
        ids = [node["element_id"] for node in _walk(card) if "element_id" in node]
        if len(ids) != len(set(ids)):
            raise FakeError(300301)
        return card

    def _card_to_send(self, msg_type: str, content: Any) -> FakeCard | None:
        """The card entity an interactive message carries (230099 if unknown or sent)."""
        if msg_type != "interactive" or content.get("type") != "card":
            return None
        data = content.get("data")
        card_id = data.get("card_id") if isinstance(data, dict) else None
        card = self.cards.get(card_id) if isinstance(card_id, str) else None
        if card is None:
            raise FakeError(230099, f"fake: unknown card_id {card_id!r}")
        if card.message_id is not None:
            raise FakeError(230099, f"fake: card {card_id} was already sent")
        return card

    def _mark_sent(self, card: FakeCard | None, message: FakeMessage) -> None:
        if card is not None:
            card.message_id = message.message_id
            message.card_id = card.card_id
            card.timeline.append(CardOp(self.clock(), "send", text=message.message_id))

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


def _next_sequence(card: FakeCard, body: Mapping[str, Any]) -> int:
    sequence = body.get("sequence")
    if isinstance(sequence, bool) or not isinstance(sequence, int):
        raise FakeError(99992402, "field validation failed: sequence")
    if sequence <= card.last_sequence:
        raise FakeError(300317)
    return sequence


def _streaming_in(card: Mapping[str, Any]) -> bool:
    config = card.get("config")
    return isinstance(config, dict) and config.get("streaming_mode") is True


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in ``node``, depth first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


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

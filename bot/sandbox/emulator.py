"""A Feishu emulator: Feishu's OpenAPI on localhost, speaking the real wire formats.

The tests run the bot against it (``tests/fakes/feishu_server.py`` re-exports it), and
``larkgate dev`` (:mod:`bot.sandbox`) runs it as the Feishu of the local sandbox. It is a
real HTTP server (aiohttp on 127.0.0.1, a free port), so the code under test runs through
lark-oapi and its HTTP stack unchanged::

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
    GET   /open-apis/application/v6/scopes                  ``data.scopes``: the app's scopes
          (``scope_name``, ``grant_status`` 1 = granted, ``scope_type`` tenant), from
          ``granted_scopes`` (every scope larkgate uses unless a test removes some)
    Every route but the token one wants ``Authorization: Bearer <valid token>``: missing
    answers 99991661, unknown/expired/revoked 99991663 (HTTP 400). Unknown routes get
    aiohttp's plain-text 404, as a real gateway answers with a non-JSON page.
    The workspace routes (contacts, chat list and history, calendar, tasks, Base, docx) are
    listed under "Workspace" below.

Workspace (``fake.workspace``: :class:`FakeWorkspace`, seeded, every part public state)
    A small tenant the workspace tools read and change: users Alice Wang (ou_fake_alice),
    Bob Li (ou_fake_bob) in department "0" and 张伟 (ou_fake_zhang) in "od-fake-sales";
    chats oc_fake_eng and oc_fake_launch (the bot is a member) and oc_fake_hr (it is not),
    with history in oc_fake_eng (text, post, image, a text with an @mention); the bot's
    primary calendar ``BOT_CALENDAR_ID`` (events tomorrow, in 2 days, 3 days ago, a
    cancelled one, an all-day one in 4 days) and a calendar the app may not read; tasks the
    app created, one a person created, tasklists fake-tasklist-launch (app is a member) and
    fake-tasklist-secret (not); Base bascnFakeProjects / tblFakeTasks (text, select,
    person, number, date, multi select, checkbox, url columns; 4 records) and
    bascnFakeLocked (no access); docs doxcnFakeHandbook and doxcnFakeSecret (no access);
    folder fldcnFakeShared. Times are relative to now. ``add_user``, ``add_chat``,
    ``add_event``, ``add_task``, ``add_record``, ``add_document`` seed more.
    Lists answer ``data: {items, has_more, page_token}`` (the token is an offset) and
    check ``page_size`` against Feishu's range (99992402 outside it, or for a bad
    ``user_id_type``, ``page_token`` or missing required parameter).
    POST  /open-apis/contact/v3/users/batch_get_id        ``emails``/``mobiles`` (1-50 each)
          -> ``user_list`` [{email|mobile, user_id?}]; mobiles match with or without +86
    GET   /open-apis/contact/v3/users/batch?user_ids=..   (1-50) -> ``items`` [user]
    GET   /open-apis/contact/v3/users/find_by_department  direct members, page_size <= 50;
          an unknown department answers 40004
    GET   /open-apis/im/v1/chats                          the chats the bot is in, <= 100
    GET   /open-apis/im/v1/messages?container_id_type=chat&container_id=..  sort_type
          ByCreateTimeAsc/Desc, start_time/end_time (seconds), page_size <= 50; the bot
          not in the chat: 230002; a chat nobody knows: 230001. Sent messages show up.
    POST  /open-apis/calendar/v4/calendars/primary         the bot's primary calendar
    GET   .../calendars/{calendar_id}/events               start_time+end_time together
          (one page, cut at page_size, no page_token), else paged; page_size 50-1000;
          unknown calendar 191000, no reader access 191002; cancelled events included
    POST  .../calendars/{calendar_id}/events               TimeInfo checks (timestamp xor
          date; 99992402), end before start 190002, writer access (191002);
          ``idempotency_key`` returns the first event
    POST  .../events/{event_id}/attendees                  user/chat attendees (unknown
          ids 190002, unknown event 193001); inviting someone twice adds nothing
    GET   /open-apis/task/v1/tasks                         with the tenant token: tasks the
          app created (v1 and v2 share ids here), ``task_completed``
    GET   /open-apis/task/v2/tasklists/{guid}/tasks        unknown 1470404, app not a
          member 1470403; ``completed``
    POST  /open-apis/task/v2/tasks                         summary required, members must
          be known users with role assignee/follower (1470400); ``client_token``
    POST  /open-apis/bitable/v1/apps/{app}/tables/{table}/records/search   view_id,
          field_names (1254024), sort (1254016), filter with and/or conditions (unknown
          field 1254045, bad operator or value 1254018); text cells answer as segments
          and people with names, as Feishu does; ``total``
    POST  /open-apis/bitable/v1/apps/{app}/tables/{table}/records   ``fields`` checked per
          column type (1254060-1254068), unknown column 1254045, new select options
          added; ``client_token``. Unknown app 1254040 / table 1254041 (Base answers its
          errors with HTTP 200), an app without access 91403
    GET   /open-apis/docx/v1/documents/{id}/raw_content   title and block texts, a line each;
          unknown 1770002, no access 1770032
    POST  /open-apis/docx/v1/documents                     title <= 800, folder_token must be
          a known folder (1770001)
    POST  /open-apis/docx/v1/documents/{id}/blocks/{id}/children   the page block only;
          1-50 text/heading/bullet/ordered/code/quote/divider blocks (1770001 otherwise),
          ``index``, ``client_token``; the document's revision goes up
    Message create refuses a known chat the bot is not in (230002); with ``strict``, an
    unknown chat (230001) or user (230013).

Messages
    ``uuid`` is honoured: a second create/reply with a uuid already seen returns the first
    message and adds nothing. Content must be a JSON string (else 230001); over 150 KB
    (text) or 30 KB (post, interactive) answers 230025. A reply to a message in a topic
    (``thread_id``) stays in it; ``reply_in_thread`` on a plain message starts a topic.
    Replying to an id the fake has never seen creates that parent on the fly, in chat
    ``default_chat_id``, unless ``strict = True`` (then 230001). Seed real parents with
    ``add_message(...)`` or ``add_event_message(envelope)`` (an envelope from
    ``bot.sandbox.push.message_event``) to get their chat and thread right.

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
    ``revision``        goes up after every request it answers (and ``touch()``);
                        ``await wait_for_change(revision, within)`` waits for the next
    ``max_recorded``    keep only the last N ``requests`` (None, the default: all of them;
                        a long-running sandbox sets a cap)
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
    ``deny_scopes(method, path_regex, scopes, times=None)`` answers matching requests as
    Feishu's gateway does when the app lacks a scope (any one of ``scopes`` would do):
    99991672, HTTP 400, the scopes in the message ("Access denied. One of the following
    scopes is required: [a, b]." then the same in Chinese with the console's auth link)
    and in ``error.permission_violations``.

Extending (CardKit and more)
    Add a handler method, register it in ``_routes()``, read the parsed body from
    ``_body(request)``, answer with ``_ok(data)`` and refuse with ``raise FakeError(code)``
    (the middleware renders it, with a log id). Keep state in dataclasses on the fake.
    Workspace endpoints live on :class:`FakeWorkspace` (``routes()``); ``_paged`` and
    ``_query_int`` give them Feishu's paging and parameter checks.
    ``add_routes(routes, public=True)`` (before ``start()``) mounts routes served elsewhere,
    such as the long-connection gateway of ``fakes.feishu_ws``, on the same domain.
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
from calendar import timegm
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from bot.feishu.errors import CODES

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
TENANT_KEY = "fake_tenant"
# The tenant scopes larkgate uses, all granted unless a test takes some away.
LARKGATE_SCOPES = (
    "im:message",
    "im:message:send_as_bot",
    "im:message.p2p_msg:readonly",
    "im:message.group_at_msg:readonly",
    "im:chat:readonly",
    "cardkit:card:write",
    "contact:user.base:readonly",
    "contact:user.id:readonly",
    "calendar:calendar",
    "task:task:read",
    "task:task:write",
    "bitable:app",
    "docx:document",
)
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

# Feishu's own msg for each code, from the one table the client reads too.
DEFAULT_MSGS = {code: entry.msg for code, entry in CODES.items() if entry.msg}


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
    mentions: list[dict[str, Any]] = field(default_factory=list)  # the wire's mentions

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
            "mentions": [dict(m) for m in self.mentions],
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


# -- the workspace: contacts, chats, calendar, tasks, Base, docx --------------------------

HOUR_S = 3600
DAY_S = 24 * HOUR_S
BOT_CALENDAR_ID = "feishu.cn_fakebot0001@group.calendar.feishu.cn"
PAGE_PREFIX = "fake_page_"
APPLINK = "https://applink.feishu.cn"
# docx block types the fake accepts in block children create, with their content key.
DOCX_BLOCKS = {
    2: "text",
    **{2 + level: f"heading{level}" for level in range(1, 10)},
    12: "bullet",
    13: "ordered",
    14: "code",
    15: "quote",
    22: "divider",
}
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
class FakeUser:
    open_id: str
    name: str
    email: str = ""
    mobile: str = ""  # "+86..." like Feishu
    en_name: str = ""
    job_title: str = ""
    department_ids: list[str] = field(default_factory=lambda: ["0"])
    resigned: bool = False

    @property
    def user_id(self) -> str:
        return "u_" + self.open_id.removeprefix("ou_")

    @property
    def union_id(self) -> str:
        return "on_" + self.open_id.removeprefix("ou_")

    def id_of(self, user_id_type: str) -> str:
        return {"user_id": self.user_id, "union_id": self.union_id}.get(user_id_type, self.open_id)

    def to_wire(self) -> dict[str, Any]:
        return {
            "open_id": self.open_id,
            "user_id": self.user_id,
            "union_id": self.union_id,
            "name": self.name,
            "en_name": self.en_name,
            "nickname": "",
            "email": self.email,
            "enterprise_email": "",
            "mobile": self.mobile,
            "mobile_visible": True,
            "job_title": self.job_title,
            "department_ids": list(self.department_ids),
            "status": {
                "is_activated": not self.resigned,
                "is_frozen": False,
                "is_resigned": self.resigned,
                "is_exited": False,
                "is_unjoin": False,
            },
            "avatar": {"avatar_72": "https://example.invalid/a72.png"},
            "tenant_key": TENANT_KEY,
        }


@dataclass
class FakeChat:
    chat_id: str
    name: str
    description: str = ""
    owner_open_id: str = ""
    bot_is_member: bool = True
    external: bool = False

    def to_wire(self) -> dict[str, Any]:
        return {
            "chat_id": self.chat_id,
            "avatar": "https://example.invalid/chat.png",
            "name": self.name,
            "description": self.description,
            "owner_id": self.owner_open_id,
            "owner_id_type": "open_id",
            "external": self.external,
            "tenant_key": TENANT_KEY,
            "chat_status": "normal",
        }


@dataclass
class FakeEvent:
    event_id: str
    calendar_id: str
    summary: str
    start: dict[str, str]  # TimeInfo as sent: {"timestamp": "...", "timezone": ...} or {"date"}
    end: dict[str, str]
    description: str = ""
    location: dict[str, Any] | None = None
    status: str = "confirmed"
    attendees: list[dict[str, Any]] = field(default_factory=list)
    create_time: int = 0  # epoch seconds
    recurrence: str = ""

    def bounds(self) -> tuple[int, int]:
        """(start, end) in epoch seconds; an all-day event spans its dates in UTC."""
        return _event_time(self.start), _event_time(self.end, end=True)

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "event_id": self.event_id,
            "organizer_calendar_id": self.calendar_id,
            "summary": self.summary,
            "description": self.description,
            "start_time": dict(self.start),
            "end_time": dict(self.end),
            "vchat": {"vc_type": "no_meeting"},
            "visibility": "default",
            "attendee_ability": "can_see_others",
            "free_busy_status": "busy",
            "color": -1,
            "reminders": [],
            "recurrence": self.recurrence,
            "status": self.status,
            "is_exception": False,
            "recurring_event_id": "",
            "create_time": str(self.create_time),
            "app_link": f"{APPLINK}/client/calendar/event/detail?eventId={self.event_id}",
            "event_organizer": {"user_id": "", "display_name": "larkgate"},
        }
        if self.location:
            wire["location"] = dict(self.location)
        return wire


@dataclass
class FakeCalendar:
    calendar_id: str
    summary: str
    type: str = "shared"  # primary, shared, google, resource, exchange
    role: str = "owner"  # the app's access: owner, writer, reader, free_busy_reader
    events: list[FakeEvent] = field(default_factory=list)
    idempotency: dict[str, str] = field(default_factory=dict)  # key -> event_id

    def to_wire(self) -> dict[str, Any]:
        return {
            "calendar_id": self.calendar_id,
            "summary": self.summary,
            "description": "",
            "permissions": "private",
            "color": -1,
            "type": self.type,
            "summary_alias": "",
            "is_deleted": False,
            "is_third_party": False,
            "role": self.role,
        }


@dataclass
class FakeTask:
    guid: str
    summary: str
    description: str = ""
    due_ms: int | None = None
    due_all_day: bool = False
    completed_ms: int = 0
    members: list[dict[str, str]] = field(default_factory=list)  # {id, type, role}
    tasklist_guids: list[str] = field(default_factory=list)
    creator: dict[str, str] = field(default_factory=dict)  # {id, type: "app"|"user"}
    created_ms: int = 0
    number: int = 0  # the human task id "t100001"

    def to_v2(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "guid": self.guid,
            "task_id": f"t{100000 + self.number}",
            "summary": self.summary,
            "description": self.description,
            "completed_at": str(self.completed_ms),
            "members": [dict(m) for m in self.members],
            "creator": dict(self.creator),
            "created_at": str(self.created_ms),
            "updated_at": str(self.created_ms),
            "status": "done" if self.completed_ms else "todo",
            "url": f"{APPLINK}/client/todo/detail?guid={self.guid}",
            "tasklists": [{"tasklist_guid": g, "section_guid": ""} for g in self.tasklist_guids],
            "subtask_count": 0,
            "mode": 2,
            "is_milestone": False,
        }
        if self.due_ms is not None:
            wire["due"] = {"timestamp": str(self.due_ms), "is_all_day": self.due_all_day}
        return wire

    def to_v2_summary(self) -> dict[str, Any]:
        """The short form ``tasklist.tasks`` lists."""
        wire = self.to_v2()
        keep = ("guid", "summary", "completed_at", "due", "members", "subtask_count")
        return {key: wire[key] for key in keep if key in wire}

    def to_v1(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "id": self.guid,
            "summary": self.summary,
            "description": self.description,
            "complete_time": str(self.completed_ms // 1000),
            "creator_id": self.creator.get("id", ""),
            "create_time": str(self.created_ms // 1000),
            "update_time": str(self.created_ms // 1000),
            "extra": "",
            "can_edit": True,
            "collaborators": [{"id": m["id"]} for m in self.members if m.get("role") == "assignee"],
            "followers": [{"id": m["id"]} for m in self.members if m.get("role") == "follower"],
        }
        if self.due_ms is not None:
            wire["due"] = {
                "time": str(self.due_ms // 1000),
                "timezone": "Asia/Shanghai",
                "is_all_day": self.due_all_day,
            }
        return wire


@dataclass
class FakeTasklist:
    guid: str
    name: str
    app_is_member: bool = True


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


@dataclass
class FakeDocument:
    document_id: str
    title: str
    blocks: list[dict[str, Any]] = field(default_factory=list)  # docx blocks as sent
    folder_token: str = ""
    revision_id: int = 1
    app_has_access: bool = True
    client_tokens: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def raw_text(self) -> str:
        """What ``raw_content`` answers: the title, then each block's text on its line."""
        lines = [self.title]
        for block in self.blocks:
            key = DOCX_BLOCKS.get(block.get("block_type", 0), "")
            elements = (block.get(key) or {}).get("elements") or []
            lines.append(
                "".join(str((e.get("text_run") or {}).get("content", "")) for e in elements)
            )
        return "\n".join(lines) + "\n"


class FakeWorkspace:
    """The workspace behind the contact, chat, calendar, task, Base and docx endpoints.

    Seeded with a small, realistic tenant (see the module doc); every list is public
    state a test may change or extend with the ``add_*`` helpers.
    """

    def __init__(self, fake: FakeFeishu) -> None:
        self._fake = fake
        self._numbers = itertools.count(1)
        self.users: dict[str, FakeUser] = {}  # open_id -> user
        self.departments: set[str] = {"0"}
        self.chats: dict[str, FakeChat] = {}
        self.calendars: dict[str, FakeCalendar] = {}
        self.primary_calendar_id = BOT_CALENDAR_ID
        self.tasks: dict[str, FakeTask] = {}
        self.tasklists: dict[str, FakeTasklist] = {}
        self.task_client_tokens: dict[str, str] = {}  # client_token -> guid
        self.bitables: dict[str, FakeBitableApp] = {}
        self.documents: dict[str, FakeDocument] = {}
        self.folders: set[str] = {"fldcnFakeShared"}
        self._seed()

    # -- helpers for tests ---------------------------------------------------------------

    def add_user(self, open_id: str, name: str, **fields: Any) -> FakeUser:
        user = FakeUser(open_id, name, **fields)
        self.users[open_id] = user
        self.departments.update(user.department_ids)
        return user

    def add_chat(
        self, chat_id: str, name: str, description: str = "", owner: str = "", **fields: Any
    ) -> FakeChat:
        chat = FakeChat(chat_id, name, description, owner, **fields)
        self.chats[chat_id] = chat
        return chat

    def add_event(
        self,
        summary: str,
        start_s: int,
        end_s: int,
        *,
        calendar_id: str | None = None,
        **fields: Any,
    ) -> FakeEvent:
        calendar = self.calendars[calendar_id or self.primary_calendar_id]
        event = FakeEvent(
            event_id=f"{secrets.token_hex(4)}-fake-{next(self._numbers):04d}_0",
            calendar_id=calendar.calendar_id,
            summary=summary,
            start={"timestamp": str(start_s), "timezone": "Asia/Shanghai"},
            end={"timestamp": str(end_s), "timezone": "Asia/Shanghai"},
            create_time=int(time.time()),
            **fields,
        )
        calendar.events.append(event)
        return event

    def add_task(self, summary: str, *, by_app: bool = True, **fields: Any) -> FakeTask:
        number = next(self._numbers)
        creator = (
            {"id": self._fake.app_id, "type": "app"}
            if by_app
            else {"id": "ou_fake_alice", "type": "user"}
        )
        task = FakeTask(
            guid=f"{secrets.token_hex(4)}-fake-task-{number:04d}",
            summary=summary,
            creator=creator,
            created_ms=_now_ms(),
            number=number,
            **fields,
        )
        self.tasks[task.guid] = task
        return task

    def add_record(self, app_token: str, table_id: str, fields: dict[str, Any]) -> str:
        table = self.bitables[app_token].tables[table_id]
        record_id = f"rec{secrets.token_hex(5)}"
        table.records.append({"record_id": record_id, "fields": dict(fields)})
        return record_id

    def add_document(
        self, document_id: str, title: str, text: str = "", **fields: Any
    ) -> FakeDocument:
        blocks = [_text_block(line) for line in text.splitlines()]
        document = FakeDocument(document_id, title, blocks, **fields)
        self.documents[document_id] = document
        return document

    def _seed(self) -> None:
        now = int(time.time())
        hour = now - now % HOUR_S  # the hour we are in: events and due dates sit on whole hours
        alice, bob = self._seed_people()
        self._seed_messages(alice, bob, now * 1000)
        self._seed_calendar(hour)
        self._seed_tasks(alice, hour, now * 1000)
        self._seed_base(alice, bob, hour)
        self.add_document(
            "doxcnFakeHandbook",
            "Team handbook",
            "Welcome to the team.\nOn-call rotates weekly; the schedule is in the Base.\n"
            "Deploys happen Tuesday and Thursday.",
        )
        self.add_document("doxcnFakeSecret", "Board minutes", "Confidential", app_has_access=False)

    def _seed_people(self) -> tuple[FakeUser, FakeUser]:
        alice = self.add_user(
            "ou_fake_alice",
            "Alice Wang",
            email="alice@example.com",
            mobile="+8613800000001",
            en_name="Alice Wang",
            job_title="Engineer",
        )
        bob = self.add_user(
            "ou_fake_bob",
            "Bob Li",
            email="bob@example.com",
            mobile="+8613800000002",
            en_name="Bob Li",
            job_title="Product manager",
        )
        self.add_user(
            "ou_fake_zhang",
            "张伟",
            email="zhangwei@example.com",
            mobile="+8613800000003",
            en_name="Zhang Wei",
            job_title="Sales",
            department_ids=["od-fake-sales"],
        )
        self.add_chat("oc_fake_eng", "Engineering", "Backend and infra", alice.open_id)
        self.add_chat("oc_fake_launch", "Launch 2025", "Launch coordination", bob.open_id)
        self.add_chat("oc_fake_hr", "HR private", "", bob.open_id, bot_is_member=False)
        return alice, bob

    def _seed_messages(self, alice: FakeUser, bob: FakeUser, now_ms: int) -> None:
        fake = self._fake
        fake.add_message(
            "om_fake_hist_1",
            chat_id="oc_fake_eng",
            chat_type="group",
            content={"text": "Standup moved to 10:30 tomorrow"},
            sender_open_id=alice.open_id,
            create_time_ms=now_ms - 3600_000,
        )
        fake.add_message(
            "om_fake_hist_2",
            chat_id="oc_fake_eng",
            chat_type="group",
            msg_type="post",
            content={
                "title": "Release notes",
                "content": [
                    [
                        {"tag": "text", "text": "v2.3 ships on Friday, "},
                        {"tag": "at", "user_id": "@_user_1", "user_name": "Alice Wang"},
                    ],
                    [{"tag": "a", "text": "changelog", "href": "https://example.invalid/cl"}],
                ],
            },
            sender_open_id=bob.open_id,
            create_time_ms=now_ms - 2400_000,
        )
        fake.add_message(
            "om_fake_hist_3",
            chat_id="oc_fake_eng",
            chat_type="group",
            msg_type="image",
            content={"image_key": "img_v3_fake"},
            sender_open_id=alice.open_id,
            create_time_ms=now_ms - 1200_000,
        )
        mentioned = fake.add_message(
            "om_fake_hist_4",
            chat_id="oc_fake_eng",
            chat_type="group",
            content={"text": "@_user_1 can you review the migration?"},
            sender_open_id=bob.open_id,
            create_time_ms=now_ms - 600_000,
        )
        mentioned.mentions = [
            {"key": "@_user_1", "id": alice.open_id, "id_type": "open_id", "name": alice.name}
        ]
        fake.add_message(
            "om_fake_hist_5",
            chat_id="oc_fake_hr",
            chat_type="group",
            content={"text": "salary review"},
            sender_open_id=bob.open_id,
        )

    def _seed_calendar(self, hour: int) -> None:
        self.calendars[BOT_CALENDAR_ID] = FakeCalendar(BOT_CALENDAR_ID, "larkgate", "primary")
        self.calendars["feishu.cn_fakeprivate@group.calendar.feishu.cn"] = FakeCalendar(
            "feishu.cn_fakeprivate@group.calendar.feishu.cn", "Board", role="free_busy_reader"
        )
        self.add_event(
            "Weekly sync",
            hour + DAY_S,
            hour + DAY_S + HOUR_S,
            location={"name": "Room 301"},
            description="Agenda in the doc",
        )
        self.add_event("Design review", hour + 2 * DAY_S, hour + 2 * DAY_S + 2 * HOUR_S)
        self.add_event("Retro", hour - 3 * DAY_S, hour - 3 * DAY_S + HOUR_S)
        self.add_event(
            "Cancelled 1:1",
            hour + DAY_S + 2 * HOUR_S,
            hour + DAY_S + 3 * HOUR_S,
            status="cancelled",
        )
        offsite = time.strftime("%Y-%m-%d", time.gmtime(hour + 4 * DAY_S))
        offsite_end = time.strftime("%Y-%m-%d", time.gmtime(hour + 5 * DAY_S))
        event = self.add_event("Team offsite", 0, 0)
        event.start, event.end = {"date": offsite}, {"date": offsite_end}

    def _seed_tasks(self, alice: FakeUser, hour: int, now_ms: int) -> None:
        self.tasklists["fake-tasklist-launch"] = FakeTasklist("fake-tasklist-launch", "Launch")
        self.tasklists["fake-tasklist-secret"] = FakeTasklist(
            "fake-tasklist-secret", "Secret", app_is_member=False
        )
        assignee = [{"id": alice.open_id, "type": "user", "role": "assignee"}]
        self.add_task(
            "Prepare launch checklist",
            due_ms=(hour + 2 * DAY_S) * 1000,
            members=assignee,
            tasklist_guids=["fake-tasklist-launch"],
        )
        self.add_task("Renew TLS certificate", completed_ms=now_ms - DAY_S * 1000)
        self.add_task("Book the venue", by_app=False, tasklist_guids=["fake-tasklist-launch"])

    def _seed_base(self, alice: FakeUser, bob: FakeUser, hour: int) -> None:
        table = FakeBitableTable(
            "tblFakeTasks",
            "Tasks",
            {
                "Name": "text",
                "Status": "single_select",
                "Owner": "person",
                "Points": "number",
                "Due": "date",
                "Tags": "multi_select",
                "Done": "checkbox",
                "Link": "url",
            },
            options={
                "Status": ["Todo", "In progress", "Done"],
                "Tags": ["backend", "frontend", "ops"],
            },
        )
        self.bitables["bascnFakeProjects"] = FakeBitableApp(
            "bascnFakeProjects", "Projects", {table.table_id: table}
        )
        self.bitables["bascnFakeLocked"] = FakeBitableApp(
            "bascnFakeLocked",
            "Payroll",
            {"tblFakePay": FakeBitableTable("tblFakePay", "Pay", {"Name": "text"})},
            app_has_access=False,
        )
        rows = [
            ("Migrate the database", "In progress", alice, 8, ["backend"], False),
            ("New landing page", "Todo", bob, 5, ["frontend"], False),
            ("Rotate on-call keys", "Done", alice, 2, ["ops", "backend"], True),
            ("Fix login bug", "Done", bob, 3, ["frontend"], True),
        ]
        for i, (name, status, owner, points, tags, done) in enumerate(rows):
            self.add_record(
                "bascnFakeProjects",
                "tblFakeTasks",
                {
                    "Name": name,
                    "Status": status,
                    "Owner": [{"id": owner.open_id}],
                    "Points": points,
                    "Due": (hour + (i + 1) * DAY_S) * 1000,
                    "Tags": tags,
                    "Done": done,
                    "Link": {"link": f"https://example.invalid/{i}", "text": f"ticket {i}"},
                },
            )

    # -- routes ---------------------------------------------------------------------------

    def routes(self) -> list[tuple[str, str, Any]]:
        users = "/open-apis/contact/v3/users"
        calendars = "/open-apis/calendar/v4/calendars"
        records = "/open-apis/bitable/v1/apps/{app_token}/tables/{table_id}/records"
        docs = "/open-apis/docx/v1/documents"
        return [
            ("POST", users + "/batch_get_id", self._batch_get_id),
            ("GET", users + "/batch", self._batch_users),
            ("GET", users + "/find_by_department", self._find_by_department),
            ("GET", "/open-apis/im/v1/chats", self._list_chats),
            ("GET", "/open-apis/im/v1/messages", self._list_messages),
            ("POST", calendars + "/primary", self._primary_calendar),
            ("GET", calendars + "/{calendar_id}/events", self._list_events),
            ("POST", calendars + "/{calendar_id}/events", self._create_event),
            ("POST", calendars + "/{calendar_id}/events/{event_id}/attendees", self._add_attendees),
            ("GET", "/open-apis/task/v1/tasks", self._list_tasks_v1),
            ("GET", "/open-apis/task/v2/tasklists/{tasklist_guid}/tasks", self._tasklist_tasks),
            ("POST", "/open-apis/task/v2/tasks", self._create_task),
            ("POST", records + "/search", self._search_records),
            ("POST", records, self._create_record),
            ("GET", docs + "/{document_id}/raw_content", self._raw_content),
            ("POST", docs, self._create_document),
            ("POST", docs + "/{document_id}/blocks/{block_id}/children", self._create_blocks),
        ]

    def check_receiver(self, id_type: str, receive_id: str, *, strict: bool) -> None:
        """Message create: the bot must be in a chat it knows; strict: ids must be known."""
        if id_type == "chat_id":
            chat = self.chats.get(receive_id)
            if chat is not None and not chat.bot_is_member:
                raise FakeError(230002)
            if chat is None and strict and not self._chat_has_messages(receive_id):
                raise FakeError(230001, "invalid receive_id: no such chat")
        elif (
            strict
            and id_type in ("open_id", "user_id", "union_id")
            and self._user(receive_id, id_type) is None
        ):
            raise FakeError(230013)

    # -- contact --------------------------------------------------------------------------

    async def _batch_get_id(self, request: web.Request) -> web.Response:
        id_type = _user_id_type(request)
        body = _body(request)
        emails, mobiles = body.get("emails") or [], body.get("mobiles") or []
        if not isinstance(emails, list) or not isinstance(mobiles, list):
            raise FakeError(99992402, "field validation failed: emails/mobiles must be lists")
        if not (emails or mobiles) or len(emails) > 50 or len(mobiles) > 50:
            raise FakeError(99992402, "field validation failed: 1 to 50 emails or mobiles")
        active = [u for u in self.users.values() if body.get("include_resigned") or not u.resigned]
        found: list[dict[str, Any]] = []
        for email in emails:
            user = next((u for u in active if u.email.lower() == str(email).lower()), None)
            found.append({"email": email, **({"user_id": user.id_of(id_type)} if user else {})})
        for mobile in mobiles:
            key = _mobile_key(str(mobile))
            user = next((u for u in active if u.mobile and _mobile_key(u.mobile) == key), None)
            found.append({"mobile": mobile, **({"user_id": user.id_of(id_type)} if user else {})})
        return self._fake._ok({"user_list": found})

    async def _batch_users(self, request: web.Request) -> web.Response:
        id_type = _user_id_type(request)
        ids = request.query.getall("user_ids", [])
        if not ids or len(ids) > 50:
            raise FakeError(99992402, "field validation failed: user_ids (1 to 50)")
        users = [self._user(user_id, id_type) for user_id in ids]
        return self._fake._ok({"items": [u.to_wire() for u in users if u is not None]})

    async def _find_by_department(self, request: web.Request) -> web.Response:
        _user_id_type(request)
        department = request.query.get("department_id")
        if not department:
            raise FakeError(99992402, "field validation failed: department_id is required")
        if department not in self.departments:
            raise FakeError(40004)
        members = [u.to_wire() for u in self.users.values() if department in u.department_ids]
        return self._fake._ok(_paged(members, request, default=10, maximum=50))

    # -- IM ---------------------------------------------------------------------------------

    async def _list_chats(self, request: web.Request) -> web.Response:
        _user_id_type(request)
        sort = request.query.get("sort_type", "ByCreateTimeAsc")
        if sort not in ("ByCreateTimeAsc", "ByActiveTimeDesc"):
            raise FakeError(99992402, "field validation failed: sort_type")
        chats = [c.to_wire() for c in self.chats.values() if c.bot_is_member]
        return self._fake._ok(_paged(chats, request, default=20, maximum=100))

    async def _list_messages(self, request: web.Request) -> web.Response:
        query = request.query
        kind, container = query.get("container_id_type"), query.get("container_id")
        if kind not in ("chat", "thread"):
            raise FakeError(99992402, "field validation failed: container_id_type")
        if not container:
            raise FakeError(99992402, "field validation failed: container_id is required")
        messages = list(self._fake.message_by_id.values())
        if kind == "chat":
            chat = self.chats.get(container)
            if chat is None and not self._chat_has_messages(container):
                raise FakeError(230001, "invalid container_id: no such chat")
            if chat is not None and not chat.bot_is_member:
                raise FakeError(230002)
            messages = [m for m in messages if m.chat_id == container]
        else:
            messages = [m for m in messages if m.thread_id == container]
        start, end = _query_int(request, "start_time", 0), _query_int(request, "end_time", 2**62)
        messages = [m for m in messages if start <= m.create_time_ms // 1000 <= end]
        sort = query.get("sort_type", "ByCreateTimeAsc")
        if sort not in ("ByCreateTimeAsc", "ByCreateTimeDesc"):
            raise FakeError(99992402, "field validation failed: sort_type")
        messages.sort(key=lambda m: (m.create_time_ms, m.message_id))
        if sort == "ByCreateTimeDesc":
            messages.reverse()
        wire = [m.to_wire() for m in messages]
        return self._fake._ok(_paged(wire, request, default=20, maximum=50))

    # -- calendar ---------------------------------------------------------------------------

    async def _primary_calendar(self, request: web.Request) -> web.Response:
        _user_id_type(request)
        calendar = self.calendars[self.primary_calendar_id]
        return self._fake._ok({"calendars": [{"calendar": calendar.to_wire(), "user_id": ""}]})

    async def _list_events(self, request: web.Request) -> web.Response:
        calendar = self._calendar(request, roles=("owner", "writer", "reader"))
        query = request.query
        if ("start_time" in query) != ("end_time" in query):
            raise FakeError(
                99992402, "field validation failed: start_time and end_time go together"
            )
        size = _query_int(request, "page_size", 500, 50, 1000)
        events = list(calendar.events)
        if "start_time" in query:
            if any(name in query for name in ("page_token", "sync_token", "anchor_time")):
                raise FakeError(
                    99992402, "field validation failed: start_time/end_time with paging"
                )
            start, end = _query_int(request, "start_time", 0), _query_int(request, "end_time", 0)
            if end < start:
                raise FakeError(190002, "invalid parameters in request: end_time < start_time")
            hits = [e.to_wire() for e in events if e.bounds()[1] > start and e.bounds()[0] < end]
            # One shot: no paging, anything past page_size is cut off.
            return self._fake._ok(
                {"items": hits[:size], "has_more": False, "page_token": "", "sync_token": "fake"}
            )
        anchor = _query_int(request, "anchor_time", 0)
        wire = [e.to_wire() for e in events if e.bounds()[1] >= anchor]
        return self._fake._ok(_paged(wire, request, default=500, maximum=1000, minimum=50))

    async def _create_event(self, request: web.Request) -> web.Response:
        calendar = self._calendar(request, roles=("owner", "writer"))
        _user_id_type(request)
        key = request.query.get("idempotency_key")
        if key and key in calendar.idempotency:
            earlier = next(e for e in calendar.events if e.event_id == calendar.idempotency[key])
            return self._fake._ok({"event": earlier.to_wire()})
        body = _body(request)
        start, end = (
            _time_info(body.get("start_time"), "start_time"),
            _time_info(body.get("end_time"), "end_time"),
        )
        if _event_time(end, end=True) < _event_time(start):
            raise FakeError(190002, "invalid parameters in request: end_time before start_time")
        summary = body.get("summary") or ""
        if not isinstance(summary, str) or len(summary) > 1000:
            raise FakeError(99992402, "field validation failed: summary")
        location = body.get("location") if isinstance(body.get("location"), dict) else None
        event = FakeEvent(
            event_id=f"{secrets.token_hex(4)}-fake-{next(self._numbers):04d}_0",
            calendar_id=calendar.calendar_id,
            summary=summary,
            description=str(body.get("description") or ""),
            start=start,
            end=end,
            location=location,
            create_time=int(time.time()),
        )
        calendar.events.append(event)
        if key:
            calendar.idempotency[key] = event.event_id
        return self._fake._ok({"event": event.to_wire()})

    async def _add_attendees(self, request: web.Request) -> web.Response:
        calendar = self._calendar(request, roles=("owner", "writer"))
        id_type = _user_id_type(request)
        event_id = request.match_info["event_id"]
        event = next((e for e in calendar.events if e.event_id == event_id), None)
        if event is None:
            raise FakeError(193001)
        attendees = _body(request).get("attendees")
        if not isinstance(attendees, list) or not 1 <= len(attendees) <= 1000:
            raise FakeError(99992402, "field validation failed: attendees (1 to 1000)")
        added = []
        for item in attendees:
            kind = item.get("type") if isinstance(item, dict) else None
            if kind == "user":
                user = self._user(str(item.get("user_id") or ""), id_type)
                if user is None:
                    raise FakeError(
                        190002, f"invalid parameters in request: user_id {item.get('user_id')!r}"
                    )
                entry = {"type": "user", "user_id": item["user_id"], "display_name": user.name}
            elif kind == "chat":
                chat = self.chats.get(str(item.get("chat_id") or ""))
                if chat is None:
                    raise FakeError(
                        190002, f"invalid parameters in request: chat_id {item.get('chat_id')!r}"
                    )
                entry = {"type": "chat", "chat_id": chat.chat_id, "display_name": chat.name}
            else:
                raise FakeError(
                    99992402, "field validation failed: attendees.type (user or chat here)"
                )
            entry |= {
                "attendee_id": f"{kind}_{next(self._numbers)}",
                "rsvp_status": "needs_action",
                "is_optional": bool(item.get("is_optional")),
                "is_organizer": False,
                "is_external": False,
            }
            added.append(entry)
        # Inviting someone already invited changes nothing (and answers them again).
        known = {(a["type"], a.get("user_id") or a.get("chat_id")) for a in event.attendees}
        event.attendees += [
            a for a in added if (a["type"], a.get("user_id") or a.get("chat_id")) not in known
        ]
        return self._fake._ok({"attendees": added})

    # -- tasks ------------------------------------------------------------------------------

    async def _list_tasks_v1(self, request: web.Request) -> web.Response:
        _user_id_type(request)
        completed = _query_bool(request, "task_completed")
        # With a tenant token: the tasks this app created (v1 and v2 share the ids).
        tasks = [
            t
            for t in self.tasks.values()
            if t.creator == {"id": self._fake.app_id, "type": "app"}
            and (completed is None or bool(t.completed_ms) == completed)
        ]
        tasks.sort(key=lambda t: t.created_ms)
        return self._fake._ok(_paged([t.to_v1() for t in tasks], request, default=50, maximum=100))

    async def _tasklist_tasks(self, request: web.Request) -> web.Response:
        _user_id_type(request)
        tasklist = self._tasklist(request.match_info["tasklist_guid"])
        completed = _query_bool(request, "completed")
        tasks = [
            t.to_v2_summary()
            for t in self.tasks.values()
            if tasklist.guid in t.tasklist_guids
            and (completed is None or bool(t.completed_ms) == completed)
        ]
        return self._fake._ok(_paged(tasks, request, default=50, maximum=100))

    async def _create_task(self, request: web.Request) -> web.Response:
        id_type = _user_id_type(request)
        body = _body(request)
        token = body.get("client_token")
        if isinstance(token, str) and token in self.task_client_tokens:
            return self._fake._ok({"task": self.tasks[self.task_client_tokens[token]].to_v2()})
        summary = body.get("summary")
        if not isinstance(summary, str) or not summary.strip() or len(summary) > 3000:
            raise FakeError(1470400, "invalid request params: summary is required (max 3000)")
        fields: dict[str, Any] = {"description": str(body.get("description") or "")}
        due = body.get("due")
        if due is not None:
            stamp = str(due.get("timestamp") or "") if isinstance(due, dict) else ""
            if not stamp.isdigit():
                raise FakeError(1470400, "invalid request params: due.timestamp (ms)")
            fields |= {"due_ms": int(stamp), "due_all_day": bool(due.get("is_all_day"))}
        members = []
        for member in body.get("members") or []:
            member_id = member.get("id") if isinstance(member, dict) else None
            if (
                member.get("role") not in ("assignee", "follower")
                or self._user(str(member_id), id_type) is None
            ):
                raise FakeError(1470400, f"invalid request params: member {member!r}")
            members.append({"id": member_id, "type": "user", "role": member["role"]})
        guids = []
        for item in body.get("tasklists") or []:
            guids.append(self._tasklist(str((item or {}).get("tasklist_guid") or "")).guid)
        task = self.add_task(summary, members=members, tasklist_guids=guids, **fields)
        if isinstance(token, str) and token:
            self.task_client_tokens[token] = task.guid
        return self._fake._ok({"task": task.to_v2()})

    # -- Base (bitable) ------------------------------------------------------------------

    async def _search_records(self, request: web.Request) -> web.Response:
        table = self._table(request)
        body = _body(request)
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
        page = _paged(records, request, default=20, maximum=500)
        page["items"] = [
            {"record_id": r["record_id"], "fields": self._record_out(table, r["fields"], names)}
            for r in page["items"]
        ]
        page["total"] = len(records)
        return self._fake._ok(page)

    async def _create_record(self, request: web.Request) -> web.Response:
        table = self._table(request)
        id_type = _user_id_type(request)
        token = request.query.get("client_token")
        if token and token in table.client_tokens:
            return self._fake._ok({"record": table.client_tokens[token]})
        fields = _body(request).get("fields")
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

    # -- docx -------------------------------------------------------------------------------

    async def _raw_content(self, request: web.Request) -> web.Response:
        document = self._document(request.match_info["document_id"])
        if request.query.get("lang", "0") not in ("0", "1", "2"):
            raise FakeError(99992402, "field validation failed: lang")
        return self._fake._ok({"content": document.raw_text()})

    async def _create_document(self, request: web.Request) -> web.Response:
        body = _body(request)
        title, folder = body.get("title") or "", body.get("folder_token") or ""
        if not isinstance(title, str) or len(title) > 800:
            raise FakeError(1770001, "invalid param: title (at most 800 characters)")
        if folder and folder not in self.folders:
            raise FakeError(1770001, f"invalid param: folder_token {folder!r} not found")
        document = FakeDocument(f"doxcnFake{secrets.token_hex(8)}", title, folder_token=folder)
        self.documents[document.document_id] = document
        wire = {"document_id": document.document_id, "revision_id": 1, "title": title}
        return self._fake._ok({"document": wire})

    async def _create_blocks(self, request: web.Request) -> web.Response:
        document = self._document(request.match_info["document_id"])
        if request.match_info["block_id"] != document.document_id:
            raise FakeError(1770001, "invalid param: block_id (the fake knows the page block)")
        revision = request.query.get("document_revision_id", "-1")
        if not revision.lstrip("-").isdigit():
            raise FakeError(99992402, "field validation failed: document_revision_id")
        token = request.query.get("client_token")
        if token and token in document.client_tokens:
            return self._fake._ok(
                self._blocks_answer(document, document.client_tokens[token], token)
            )
        body = _body(request)
        children = body.get("children")
        if not isinstance(children, list) or not 1 <= len(children) <= 50:
            raise FakeError(1770001, "invalid param: children (1 to 50 blocks)")
        for child in children:
            block_type = child.get("block_type") if isinstance(child, dict) else None
            key = DOCX_BLOCKS.get(block_type) if isinstance(block_type, int) else None
            if key is None or not isinstance(child.get(key), dict):
                raise FakeError(1770001, f"invalid param: block {child!r}")
            if key != "divider" and not _text_elements_ok(child[key].get("elements")):
                raise FakeError(1770001, f"invalid param: {key}.elements")
        index = body.get("index", -1)
        if not isinstance(index, int) or not -1 <= index <= len(document.blocks):
            raise FakeError(1770001, "invalid param: index")
        made = [
            {
                **child,
                "block_id": f"doxcnBlk{secrets.token_hex(6)}",
                "parent_id": document.document_id,
            }
            for child in children
        ]
        at = len(document.blocks) if index == -1 else index
        document.blocks[at:at] = made
        document.revision_id += 1
        if token:
            document.client_tokens[token] = made
        return self._fake._ok(self._blocks_answer(document, made, token))

    @staticmethod
    def _blocks_answer(
        document: FakeDocument, made: list[dict[str, Any]], token: str | None
    ) -> dict[str, Any]:
        return {
            "children": made,
            "document_revision_id": document.revision_id,
            "client_token": token or "",
        }

    # -- lookups ----------------------------------------------------------------------------

    def _user(self, user_id: str, id_type: str) -> FakeUser | None:
        return next((u for u in self.users.values() if u.id_of(id_type) == user_id), None)

    def _chat_has_messages(self, chat_id: str) -> bool:
        return any(m.chat_id == chat_id for m in self._fake.message_by_id.values())

    def _calendar(self, request: web.Request, *, roles: tuple[str, ...]) -> FakeCalendar:
        calendar = self.calendars.get(request.match_info["calendar_id"])
        if calendar is None:
            raise FakeError(191000)
        if calendar.role not in roles:
            raise FakeError(191002)
        return calendar

    def _tasklist(self, guid: str) -> FakeTasklist:
        tasklist = self.tasklists.get(guid)
        if tasklist is None:
            raise FakeError(1470404, f"resource not found: tasklist {guid!r}")
        if not tasklist.app_is_member:
            raise FakeError(1470403)
        return tasklist

    def _table(self, request: web.Request) -> FakeBitableTable:
        app = self.bitables.get(request.match_info["app_token"])
        if app is None:
            raise _base_error(1254040)
        if not app.app_has_access:
            raise FakeError(91403, http_status=403)
        table = app.tables.get(request.match_info["table_id"])
        if table is None:
            raise _base_error(1254041)
        return table

    def _document(self, document_id: str) -> FakeDocument:
        document = self.documents.get(document_id)
        if document is None:
            raise FakeError(1770002, http_status=404)
        if not document.app_has_access:
            raise FakeError(1770032, http_status=403)
        return document


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
        self.workspace = FakeWorkspace(self)
        self.granted_scopes: list[str] = list(LARKGATE_SCOPES)  # GET /application/v6/scopes
        self._extra_routes: list[tuple[str, str, Any]] = []  # add_routes()
        self._public_paths: set[str] = {TOKEN_PATH}  # answered without a tenant token
        self.max_recorded: int | None = None  # keep only the last N requests
        self.revision = 0  # goes up after every answered request (and touch())
        self._changed = asyncio.Condition()
        self._notifying: set[asyncio.Task[None]] = set()

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> Self:
        app = web.Application(middlewares=[self._middleware], client_max_size=4 * 1024 * 1024)
        for method, path, handler in [*self._routes(), *self._extra_routes]:
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
            ("GET", "/open-apis/application/v6/scopes", self._app_scopes),
            *self.workspace.routes(),
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

    def add_routes(self, routes: list[tuple[str, str, Any]], *, public: bool = False) -> None:
        """Serve more routes on this domain (before ``start()``), e.g. the long-connection
        gateway of ``fakes.feishu_ws``; ``public`` ones need no tenant token."""
        if self._runner is not None:
            raise RuntimeError("add_routes() before start()")
        self._extra_routes.extend(routes)
        if public:
            self._public_paths.update(path for _, path, _ in routes)

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

    def touch(self) -> None:
        """Note a change made from outside a request (e.g. a card a callback replaced)."""
        self.revision += 1
        task = asyncio.get_running_loop().create_task(self._notify())
        self._notifying.add(task)
        task.add_done_callback(self._notifying.discard)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_for_change(self, revision: int, within: float) -> int:
        """The revision once it differs from ``revision``, or after ``within`` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within), self._changed:
                await self._changed.wait_for(lambda: self.revision != revision)
        return self.revision

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
        if self.max_recorded is not None and len(self.requests) > self.max_recorded:
            del self.requests[: len(self.requests) - self.max_recorded]
        request[_RECORDED] = recorded
        try:
            return await self._answer(request, handler)
        finally:
            self.revision += 1
            await self._notify()

    async def _answer(self, request: web.Request, handler: Any) -> web.StreamResponse:
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
            if request.path not in self._public_paths:
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

    async def _app_scopes(self, request: web.Request) -> web.Response:
        scopes = [
            {"scope_name": name, "grant_status": 1, "scope_type": "tenant"}
            for name in self.granted_scopes
        ]
        return self._ok({"scopes": scopes})

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
        self.workspace.check_receiver(id_type, receive_id, strict=self.strict)
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


def _user_id_type(request: web.Request) -> str:
    id_type = request.query.get("user_id_type", "open_id")
    if id_type not in ("open_id", "user_id", "union_id"):
        raise FakeError(99992402, "field validation failed: user_id_type")
    return id_type


def _query_int(
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


def _query_bool(request: web.Request, name: str) -> bool | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    # Feishu parses booleans like Go's strconv.ParseBool; the SDK sends str(True) == "True".
    if raw not in ("true", "True", "1", "false", "False", "0"):
        raise FakeError(99992402, f"field validation failed: {name}")
    return raw in ("true", "True", "1")


def _paged(
    items: list[Any], request: web.Request, *, default: int, maximum: int, minimum: int = 1
) -> dict[str, Any]:
    """One page of ``items`` with Feishu's ``has_more`` / ``page_token`` (an offset here)."""
    size = _query_int(request, "page_size", default, minimum, maximum)
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


def _mobile_key(mobile: str) -> str:
    digits = re.sub(r"\D", "", mobile)
    return digits[2:] if len(digits) == 13 and digits.startswith("86") else digits


def _time_info(value: Any, name: str) -> dict[str, str]:
    """A calendar TimeInfo as Feishu validates it: a second timestamp xor a date."""
    if not isinstance(value, dict) or ("timestamp" in value) == ("date" in value):
        raise FakeError(99992402, f"field validation failed: {name} needs timestamp or date")
    if "timestamp" in value and not str(value["timestamp"]).isdigit():
        raise FakeError(99992402, f"field validation failed: {name}.timestamp (seconds)")
    if "date" in value and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(value["date"])):
        raise FakeError(99992402, f"field validation failed: {name}.date (YYYY-MM-DD)")
    info = {key: str(v) for key, v in value.items() if key in ("timestamp", "date", "timezone")}
    info.setdefault("timezone", "Asia/Shanghai" if "timestamp" in info else "UTC")
    return info


def _event_time(info: Mapping[str, str], *, end: bool = False) -> int:
    if "timestamp" in info:
        return int(info["timestamp"])
    day = time.strptime(info["date"], "%Y-%m-%d")
    return int(timegm(day)) + (DAY_S if end else 0)


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


def _text_block(line: str) -> dict[str, Any]:
    return {"block_type": 2, "text": {"elements": [{"text_run": {"content": line}}], "style": {}}}


def _text_elements_ok(elements: Any) -> bool:
    return (
        isinstance(elements, list)
        and len(elements) > 0
        and all(
            isinstance(e, dict) and isinstance((e.get("text_run") or {}).get("content"), str)
            for e in elements
        )
    )

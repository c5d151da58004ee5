"""The emulator's shared state and the helpers every family answers with (``_ok``,
``_error``, log ids), plus the change notifications and request counts tests wait on."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from .wire import DEFAULT_MSGS, RecordedRequest

if TYPE_CHECKING:
    from .cardkit import CardOp, FakeCard
    from .faults import FaultRule, Hold
    from .messages import FakeMessage
    from .resources import FakeResource, ResourceFault
    from .uploads import UploadedFile, UploadedImage
    from .workspace import FakeWorkspace

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
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


@dataclass(frozen=True, slots=True)
class BotApp:
    """Another app's bot in the same tenant (``add_app``): its own tenant tokens, its own
    bot identity; what it sends names it as the sender."""

    app_id: str
    app_secret: str
    bot_open_id: str
    bot_name: str


# The app whose tenant token the request being answered carries ("" before one is checked).
_calling_app: contextvars.ContextVar[str] = contextvars.ContextVar("calling_app", default="")


class EmulatorCore:
    """The state of one emulated Feishu, shared by the family mixins of ``FakeFeishu``."""

    # Set by FakeFeishu once the rest is in place: seeding the workspace sends its history
    # through add_message.
    workspace: FakeWorkspace

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
        # A person's id -> their direct chat with the bot, where messages sent to them land.
        self.dm_chats: dict[str, str] = {}
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
        # Message resources and uploads (``resources``): (message_id, key) -> file.
        self.resources: dict[tuple[str, str], FakeResource] = {}
        self.uploaded_images: dict[str, UploadedImage] = {}  # image_key -> upload
        self.uploaded_files: dict[str, UploadedFile] = {}  # file_key -> upload
        self._resource_faults: list[ResourceFault] = []
        self.hold_body_s = 10.0  # how long a "hold_body" fault keeps a body back
        self.rate_limited: list[CardOp] = []
        self._card_ids = itertools.count(7355372766134157313)
        self._tokens: dict[str, float] = {}  # token -> expiry (time.monotonic)
        self._token_apps: dict[str, str] = {}  # token -> the app it was issued to
        self._current_tokens: dict[str, str] = {}  # app_id -> its newest token
        # Other apps' bots in this tenant (``add_app``), by app_id.
        self.apps: dict[str, BotApp] = {}
        self._faults: list[FaultRule] = []
        self._slow: list[FaultRule] = []
        self._holds: list[Hold] = []
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._closing = asyncio.Event()
        self.granted_scopes: list[str] = list(LARKGATE_SCOPES)  # GET /application/v6/scopes
        # Apps made by one-scan registration (``registration``): app_id -> secret; the
        # token endpoint accepts them beside the main app.
        self.registered_apps: dict[str, str] = {}
        self._extra_routes: list[tuple[str, str, Any]] = []  # add_routes()
        self._public_paths: set[str] = {TOKEN_PATH}  # answered without a tenant token
        self.max_recorded: int | None = None  # keep only the last N requests
        self.revision = 0  # goes up after every answered request (and touch())
        self._changed = asyncio.Condition()
        self._notifying: set[asyncio.Task[None]] = set()

    def add_app(
        self, app_id: str, app_secret: str, bot_open_id: str, bot_name: str = "bot"
    ) -> BotApp:
        """One more app's bot in this tenant: it gets tenant tokens of its own, its
        ``bot/v3/info`` is its own, and the messages it sends name it as their sender."""
        app = self.apps[app_id] = BotApp(app_id, app_secret, bot_open_id, bot_name)
        return app

    @property
    def calling_app_id(self) -> str:
        """The app whose tenant token the request being answered carries."""
        return _calling_app.get() or self.app_id

    def _calling_app_is(self, token: str) -> None:
        _calling_app.set(self._token_apps.get(token, self.app_id))

    # -- answers --------------------------------------------------------------------

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

    def _log_id(self) -> str:
        return f"fake-log-{next(self._ids):06d}"

    # -- changes and counts ---------------------------------------------------------

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

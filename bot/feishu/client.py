"""The one way larkgate talks to the Feishu OpenAPI: lark-oapi's async calls, made safe.

What this wrapper adds to the SDK (see research/lark-sdk.md for why each is needed):

- Tokens: the SDK's own tenant-token path is a blocking HTTP call inside its async
  methods and never refetches after 99991663. The lark client is built with
  ``enable_set_token(True)`` and *no* app secret (so that path can never run), and every
  call carries a token from :class:`~bot.feishu.tokens.TenantTokenManager`. A token
  error refreshes the token and retries the call once.
- Errors: an answer with ``code != 0`` raises the exception mapped once in
  :mod:`bot.feishu.errors`; an SDK exception (a gateway's HTML 502 page raises
  ``JSONDecodeError`` in the SDK, network errors raise aiohttp errors) becomes
  ``FeishuTransportError``. Apart from the token retry nothing is retried here:
  ``FeishuTransportError`` and ``FeishuRateLimited`` are ``retryable`` and the caller
  decides (a streaming writer skips a frame, a reply is resent with the same ``uuid``).
- Counting: ``call_counts[endpoint]`` counts every HTTP attempt (the free tier allows
  10,000 calls a month) and ``error_counts[(endpoint, code)]`` every failure
  (``code`` is None when there was no usable answer); an optional ``on_call(endpoint,
  code)`` observer hears of each attempt (the app's metrics).
- Pooling: the SDK opens a new ``httpx.AsyncClient`` per call, and building one costs
  about 50-70 ms of CPU (a fresh SSL context loads the CA bundle) before any handshake.
  Requests are built with the SDK's generated builders and parsed into its models, but
  sent over one keep-alive client (:class:`~bot.feishu.transport.PooledTransport`).
- CardKit (streaming cards): ``create_card`` → ``reply_card_entity`` → repeated
  ``stream_element_content`` (the FULL text each time) → ``update_card_settings``
  (``{"config": {"streaming_mode": False, ...}}``) → optional ``update_card``. Every
  operation on one card takes a ``sequence`` that must strictly increase across all of
  them (the caller keeps one counter per card); a ``uuid`` makes a resend idempotent.
- Logging: the SDK's "Lark" logger gets no handler of its own (it printed to stdout
  and propagated too); our lines use %-style args, carry the Feishu code and log_id,
  and never contain the app secret or a token.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Self

import aiohttp
import lark_oapi as lark
from lark_oapi.api.auth.v3 import (
    InternalTenantAccessTokenRequest,
    InternalTenantAccessTokenRequestBody,
)
from lark_oapi.api.cardkit.v1 import (
    Card,
    ContentCardElementRequest,
    ContentCardElementRequestBody,
    CreateCardRequest,
    CreateCardRequestBody,
    SettingsCardRequest,
    SettingsCardRequestBody,
    UpdateCardRequest,
    UpdateCardRequestBody,
)
from lark_oapi.api.im.v1 import (
    CreateMessageRequest,
    CreateMessageRequestBody,
    GetChatMembersRequest,
    PatchMessageRequest,
    PatchMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)
from lark_oapi.core.exception import UnmarshalException

from bot.network import Network

from .answers import envelope
from .config import FeishuConfig
from .errors import (
    FeishuError,
    FeishuProxyAuthRequired,
    FeishuResourceTooLarge,
    FeishuTokenInvalid,
    FeishuTransportError,
)
from .resources import ResourceCalls
from .tokens import TenantTokenManager
from .transport import PooledTransport

logger = logging.getLogger(__name__)

# What escapes when there is no usable answer: aiohttp/network errors and timeouts,
# JSONDecodeError/UnicodeDecodeError (both ValueError) on a non-JSON body, and
# UnmarshalException when the JSON does not fit its model.
_TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, ValueError, UnmarshalException)


def _no_answer(endpoint: str, exc: Exception) -> FeishuTransportError:
    """What went wrong on the way, said so that whoever runs the bot knows where to look."""
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        # The proxy's own answer (to the CONNECT, or to a request it forwarded).
        kind = FeishuProxyAuthRequired if exc.status == 407 else FeishuTransportError
        reason = f"the proxy refused the request (HTTP {exc.status} {exc.message})"
        return kind(None, reason, endpoint=endpoint, http_status=exc.status)
    if isinstance(exc, TimeoutError):
        return FeishuTransportError(None, "no answer in time (TimeoutError)", endpoint=endpoint)
    reason = f"no usable answer ({type(exc).__name__}: {exc})"[:300]
    return FeishuTransportError(None, reason, endpoint=endpoint)


Send = Callable[[lark.RequestOption], Awaitable[Any]]

# CardKit's ``sequence`` is an int32 that must strictly increase per card.
_MAX_SEQUENCE = 2**31 - 1


@dataclass(frozen=True, slots=True)
class BotInfo:
    open_id: str
    app_name: str


@dataclass(frozen=True, slots=True)
class MemberPage:
    """One page of a chat's members: their open_ids, and the next page's token ("" after
    the last page)."""

    open_ids: tuple[str, ...]
    next_page: str = ""


# Feishu's largest page of chat members.
MEMBERS_PER_PAGE = 100


@dataclass(frozen=True, slots=True)
class SentMessage:
    message_id: str
    chat_id: str
    root_id: str | None
    thread_id: str | None


class FeishuClient(ResourceCalls):
    """Async Feishu API calls for one app. Build one per process; ``aclose()`` at the end.

    Message resources, message reads and uploads (``download_resource``, ``get_message``,
    ``upload_image``, ``upload_file``) come from :class:`~bot.feishu.resources.ResourceCalls`.
    """

    def __init__(
        self,
        config: FeishuConfig,
        *,
        timeout: float = 10.0,
        token_refresh_margin: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        on_call: Callable[[str, str], None] | None = None,
        network: Network | None = None,
    ) -> None:
        self._config = config
        # Told of every HTTP attempt: (endpoint, code), code "0" on success, Feishu's code
        # as text on a failure, "transport" when there was no usable answer (e.g. metrics).
        self._on_call = on_call
        # No .app_secret(): with enable_set_token and a token in every RequestOption the
        # SDK never fetches one itself; if a call ever lacks the token it fails loudly.
        self.sdk = (
            lark.Client.builder()
            .app_id(config.app_id)
            .domain(config.domain)
            .enable_set_token(True)
            .timeout(timeout)
            .log_level(lark.LogLevel.ERROR)
            .build()
        )
        _tame_sdk_logger()
        self.transport = PooledTransport(config.domain, timeout=timeout, network=network)
        self.tokens = TenantTokenManager(
            self._fetch_tenant_token, refresh_margin=token_refresh_margin, clock=clock
        )
        self.call_counts: Counter[str] = Counter()
        self.error_counts: Counter[tuple[str, int | None]] = Counter()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.tokens.aclose()
        await self.transport.aclose()

    # -- public calls ---------------------------------------------------------------

    async def bot_info(self) -> BotInfo:
        """The bot's own open_id and name (GET /open-apis/bot/v3/info)."""

        def send(option: lark.RequestOption) -> Awaitable[Any]:
            request = (
                lark.BaseRequest.builder()
                .http_method(lark.HttpMethod.GET)
                .uri("/open-apis/bot/v3/info")
                .token_types({lark.AccessTokenType.TENANT})
                .build()
            )
            return self.transport.send_raw_response(request, option)

        # No SDK model for this one: ``bot`` sits at the top level of the body, and
        # arequest() does not parse bodies (see research §5.4), so the body is ours to read.
        _, body = await self._call("bot.info", send)
        bot = body.get("bot")
        if not isinstance(bot, dict) or not isinstance(bot.get("open_id"), str):
            raise self._malformed("bot.info", "no bot.open_id in the answer")
        return BotInfo(open_id=bot["open_id"], app_name=str(bot.get("app_name") or ""))

    async def reply_message(
        self,
        message_id: str,
        *,
        msg_type: str,
        content: str,
        uuid: str | None = None,
        reply_in_thread: bool = False,
    ) -> SentMessage:
        """Reply to ``message_id``. ``content`` is the JSON string Feishu expects for
        ``msg_type``; the same ``uuid`` makes a resend return the first message."""

        def send(option: lark.RequestOption) -> Awaitable[Any]:
            body = ReplyMessageRequestBody.builder().content(content).msg_type(msg_type)
            if reply_in_thread:
                body.reply_in_thread(True)
            if uuid:
                body.uuid(uuid)
            request = (
                ReplyMessageRequest.builder().message_id(message_id).request_body(body.build())
            ).build()
            return self.transport.send_raw_response(request, option)

        _, body = await self._call("im.message.reply", send)
        return self._sent_message("im.message.reply", body.get("data"))

    async def send_message(
        self,
        receive_id_type: str,
        receive_id: str,
        *,
        msg_type: str,
        content: str,
        uuid: str | None = None,
    ) -> SentMessage:
        """Send a new message to a chat or user (``receive_id_type``: chat_id, open_id, ...)."""

        def send(option: lark.RequestOption) -> Awaitable[Any]:
            body = (
                CreateMessageRequestBody.builder()
                .receive_id(receive_id)
                .msg_type(msg_type)
                .content(content)
            )
            if uuid:
                body.uuid(uuid)
            request = (
                CreateMessageRequest.builder()
                .receive_id_type(receive_id_type)
                .request_body(body.build())
                .build()
            )
            return self.transport.send_raw_response(request, option)

        _, body = await self._call("im.message.create", send)
        return self._sent_message("im.message.create", body.get("data"))

    async def patch_message(self, message_id: str, content: str) -> None:
        """Replace the content of an interactive card message (``content``: card JSON)."""

        def send(option: lark.RequestOption) -> Awaitable[Any]:
            body = PatchMessageRequestBody.builder().content(content).build()
            request = PatchMessageRequest.builder().message_id(message_id).request_body(body)
            return self.transport.send_raw_response(request.build(), option)

        await self._call("im.message.patch", send)

    async def chat_members(self, chat_id: str, *, page_token: str = "") -> MemberPage:
        """One page of a group's members, as open_ids (GET
        /open-apis/im/v1/chats/:chat_id/members). Feishu leaves the chat's bots out, answers
        only while the bot is in the chat (232011 otherwise) and 232006 for a chat id it
        does not know; it wants one of the scopes im:chat, im:chat:readonly,
        im:chat.group_info:readonly or im:chat.members:read."""
        endpoint = "im.chat.members.get"
        builder = (
            GetChatMembersRequest.builder()
            .chat_id(chat_id)
            .member_id_type("open_id")
            .page_size(MEMBERS_PER_PAGE)
        )
        if page_token:
            builder.page_token(page_token)
        _, body = await self._request(endpoint, builder.build())
        data = body.get("data")
        if not isinstance(data, dict):
            raise self._malformed(endpoint, "no data in the answer")
        items = data.get("items") or []
        open_ids = tuple(
            str(item["member_id"])
            for item in (items if isinstance(items, list) else [])
            if isinstance(item, dict) and item.get("member_id")
        )
        following = str(data.get("page_token") or "") if data.get("has_more") else ""
        return MemberPage(open_ids, following)

    # -- CardKit: card entities and streaming -----------------------------------------

    async def create_card(self, card: Mapping[str, Any]) -> str:
        """Create a card entity from card JSON 2.0 (POST /cardkit/v1/cards); its ``card_id``.

        For streaming, ``card["config"]["streaming_mode"]`` is True and the text goes in
        ``markdown`` elements that carry an ``element_id``.
        """
        body = CreateCardRequestBody.builder().type("card_json").data(_card_json(card)).build()
        request = CreateCardRequest.builder().request_body(body).build()
        _, body = await self._request("cardkit.card.create", request)
        data = body.get("data")
        card_id = data.get("card_id") if isinstance(data, dict) else None
        if not isinstance(card_id, str) or not card_id:
            raise self._malformed("cardkit.card.create", "no card_id in the answer")
        return card_id

    async def stream_element_content(
        self,
        card_id: str,
        element_id: str,
        content: str,
        *,
        sequence: int,
        uuid: str | None = None,
    ) -> None:
        """Set the text of a markdown/plain_text element of a streaming card.

        ``content`` is the FULL text so far (1..100000 characters): when the old text is
        a prefix of it the card types out the difference, otherwise it replaces the text.
        """
        body = ContentCardElementRequestBody.builder().content(content)
        body.sequence(_checked_sequence(sequence))
        if uuid:
            body.uuid(uuid)
        request = (
            ContentCardElementRequest.builder()
            .card_id(card_id)
            .element_id(element_id)
            .request_body(body.build())
            .build()
        )
        await self._request("cardkit.element.content", request)

    async def update_card_settings(
        self,
        card_id: str,
        settings: Mapping[str, Any],
        *,
        sequence: int,
        uuid: str | None = None,
    ) -> None:
        """Change a card's settings, e.g. end streaming and set the chat-list preview::

            {"config": {"streaming_mode": False, "summary": {"content": "Done"}}}

        The ``config`` wrapper matters: Feishu ignores a bare ``{"streaming_mode": ...}``.
        """
        body = SettingsCardRequestBody.builder().settings(_card_json(settings))
        body.sequence(_checked_sequence(sequence))
        if uuid:
            body.uuid(uuid)
        request = SettingsCardRequest.builder().card_id(card_id).request_body(body.build())
        await self._request("cardkit.card.settings", request.build())

    async def update_card(
        self,
        card_id: str,
        card: Mapping[str, Any],
        *,
        sequence: int,
        uuid: str | None = None,
    ) -> None:
        """Replace the whole card entity with new card JSON 2.0 (PUT /cardkit/v1/cards/:id).

        The new card's ``config`` replaces the old one, ``streaming_mode`` included.
        """
        entity = Card.builder().type("card_json").data(_card_json(card)).build()
        body = UpdateCardRequestBody.builder().card(entity).sequence(_checked_sequence(sequence))
        if uuid:
            body.uuid(uuid)
        request = UpdateCardRequest.builder().card_id(card_id).request_body(body.build())
        await self._request("cardkit.card.update", request.build())

    async def reply_card_entity(
        self,
        message_id: str,
        card_id: str,
        *,
        uuid: str | None = None,
        reply_in_thread: bool = False,
    ) -> SentMessage:
        """Reply to ``message_id`` with a card entity. An entity can be sent only once."""
        return await self.reply_message(
            message_id,
            msg_type="interactive",
            content=_card_entity_content(card_id),
            uuid=uuid,
            reply_in_thread=reply_in_thread,
        )

    # -- any other endpoint ---------------------------------------------------------

    async def call(self, endpoint: str, request: lark.BaseRequest) -> dict[str, Any]:
        """Send a request built with one of lark-oapi's generated builders; its parsed body.

        The same plumbing as every method above: the tenant token (refreshed and the call
        retried once on a token error), ``call_counts[endpoint]``, and a ``code != 0``
        answer raised as the mapped :class:`FeishuError`. ``endpoint`` names the call in
        counts and logs, e.g. ``"calendar.event.list"``. The body is Feishu's whole
        envelope (``code``, ``msg``, ``data``). Only endpoints whose builder accepts a tenant
        token work here: one that takes a user token only is sent without a token.
        """
        _, body = await self._request(endpoint, request)
        return body

    async def call_as_user(
        self, endpoint: str, request: lark.BaseRequest, access_token: str
    ) -> dict[str, Any]:
        """:meth:`call` with a person's user access token instead of the tenant token.

        One attempt, never retried here: a refused user token (FeishuTokenInvalid) or a
        missing user scope (FeishuUserScopeMissing) is for the caller to resolve with the
        person (refresh, or ask them to consent), not something a second send fixes.
        """
        if not access_token:
            raise ValueError("a user call needs the user's access token")
        option = lark.RequestOption.builder().user_access_token(access_token).build()

        def send(option: lark.RequestOption) -> Awaitable[Any]:
            return self.transport.send_raw_response(request, option)

        _, body = await self._send(endpoint, send, option)
        return body

    # -- plumbing -------------------------------------------------------------------

    async def _request(
        self, endpoint: str, request: lark.BaseRequest
    ) -> tuple[Any, dict[str, Any]]:
        """``_call`` for a request built once (the token travels in the option)."""

        def send(option: lark.RequestOption) -> Awaitable[Any]:
            return self.transport.send_raw_response(request, option)

        return await self._call(endpoint, send)

    async def _call(
        self, endpoint: str, send: Send, *, binary: bool = False
    ) -> tuple[Any, dict[str, Any]]:
        """One API call with the current token; on a token error, refresh and retry once.

        ``binary``: a 2xx answer is a file, not JSON (the body returned is then ``{}``).
        """
        token = await self.tokens.get()
        try:
            return await self._send(endpoint, send, _option(token), binary=binary)
        except FeishuTokenInvalid:
            self.tokens.invalidate(token)
        token = await self.tokens.get()
        return await self._send(endpoint, send, _option(token), binary=binary)

    async def _send(
        self, endpoint: str, send: Send, option: lark.RequestOption, *, binary: bool = False
    ) -> tuple[Any, dict[str, Any]]:
        """One HTTP attempt: count it, classify the outcome, return (SDK response, body)."""
        self.call_counts[endpoint] += 1
        try:
            response = await send(option)
            body = envelope(endpoint, response.raw, binary=binary)
        except _TRANSPORT_ERRORS as exc:
            error = _no_answer(endpoint, exc)
            self._record(error)
            self._observe(endpoint, error)
            raise error from exc
        except FeishuError as exc:
            self._record(exc)
            self._observe(endpoint, exc)
            raise
        self._observe(endpoint, None)
        return response, body

    def _observe(self, endpoint: str, error: FeishuError | None) -> None:
        if self._on_call is None:
            return
        if error is None:
            code = "0"
        elif error.code:
            code = str(error.code)
        elif isinstance(error, FeishuResourceTooLarge):  # refused by us, not by Feishu
            code = "too_large"
        else:  # no Feishu code: no usable answer, or an HTTP 429 without one
            code = f"http_{error.http_status}" if error.http_status == 429 else "transport"
        self._on_call(endpoint, code)

    async def _fetch_tenant_token(self) -> tuple[str, float]:
        """The TenantTokenManager's fetcher: the SDK's generated async token call."""
        endpoint = "auth.tenant_token"
        credentials = (
            InternalTenantAccessTokenRequestBody.builder()
            .app_id(self._config.app_id)
            .app_secret(self._config.app_secret)
            .build()
        )
        request = InternalTenantAccessTokenRequest.builder().request_body(credentials).build()

        def send(option: lark.RequestOption) -> Awaitable[Any]:
            return self.transport.send_raw_response(request, option)

        try:
            _, body = await self._send(endpoint, send, lark.RequestOption())
        except FeishuError as exc:
            if exc.retryable or isinstance(exc, FeishuTransportError):
                raise  # the network's (e.g. a proxy's 407), not Feishu's word on the app
            # Usually a wrong app id or secret (10014): say which setting to check.
            msg = self._redact(exc.msg)
            raise FeishuError(
                exc.code,
                f"Feishu refused the credentials of app {self._config.app_id}: {msg} "
                "(check FEISHU_APP_ID and FEISHU_APP_SECRET)",
                exc.log_id,
                endpoint,
                http_status=exc.http_status,
            ) from None
        # The token answer is flat: no "data" envelope, so the SDK model has nothing in it.
        token, expire = body.get("tenant_access_token"), body.get("expire")
        if not isinstance(token, str) or not token or not isinstance(expire, int | float):
            raise self._malformed(endpoint, "no tenant_access_token/expire in the answer")
        return token, float(expire)

    def _record(self, error: FeishuError) -> None:
        self.error_counts[(error.endpoint, error.code)] += 1
        logger.warning(
            "feishu %s failed: code=%s msg=%s log_id=%s http_status=%s",
            error.endpoint,
            error.code,
            self._redact(error.msg),
            error.log_id,
            error.http_status,
        )

    def _malformed(self, endpoint: str, what: str) -> FeishuTransportError:
        error = FeishuTransportError(None, f"malformed answer: {what}", endpoint=endpoint)
        self._record(error)
        return error

    def _sent_message(self, endpoint: str, data: Any) -> SentMessage:
        if not isinstance(data, dict) or not isinstance(data.get("message_id"), str):
            raise self._malformed(endpoint, "no message in the answer")
        return SentMessage(
            message_id=data["message_id"],
            chat_id=str(data.get("chat_id") or ""),
            root_id=data.get("root_id") or None,
            thread_id=data.get("thread_id") or None,
        )

    def _redact(self, text: str) -> str:
        # Feishu does not echo the secret, but a proxy's error page might.
        secret = self._config.app_secret
        return text.replace(secret, "***") if secret else text


def _option(token: str) -> lark.RequestOption:
    return lark.RequestOption.builder().tenant_access_token(token).build()


def _card_json(value: Mapping[str, Any]) -> str:
    # Compact and unescaped: Feishu's 30 KB card limit counts bytes.
    return json.dumps(dict(value), ensure_ascii=False, separators=(",", ":"))


def _card_entity_content(card_id: str) -> str:
    return json.dumps({"type": "card", "data": {"card_id": card_id}})


def _checked_sequence(sequence: int) -> int:
    # A programming error, caught before it costs an API call.
    if isinstance(sequence, bool) or not isinstance(sequence, int):
        raise TypeError(f"sequence must be an int, not {type(sequence).__name__}")
    if not 1 <= sequence <= _MAX_SEQUENCE:
        raise ValueError(f"sequence {sequence} is outside 1..{_MAX_SEQUENCE}")
    return sequence


def _tame_sdk_logger() -> None:
    # The "Lark" logger writes to its own stdout handler *and* propagates, so every
    # line shows twice; every Client build also resets its (global) level.
    sdk_logger = logging.getLogger("Lark")
    sdk_logger.handlers.clear()
    sdk_logger.setLevel(logging.ERROR)
    sdk_logger.propagate = True

"""Feishu's long connection (``FEISHU_EVENT_MODE=ws``): events and card callbacks over a
WebSocket the bot opens, instead of webhooks Feishu POSTs.

Why not ``lark_oapi.ws.Client``: its ``start()`` blocks on a module-level event loop
captured at import, its endpoint fetch is a synchronous ``requests`` call, it has no
liveness watchdog of its own, retries at a fixed interval, logs the connection URL (which
carries an access key and a ticket) and gives no state to report. So the connection is
driven here, as one task on the app's loop, over aiohttp (already the app's HTTP stack),
while the wire pieces come from the SDK: the generated ``pbbp2.Frame`` protobuf, the
header names and error constants (``lark_oapi.ws.const``) and the frame/message types
(``lark_oapi.ws.enum``). The protocol, as the SDK (1.7.5, ``lark_oapi/ws/client.py``)
speaks it:

1. ``POST {domain}/callback/ws/endpoint`` with ``{"AppID", "AppSecret"}`` answers
   ``{"code": 0, "data": {"URL": "wss://…?device_id=…&service_id=…", "ClientConfig":
   {"PingInterval", "ReconnectInterval", "ReconnectNonce", "ReconnectCount"}}}``
   (seconds); any other code is a refusal (bad credentials, or no long connection).
2. Binary frames, each a ``Frame``: ``method`` 0 is control (header ``type`` ping/pong;
   a pong's payload may carry a new ClientConfig), 1 is data (headers ``type`` event/card,
   ``message_id``, ``trace_id``, ``sum``/``seq`` when a payload is split in parts).
3. The client pings every PingInterval. Every data frame is answered by sending it back
   with the payload ``{"code": 200}``, plus ``"data": base64(JSON answer)`` for a card
   callback (``card.action.trigger`` arrives as a ``type=event`` frame), and a ``biz_rt``
   header (handler milliseconds). Payloads are plain schema-2.0 envelopes: no encryption,
   no signature; the connection itself is authenticated.

Each data frame is handled in its own task, so a slow handler holds up neither pings nor
other frames; the event handler only records the event (as behind the webhook), so the
ACK follows within milliseconds.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import json
import logging
import random
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

import aiohttp
from lark_oapi.ws.const import (
    GEN_ENDPOINT_URI,
    HEADER_BIZ_RT,
    HEADER_HANDSHAKE_AUTH_ERRCODE,
    HEADER_HANDSHAKE_MSG,
    HEADER_HANDSHAKE_STATUS,
    HEADER_MESSAGE_ID,
    HEADER_SEQ,
    HEADER_SUM,
    HEADER_TRACE_ID,
    HEADER_TYPE,
)
from lark_oapi.ws.enum import FrameType, MessageType
from lark_oapi.ws.pb.google.protobuf.message import DecodeError
from lark_oapi.ws.pb.pbbp2_pb2 import Frame

from bot.network import Network, ProxiedSession

from .config import FeishuConfig
from .routes import CardHandler, EventHandler
from .transport import USER_AGENT
from .webhook import Refused, VerifiedEvent, open_trusted

logger = logging.getLogger(__name__)

CARD_ACTION_EVENT = "card.action.trigger"
# Feishu's own defaults, used until the endpoint (or a pong) says otherwise.
DEFAULT_PING_INTERVAL = 120.0
# /healthz: down for longer than this (starting up, or reconnecting) is "unavailable".
DOWN_GRACE_SECONDS = 60.0
# What the user sees when the card handler fails (as the webhook route answers).
CARD_ERROR_ANSWER = {"toast": {"type": "error", "content": "Something went wrong; try again."}}

State = Literal["connecting", "connected", "reconnecting", "stopped"]


@dataclass(frozen=True, slots=True)
class LongConnectionHealth:
    """The long connection as /healthz and metrics see it; times are Unix seconds.

    ``state``: ``connecting`` until the first connection is up, ``connected``,
    ``reconnecting`` after a drop or a failed attempt, ``stopped`` after ``aclose()``.
    ``down_since``: when the connection was last lost (or the start), None while up.
    ``reconnects``: attempts after the first one, failed ones included; ``failures``:
    attempts that failed in a row (reset once a connection receives a frame).
    """

    state: State
    connected_since: float | None = None
    down_since: float | None = None
    last_frame_at: float | None = None
    reconnects: int = 0
    failures: int = 0
    last_error: str | None = None

    def serving(self, now: float, *, grace: float = DOWN_GRACE_SECONDS) -> bool:
        """Up, or down for at most ``grace`` seconds: a start or a brief reconnect."""
        if self.state == "connected":
            return True
        if self.state == "stopped" or self.down_since is None:
            return False
        return now - self.down_since <= grace

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Feishu's ``ClientConfig`` (seconds); None where it said nothing usable."""

    ping_interval: float | None = None
    reconnect_interval: float | None = None
    reconnect_nonce: float | None = None
    reconnect_count: int | None = None  # reported only: we retry until aclose()

    @classmethod
    def parse(cls, raw: object) -> ServerConfig:
        if not isinstance(raw, Mapping):
            return cls()

        def seconds(name: str, *, positive: bool = False) -> float | None:
            value = raw.get(name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                return None
            return float(value) if value > 0 or (value == 0 and not positive) else None

        count = raw.get("ReconnectCount")
        return cls(
            ping_interval=seconds("PingInterval", positive=True),
            reconnect_interval=seconds("ReconnectInterval"),
            reconnect_nonce=seconds("ReconnectNonce"),
            reconnect_count=count
            if isinstance(count, int) and not isinstance(count, bool)
            else None,
        )

    def updated(self, newer: ServerConfig) -> ServerConfig:
        """This config with every value ``newer`` gives replacing ours."""
        given = {k: v for k, v in asdict(newer).items() if v is not None}
        return replace(self, **given)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where to connect. ``url`` carries credentials (access key, ticket): never log it."""

    url: str = field(repr=False)
    host: str
    device_id: str
    service_id: int
    config: ServerConfig


class ConnectRefused(Exception):
    """Feishu refused the endpoint request or the handshake; ``code`` is its error code
    (or the HTTP status when the answer had none)."""

    def __init__(self, where: str, code: int | str | None, msg: str) -> None:
        super().__init__(f"{where} refused: code {code}: {msg}")
        self.code = code


def parse_endpoint(status: int, body: bytes) -> Endpoint:
    """The endpoint answer, or ConnectRefused saying why there is no URL."""
    try:
        answer = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        answer = None
    if not isinstance(answer, Mapping):
        raise ConnectRefused("endpoint request", status, f"HTTP {status}, not a JSON object")
    code, msg = answer.get("code"), str(answer.get("msg") or "")
    if status != 200 or code != 0:
        raise ConnectRefused("endpoint request", code if code is not None else status, msg)
    data = answer.get("data")
    url = data.get("URL") if isinstance(data, Mapping) else None
    if not isinstance(url, str) or not url:
        raise ConnectRefused("endpoint request", code, "answer without data.URL")
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    try:
        service_id = int(query.get("service_id", ["0"])[0])
    except ValueError:
        raise ConnectRefused("endpoint request", code, "service_id is not a number") from None
    return Endpoint(
        url=url,
        host=parts.netloc,
        device_id=query.get("device_id", [""])[0],
        service_id=service_id,
        config=ServerConfig.parse(data.get("ClientConfig") if isinstance(data, Mapping) else None),
    )


class _Parts:
    """Payloads split over ``sum`` data frames (``seq`` 0..sum-1) under one message_id.

    Kept ``ttl`` seconds, as the SDK does; a message whose parts never all arrive is
    dropped unanswered, and Feishu delivers it again.
    """

    def __init__(self, ttl: float = 5.0) -> None:
        self._ttl = ttl
        self._pending: dict[str, tuple[float, list[bytes | None]]] = {}

    def add(self, message_id: str, total: int, seq: int, chunk: bytes, now: float) -> bytes | None:
        """The whole payload once every part is in; None while parts are missing."""
        for stale in [k for k, (expires, _) in self._pending.items() if expires <= now]:
            del self._pending[stale]
        if total <= 1:
            return chunk
        if not 0 <= seq < total:
            raise ValueError(f"part {seq} of {total}")
        _, parts = self._pending.setdefault(message_id, (now + self._ttl, [None] * total))
        if len(parts) != total:
            raise ValueError(f"{total} parts announced, {len(parts)} before")
        parts[seq] = chunk
        if any(part is None for part in parts):
            return None
        del self._pending[message_id]
        return b"".join(part for part in parts if part is not None)


class _Link:
    """One open WebSocket: sends are serialised; ``last_seen`` feeds the watchdog."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, endpoint: Endpoint, now: float):
        self.ws = ws
        self.endpoint = endpoint
        self.last_seen = now
        self.proven = False  # a frame arrived: Feishu accepted us
        self.config_changed = asyncio.Event()  # wakes the keep-alive to reschedule
        self._lock = asyncio.Lock()

    async def send(self, frame: Frame) -> None:
        data = frame.SerializeToString()
        async with self._lock:
            await self.ws.send_bytes(data)


class LongConnection:
    """Receives events and card callbacks over Feishu's long connection until ``aclose()``.

    ``on_event`` and ``on_card`` are the functions behind the webhook routes: the event
    handler records the event and returns (an exception means "not recorded": answered
    500, so Feishu delivers it again); the card handler returns the callback's answer
    within Feishu's 3 s. Timings (``ping_interval`` overrides Feishu's, ``backoff_*``
    apply until Feishu's ClientConfig says otherwise) are parameters so tests can shrink
    them.
    """

    def __init__(
        self,
        config: FeishuConfig,
        *,
        on_event: EventHandler,
        on_card: CardHandler,
        ping_interval: float | None = None,
        silence_factor: float = 2.5,
        backoff_base: float = 1.0,
        backoff_cap: float = 60.0,
        http_timeout: float = 10.0,
        close_timeout: float = 2.0,
        close_grace: float = 2.0,
        heartbeat: float | None = 30.0,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
        network: Network | None = None,
    ) -> None:
        self._config = config
        self._network = network if network is not None else Network()
        self._on_event = on_event
        self._on_card = on_card
        self._ping_override = ping_interval
        self._silence_factor = silence_factor
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._http_timeout = http_timeout
        self._close_timeout = close_timeout
        self._close_grace = close_grace
        self._heartbeat = heartbeat
        self._rng = rng or random.Random()
        self._clock = clock
        self._server = ServerConfig()
        self._parts = _Parts()
        self._health = LongConnectionHealth("connecting")
        self._task: asyncio.Task[None] | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._token_warned = False

    @property
    def health(self) -> LongConnectionHealth:
        return self._health

    def start(self) -> None:
        """Connect in the background (call from the running loop)."""
        if self._task is not None:
            raise RuntimeError("the long connection is already started")
        self._health = replace(self._health, down_since=self._clock())
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="feishu-long-connection"
        )

    async def aclose(self) -> None:
        """Stop reading, let running handlers send their ACKs (up to ``close_grace``),
        then close the connection. Frames not answered by then are delivered again."""
        if self._stopping:
            return
        self._stopping = True
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=self._close_grace)
        for task in [*self._handlers, *([self._task] if self._task else [])]:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        self._health = replace(self._health, state="stopped", connected_since=None)
        logger.info("long connection: stopped")

    # -- the connection loop -----------------------------------------------------------

    async def _run(self) -> None:
        # The endpoint request and the WebSocket upgrade both go through the proxy the
        # environment sets for their host (the upgrade in a CONNECT tunnel, TLS inside).
        # No total timeout on the session: it would run for as long as the socket lives
        # (each request below has its own bound).
        async with self._network.client_session(
            headers={"User-Agent": USER_AGENT}, timeout=aiohttp.ClientTimeout(total=None)
        ) as session:
            attempt = 0
            while True:
                if attempt:
                    delay = self._next_delay()
                    logger.info("long connection: connecting again in %.1f s", delay)
                    await asyncio.sleep(delay)
                    self._health = replace(self._health, reconnects=self._health.reconnects + 1)
                attempt += 1
                try:
                    link = await self._connect(session)
                except ConnectRefused as exc:
                    logger.error(
                        "long connection: %s (check FEISHU_APP_ID / FEISHU_APP_SECRET and that "
                        "the app receives events through the long connection)",
                        exc,
                    )
                    self._lost(str(exc), failed=True)
                    continue
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    logger.warning("long connection: cannot connect: %s", _describe(exc))
                    self._lost(f"cannot connect: {_describe(exc)}", failed=True)
                    continue
                except Exception as exc:  # nothing may end the loop but aclose()
                    logger.exception("long connection: connecting failed")
                    self._lost(f"cannot connect: {_describe(exc)}", failed=True)
                    continue
                try:
                    reason = await self._serve(link)
                except Exception as exc:  # a bug or a broken socket must not end the loop
                    logger.exception("long connection: failed while connected")
                    reason = f"failed while connected: {_describe(exc)}"
                finally:
                    with contextlib.suppress(Exception):
                        await link.ws.close()
                logger.warning("long connection: lost (%s)", reason)
                self._lost(reason, failed=not link.proven)

    async def _connect(self, session: ProxiedSession) -> _Link:
        async with session.post(
            self._config.domain.rstrip("/") + GEN_ENDPOINT_URI,
            json={"AppID": self._config.app_id, "AppSecret": self._config.app_secret},
            headers={"locale": "zh"},
            timeout=aiohttp.ClientTimeout(total=self._http_timeout),
        ) as response:
            endpoint = parse_endpoint(response.status, await response.read())
        self._server = self._server.updated(endpoint.config)
        try:
            async with asyncio.timeout(self._http_timeout):
                ws = await session.ws_connect(
                    endpoint.url,
                    heartbeat=self._heartbeat,
                    timeout=aiohttp.ClientWSTimeout(ws_close=self._close_timeout),
                )
        except aiohttp.WSServerHandshakeError as exc:
            raise _handshake_refused(exc) from exc
        link = _Link(ws, endpoint, asyncio.get_running_loop().time())
        now = self._clock()
        self._health = replace(
            self._health, state="connected", connected_since=now, down_since=None
        )
        logger.info(
            "long connection: connected to %s (device %s, ping every %.0f s)",
            endpoint.host,
            endpoint.device_id,
            self._ping_interval(),
        )
        return link

    def _lost(self, reason: str, *, failed: bool) -> None:
        health = self._health
        self._health = replace(
            health,
            state="connecting" if health.state == "connecting" else "reconnecting",
            connected_since=None,
            down_since=health.down_since or self._clock(),
            failures=health.failures + 1 if failed else 0,
            last_error=reason,
        )

    def _next_delay(self) -> float:
        """Full jitter: uniform over [0, window].

        After a drop of a working connection the window is Feishu's ReconnectNonce (it
        spreads its clients' returns); after failed attempts it doubles from
        ``backoff_base`` up to the cap: Feishu's ReconnectInterval if it gave one, else
        ``backoff_cap``.
        """
        failures = self._health.failures
        if failures == 0:
            nonce = self._server.reconnect_nonce
            window = self._backoff_base if nonce is None else nonce
        else:
            interval = self._server.reconnect_interval
            cap = self._backoff_cap if interval is None else interval
            window = min(cap, self._backoff_base * 2 ** min(failures - 1, 30))
        return self._rng.uniform(0.0, window)

    def _ping_interval(self) -> float:
        return self._ping_override or self._server.ping_interval or DEFAULT_PING_INTERVAL

    async def _serve(self, link: _Link) -> str:
        """Read and keep alive until one of them ends; returns why the connection ended."""
        tasks = [
            asyncio.create_task(self._read(link), name="feishu-long-connection-read"),
            asyncio.create_task(self._keep_alive(link), name="feishu-long-connection-ping"),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            return next(iter(done)).result()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _read(self, link: _Link) -> str:
        async for message in link.ws:
            if message.type is aiohttp.WSMsgType.BINARY:
                self._on_frame(link, message.data)
            elif message.type is aiohttp.WSMsgType.ERROR:
                return f"read error: {_describe(link.ws.exception())}"
            else:
                logger.warning("long connection: ignoring a %s message", message.type.name)
        error = link.ws.exception()
        suffix = f": {_describe(error)}" if error is not None else ""
        return f"closed by the server (code {link.ws.close_code}){suffix}"

    async def _keep_alive(self, link: _Link) -> str:
        """Ping at Feishu's interval; a silence of ``silence_factor`` intervals (no pong,
        no data) means the connection is dead even if TCP has not noticed."""
        loop = asyncio.get_running_loop()
        last_ping: float | None = None
        while True:
            now = loop.time()
            # Read every round: a pong may change the interval.
            interval = self._ping_interval()
            if last_ping is None or now >= last_ping + interval:
                await link.send(_ping_frame(link.endpoint.service_id))
                last_ping = now
            next_ping = last_ping + interval
            deadline = link.last_seen + interval * self._silence_factor
            if now >= deadline:
                return (
                    f"no pong or data for {now - link.last_seen:.1f} s (ping every {interval:g} s)"
                )
            link.config_changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(next_ping, deadline) - now):
                    await link.config_changed.wait()

    # -- frames --------------------------------------------------------------------------

    def _on_frame(self, link: _Link, data: bytes) -> None:
        link.last_seen = asyncio.get_running_loop().time()
        self._health = replace(self._health, last_frame_at=self._clock())
        if not link.proven:
            link.proven = True
            self._health = replace(self._health, failures=0)
        try:
            frame = Frame.FromString(data)
        except DecodeError as exc:
            logger.warning("long connection: undecodable frame (%d bytes): %s", len(data), exc)
            return
        headers = {h.key: h.value for h in frame.headers}
        if frame.method == FrameType.CONTROL.value:
            self._on_control(link, frame, headers)
        elif frame.method == FrameType.DATA.value:
            self._on_data(link, frame, headers)
        else:
            logger.warning("long connection: frame with unknown method %d ignored", frame.method)

    def _on_control(self, link: _Link, frame: Frame, headers: Mapping[str, str]) -> None:
        if headers.get(HEADER_TYPE) != MessageType.PONG.value or not frame.payload:
            return
        try:
            config = ServerConfig.parse(json.loads(frame.payload))
        except (ValueError, UnicodeDecodeError):
            logger.warning("long connection: pong with an unreadable ClientConfig")
            return
        updated = self._server.updated(config)
        if updated != self._server:
            self._server = updated
            link.config_changed.set()

    def _on_data(self, link: _Link, frame: Frame, headers: Mapping[str, str]) -> None:
        if self._stopping:
            return  # unanswered: Feishu delivers it again, here after a restart or elsewhere
        message_id = headers.get(HEADER_MESSAGE_ID, "")
        try:
            total, seq = int(headers.get(HEADER_SUM) or 1), int(headers.get(HEADER_SEQ) or 0)
            payload = self._parts.add(
                message_id, total, seq, frame.payload, asyncio.get_running_loop().time()
            )
        except ValueError as exc:
            logger.warning("long connection: frame %s has bad sum/seq: %s", message_id, exc)
            self._spawn(self._reply(link, frame, {"code": 400}, 0))
            return
        if payload is not None:
            self._spawn(self._answer(link, frame, headers, payload))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _answer(
        self, link: _Link, frame: Frame, headers: Mapping[str, str], payload: bytes
    ) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        message_id = headers.get(HEADER_MESSAGE_ID, "")
        kind = headers.get(HEADER_TYPE, "")
        if kind == MessageType.EVENT.value:
            result = await self._dispatch(payload, message_id, headers.get(HEADER_TRACE_ID, ""))
        else:
            # Legacy "card" frames (message cards v1) and unknown kinds: nothing here
            # handles them; acknowledged so Feishu does not keep redelivering.
            logger.warning(
                "long connection: %r frame %s not handled; acknowledged", kind, message_id
            )
            result = {"code": 200}
        await self._reply(link, frame, result, int((loop.time() - started) * 1000))

    async def _dispatch(self, payload: bytes, message_id: str, trace_id: str) -> dict[str, Any]:
        opened = open_trusted(payload)
        if isinstance(opened, Refused):
            logger.warning(
                "long connection: refused frame %s (trace %s): %s",
                message_id,
                trace_id,
                opened.reason,
            )
            return {"code": opened.status}
        self._check_token(opened)
        if opened.event_type == CARD_ACTION_EVENT:
            try:
                answer = _b64_json(await self._on_card(opened))
            except Exception:
                logger.exception("long connection: card callback %s failed", opened.event_id)
                answer = _b64_json(CARD_ERROR_ANSWER)
            return {"code": 200, "data": answer}
        try:
            await self._on_event(opened)
        except Exception:
            logger.exception(
                "long connection: event %s (%s) not recorded; Feishu will deliver it again",
                opened.event_id,
                opened.event_type,
            )
            return {"code": 500}
        return {"code": 200}

    def _check_token(self, event: VerifiedEvent) -> None:
        """The connection is authenticated, so a token mismatch is only worth a warning:
        it means FEISHU_VERIFICATION_TOKEN is stale, which webhook mode would refuse."""
        expected = self._config.verification_token
        header = event.envelope.get("header")
        token = header.get("token") if isinstance(header, Mapping) else None
        if self._token_warned or not expected or not isinstance(token, str) or not token:
            return
        if not hmac.compare_digest(expected.encode(), token.encode()):
            self._token_warned = True
            logger.warning(
                "long connection: events carry a verification token other than "
                "FEISHU_VERIFICATION_TOKEN; accepted here, but webhook mode would refuse them"
            )

    async def _reply(self, link: _Link, frame: Frame, result: Mapping[str, Any], ms: int) -> None:
        response = Frame()
        response.CopyFrom(frame)
        response.headers.add(key=HEADER_BIZ_RT, value=str(ms))
        response.payload = json.dumps(result, separators=(",", ":")).encode()
        try:
            await link.send(response)
        except Exception as exc:
            message_id = next((h.value for h in frame.headers if h.key == HEADER_MESSAGE_ID), "")
            logger.warning(
                "long connection: could not answer frame %s (%s); Feishu will deliver it again",
                message_id,
                _describe(exc),
            )


def _ping_frame(service_id: int) -> Frame:
    frame = Frame(SeqID=0, LogID=0, service=service_id, method=FrameType.CONTROL.value)
    frame.headers.add(key=HEADER_TYPE, value=MessageType.PING.value)
    return frame


def _b64_json(answer: Mapping[str, Any]) -> str:
    text = json.dumps(dict(answer), ensure_ascii=False, separators=(",", ":"))
    return base64.b64encode(text.encode()).decode("ascii")


def _handshake_refused(exc: aiohttp.WSServerHandshakeError) -> ConnectRefused:
    headers: Mapping[str, str] = exc.headers or {}
    status = headers.get(HEADER_HANDSHAKE_STATUS) or exc.status
    msg = headers.get(HEADER_HANDSHAKE_MSG) or exc.message or ""
    auth_code = headers.get(HEADER_HANDSHAKE_AUTH_ERRCODE)
    if auth_code:
        msg = f"{msg} (auth error {auth_code})"
    return ConnectRefused("handshake", status, msg)


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

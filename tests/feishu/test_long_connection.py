"""The long connection against a fake gateway that speaks Feishu's protocol (pbbp2 frames)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import pytest

from bot.feishu.config import FeishuConfig
from bot.feishu.long_connection import (
    ConnectRefused,
    LongConnection,
    LongConnectionHealth,
    parse_endpoint,
)
from bot.feishu.webhook import VerifiedEvent

from fakes.feishu_push import card_action_event, dumps, message_event
from fakes.feishu_ws import FakeLongConnection
from support.feishu import feishu_config
from support.waiting import wait_until

TOKEN = "vt-ws"
# Feishu's ClientConfig, shrunk: ping every 0.1 s, reconnect jitter within 0.05 s.
FAST = {"ReconnectCount": -1, "ReconnectInterval": 0.4, "ReconnectNonce": 0.05, "PingInterval": 0.1}
LOGGER = "bot.feishu.long_connection"


class Handlers:
    """What the app would plug in: record events, answer card callbacks."""

    def __init__(self) -> None:
        self.events: list[VerifiedEvent] = []
        self.cards: list[VerifiedEvent] = []
        self.card_answer: Mapping[str, Any] = {"toast": {"type": "success", "content": "好的"}}
        self.before_event: Callable[[VerifiedEvent], Awaitable[None]] | None = None
        self.fail_events = False
        self.fail_cards = False

    async def on_event(self, event: VerifiedEvent) -> None:
        if self.before_event is not None:
            await self.before_event(event)
        if self.fail_events:
            raise RuntimeError("database unavailable")
        self.events.append(event)

    async def on_card(self, event: VerifiedEvent) -> Mapping[str, Any]:
        if self.fail_cards:
            raise RuntimeError("governance exploded")
        self.cards.append(event)
        return self.card_answer


class Widest(random.Random):
    """Full jitter at its upper bound, so backoff windows can be measured."""

    def uniform(self, a: float, b: float) -> float:
        return b


@pytest.fixture
async def gateway() -> AsyncIterator[FakeLongConnection]:
    async with FakeLongConnection(client_config=FAST) as fake:
        yield fake


@pytest.fixture
def handlers() -> Handlers:
    return Handlers()


def config_for(gateway: FakeLongConnection, **changes: Any) -> FeishuConfig:
    return feishu_config(gateway, **({"verification_token": TOKEN, "encrypt_key": ""} | changes))


@asynccontextmanager
async def running(
    gateway: FakeLongConnection, handlers: Handlers, config: FeishuConfig | None = None, **kw: Any
) -> AsyncIterator[LongConnection]:
    kw.setdefault("backoff_base", 0.02)
    kw.setdefault("backoff_cap", 0.2)
    kw.setdefault("heartbeat", None)
    connection = LongConnection(
        config or config_for(gateway), on_event=handlers.on_event, on_card=handlers.on_card, **kw
    )
    connection.start()
    try:
        yield connection
    finally:
        await connection.aclose()


def message(message_id: str, **fields: Any) -> dict[str, Any]:
    fields.setdefault("verification_token", TOKEN)
    fields.setdefault("text", "hi")
    return message_event(message_id=message_id, chat_id="oc_1", **fields)


async def test_an_event_frame_reaches_on_event_and_is_acknowledged(gateway, handlers):
    async with running(gateway, handlers) as connection:
        await gateway.wait_connections(1)
        envelope = message("om_1")
        frame_id = await gateway.push_event(envelope)
        answer = await gateway.response_to(frame_id)
        assert connection.health.state == "connected"
    assert answer.code == 200
    assert answer.payload == {"code": 200}
    assert answer.headers["message_id"] == frame_id and answer.headers["type"] == "event"
    assert int(answer.headers["biz_rt"]) >= 0
    (event,) = handlers.events
    assert event.event_type == "im.message.receive_v1"
    assert event.event_id == envelope["header"]["event_id"]
    assert event.envelope == envelope
    assert gateway.endpoint_requests == [{"AppID": "cli_test", "AppSecret": "secret"}]


async def test_a_card_callback_is_answered_in_the_response_frame(gateway, handlers):
    handlers.card_answer = {
        "toast": {"type": "success", "content": "Approved ✓"},
        "card": {"type": "raw", "data": {"schema": "2.0", "body": {"elements": []}}},
    }
    async with running(gateway, handlers):
        await gateway.wait_connections(1)
        envelope = card_action_event(verification_token=TOKEN, value={"action": "approve"})
        answer = await gateway.response_to(await gateway.push_event(envelope))
    assert answer.code == 200
    assert isinstance(answer.payload["data"], str)  # base64 of the JSON answer
    assert answer.data == handlers.card_answer
    (card,) = handlers.cards
    assert card.event_type == "card.action.trigger"
    assert not handlers.events


async def test_a_payload_split_over_frames_is_reassembled(gateway, handlers):
    async with running(gateway, handlers):
        await gateway.wait_connections(1)
        envelope = message("om_parts", text="a long message " * 50)
        frame_id = await gateway.push_event(envelope, parts=3)
        answer = await gateway.response_to(frame_id)
    assert answer.code == 200
    assert [e.envelope for e in handlers.events] == [envelope]
    assert [r.message_id for r in gateway.responses] == [frame_id]  # one answer, not three


async def test_a_slow_handler_holds_up_neither_pongs_nor_other_frames(gateway, handlers):
    release = asyncio.Event()

    async def hold_the_slow_one(event: VerifiedEvent) -> None:
        if event.envelope["event"]["message"]["message_id"] == "om_slow":
            await release.wait()

    handlers.before_event = hold_the_slow_one
    async with running(gateway, handlers) as connection:
        link = await gateway.wait_connections(1)
        slow = await gateway.push_event(message("om_slow"))
        fast = await gateway.push_event(message("om_fast"))
        assert (await gateway.response_to(fast)).code == 200
        pongs = link.pongs
        await wait_until(lambda: link.pongs >= pongs + 3, within=2.0)  # 0.3 s of pings
        assert not [r for r in gateway.responses if r.message_id == slow]
        assert connection.health.state == "connected" and len(gateway.connections) == 1
        release.set()
        assert (await gateway.response_to(slow)).code == 200
    assert [e.envelope["event"]["message"]["message_id"] for e in handlers.events] == [
        "om_fast",
        "om_slow",
    ]


@pytest.mark.parametrize("abrupt", [False, True], ids=["closed", "socket killed"])
async def test_a_dropped_connection_is_reopened(gateway, handlers, abrupt, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    async with running(gateway, handlers) as connection:
        await gateway.wait_connections(1)
        await wait_until(lambda: connection.health.last_frame_at is not None)
        await gateway.drop(abrupt=abrupt)
        await gateway.wait_connections(2)
        await wait_until(lambda: connection.health.state == "connected")
        health = connection.health
        assert health.reconnects == 1 and health.failures == 0
        assert health.down_since is None and health.connected_since is not None
        assert health.last_error is not None
        frame_id = await gateway.push_event(message("om_after"))
        answer = await gateway.response_to(frame_id)
    assert answer.connection == 1 and answer.code == 200
    assert len(gateway.endpoint_requests) == 2  # a fresh URL for every connection
    # The URL carries credentials: it never reaches the logs.
    assert "access_key" not in caplog.text and "ticket" not in caplog.text


async def test_failed_attempts_back_off_exponentially(gateway, handlers, caplog):
    gateway.fail_endpoint(times=4, code=1, msg="system busy")
    async with running(
        gateway, handlers, backoff_base=0.05, backoff_cap=1.0, rng=Widest()
    ) as connection:
        await wait_until(lambda: len(gateway.endpoint_requests) >= 2)
        health = connection.health
        assert health.state == "connecting"
        assert health.last_error is not None and "code 1: system busy" in health.last_error
        await gateway.wait_connections(1, within=3.0)
        await wait_until(lambda: connection.health.failures == 0)
        assert connection.health.reconnects == 4
    times = gateway.endpoint_times
    gaps = [b - a for a, b in itertools.pairwise(times)]
    for gap, window in zip(gaps, [0.05, 0.1, 0.2, 0.4], strict=True):
        assert window * 0.9 <= gap < window + 0.25
    assert sum("code 1: system busy" in r.getMessage() for r in caplog.records) == 4


async def test_bad_credentials_are_reported_with_feishu_code_and_retried(gateway, handlers, caplog):
    config = config_for(gateway, app_secret="wrong")
    async with running(gateway, handlers, config) as connection:
        await wait_until(lambda: len(gateway.endpoint_requests) >= 3)
        health = connection.health
    assert health.state == "connecting" and health.connected_since is None
    assert health.failures >= 2 and health.reconnects >= 2
    assert health.last_error == "endpoint request refused: code 10014: app secret invalid"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and "10014" in errors[0].getMessage()
    assert "FEISHU_APP_SECRET" in errors[0].getMessage()
    assert "wrong" not in caplog.text  # the secret itself is never logged
    assert connection.health.state == "stopped"


async def test_a_refused_handshake_is_reported_and_retried(gateway, handlers, caplog):
    gateway.refuse_handshake(times=1, status=514, msg="auth failed", auth_code=1000040350)
    async with running(gateway, handlers) as connection:
        await gateway.wait_connections(1, within=3.0)
        assert connection.health.reconnects == 1
    message = next(r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)
    assert "handshake refused: code 514: auth failed (auth error 1000040350)" in message


async def test_a_stalled_connection_is_detected_and_replaced(gateway, handlers):
    async with running(gateway, handlers) as connection:
        first = await gateway.wait_connections(1)
        await wait_until(lambda: first.pongs >= 1)
        gateway.stall()
        await gateway.wait_connections(2, within=3.0)
        assert "no pong or data" in (connection.health.last_error or "")
        await wait_until(lambda: first.closed)
        await wait_until(lambda: connection.health.state == "connected")
        assert (await gateway.response_to(await gateway.push_event(message("om_2")))).code == 200


async def test_aclose_lets_running_handlers_answer_then_closes(gateway, handlers):
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(event: VerifiedEvent) -> None:
        started.set()
        await release.wait()

    handlers.before_event = slow
    connection = LongConnection(
        config_for(gateway), on_event=handlers.on_event, on_card=handlers.on_card, heartbeat=None
    )
    connection.start()
    link = await gateway.wait_connections(1)
    frame_id = await gateway.push_event(message("om_closing"))
    await started.wait()
    closing = asyncio.create_task(connection.aclose())
    await asyncio.sleep(0.05)
    assert not closing.done()
    release.set()
    await asyncio.wait_for(closing, 2.0)
    assert (await gateway.response_to(frame_id, within=0.5)).code == 200
    await wait_until(lambda: link.closed, within=2.0)
    assert connection.health.state == "stopped"
    await connection.aclose()  # twice is fine


async def test_aclose_does_not_wait_forever_for_a_stuck_handler(gateway, handlers):
    entered = asyncio.Event()

    async def stuck(event: VerifiedEvent) -> None:
        entered.set()
        await asyncio.Event().wait()

    handlers.before_event = stuck
    async with running(gateway, handlers, close_grace=0.1) as connection:
        link = await gateway.wait_connections(1)
        frame_id = await gateway.push_event(message("om_stuck"))
        await asyncio.wait_for(entered.wait(), 2.0)  # the frame is being handled
        loop = asyncio.get_running_loop()
        began = loop.time()
        await asyncio.wait_for(connection.aclose(), 2.0)
        assert loop.time() - began < 1.0
    await wait_until(lambda: link.closed)
    assert not [r for r in gateway.responses if r.message_id == frame_id]  # delivered again


async def test_malformed_frames_are_refused_without_ending_the_connection(
    gateway, handlers, caplog
):
    async with running(gateway, handlers) as connection:
        await gateway.wait_connections(1)
        await gateway.push_raw(b"\x00\x01 not a protobuf frame")
        not_json = await gateway.push_payload(b"<html>oops</html>")
        schema_1 = await gateway.push_payload(dumps({"uuid": "u1", "token": TOKEN}).encode())
        bad_parts = await gateway.push_payload(
            dumps(message("om_x")).encode(), headers={"sum": "x"}
        )
        legacy_card = await gateway.push_payload(b'{"open_id":"ou_1"}', message_type="card")
        assert (await gateway.response_to(not_json)).code == 400
        assert (await gateway.response_to(schema_1)).code == 400
        assert (await gateway.response_to(bad_parts)).code == 400
        assert (await gateway.response_to(legacy_card)).code == 200
        good = await gateway.push_event(message("om_ok"))
        assert (await gateway.response_to(good)).code == 200
        assert len(gateway.connections) == 1 and connection.health.state == "connected"
    assert [e.envelope["event"]["message"]["message_id"] for e in handlers.events] == ["om_ok"]
    assert "undecodable frame" in caplog.text and "not a JSON object" in caplog.text


async def test_handler_failures_answer_as_the_webhook_does(gateway, handlers):
    handlers.fail_events = True
    handlers.fail_cards = True
    async with running(gateway, handlers):
        await gateway.wait_connections(1)
        event = await gateway.push_event(message("om_fail"))
        card = await gateway.push_event(card_action_event(verification_token=TOKEN, value={}))
        # Not recorded: 500, so Feishu delivers it again.
        assert (await gateway.response_to(event)).code == 500
        answer = await gateway.response_to(card)
    # The user gets a toast, never client error 200671.
    assert answer.code == 200 and answer.data["toast"]["type"] == "error"


async def test_another_verification_token_is_accepted_with_one_warning(gateway, handlers, caplog):
    async with running(gateway, handlers):
        await gateway.wait_connections(1)
        for message_id in ("om_t1", "om_t2"):
            frame_id = await gateway.push_event(message(message_id, verification_token="old"))
            assert (await gateway.response_to(frame_id)).code == 200
    assert len(handlers.events) == 2
    assert caplog.text.count("FEISHU_VERIFICATION_TOKEN") == 1


async def test_pongs_update_the_ping_interval(gateway, handlers):
    gateway.client_config = {**FAST, "PingInterval": 0.3}  # the endpoint says 0.3 s ...
    gateway.pong_config = {**FAST, "PingInterval": 0.05}  # ... and the pongs 0.05 s
    async with running(gateway, handlers):
        link = await gateway.wait_connections(1)
        await wait_until(lambda: link.pings >= 6, within=1.0)
    # The first pong's interval applies at once (the watchdog follows it too).
    assert max(b - a for a, b in itertools.pairwise(link.ping_times)) < 0.15
    assert len(gateway.connections) == 1


def test_health_is_serving_while_up_or_briefly_down():
    assert LongConnectionHealth("connected", connected_since=100.0).serving(1000.0)
    starting = LongConnectionHealth("connecting", down_since=100.0)
    assert starting.serving(160.0) and not starting.serving(161.0)
    reconnecting = LongConnectionHealth("reconnecting", down_since=100.0, reconnects=3)
    assert reconnecting.serving(130.0) and not reconnecting.serving(200.0)
    assert not LongConnectionHealth("stopped").serving(100.0)
    assert LongConnectionHealth("connected").as_dict()["state"] == "connected"


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (200, b'{"code":1,"msg":"system busy"}', "code 1: system busy"),
        (502, b"<html>bad gateway</html>", "code 502: HTTP 502, not a JSON object"),
        (200, b'{"code":0,"data":{}}', "answer without data.URL"),
        (200, b'{"code":0,"data":{"URL":"ws://h/ws?service_id=x"}}', "service_id"),
    ],
)
def test_endpoint_answers_that_give_no_connection(status, body, reason):
    with pytest.raises(ConnectRefused, match=reason.replace("(", r"\(")):
        parse_endpoint(status, body)


def test_an_endpoint_answer_is_parsed_without_keeping_credentials_in_its_repr():
    body = dumps(
        {
            "code": 0,
            "data": {
                "URL": "wss://msg.example/ws/v2?device_id=dev&service_id=33&access_key=SECRET",
                "ClientConfig": {"PingInterval": 90, "ReconnectNonce": 0, "ReconnectCount": -1},
            },
        }
    ).encode()
    endpoint = parse_endpoint(200, body)
    assert (endpoint.host, endpoint.device_id, endpoint.service_id) == ("msg.example", "dev", 33)
    assert endpoint.config.ping_interval == 90.0 and endpoint.config.reconnect_nonce == 0.0
    assert endpoint.config.reconnect_interval is None and endpoint.config.reconnect_count == -1
    assert "SECRET" not in repr(endpoint)

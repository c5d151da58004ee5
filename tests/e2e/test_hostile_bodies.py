"""Hostile bodies on both routes, through the real app (property-based).

Anyone can POST to ``/feishu/events`` and ``/feishu/card``. Whatever arrives — random
bytes, 100,000-deep nesting, truncated or doubled JSON, real payloads with wrong types at
every field, encrypted garbage, bad padding, and correctly encrypted and signed bodies
whose plaintext is hostile — the server never answers 5xx, never logs a traceback, and a
body it refuses changes nothing: no message sent, no model call, no claim, no approval or
setting changed.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import gzip
import json
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.feishu.routes import MAX_BODY_BYTES
from bot.store import AuditLog

from e2e.harness import ENCRYPT_KEY, VERIFICATION_TOKEN, Bot, running_bot, settings_for
from fakes.feishu_push import encrypt, sign, signed_request

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ROUTES = ("/feishu/events", "/feishu/card")
HOSTILE = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _payloads(folder: str) -> list[dict[str, Any]]:
    return [
        json.loads(path.read_text())
        for path in sorted((FIXTURES / folder).glob("*.event.json"))
        if isinstance(json.loads(path.read_text()), dict)
    ]


REAL = _payloads("inbound") + _payloads("callbacks")


class Tracebacks(logging.Handler):
    """Remembers every record that carries a traceback, from any logger."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "Traceback" in record.getMessage():
            self.seen.append(record)


@pytest.fixture
async def fuzzed(tmp_path, feishu, llm_server) -> AsyncIterator[tuple[Bot, Tracebacks]]:
    settings_ = settings_for(
        tmp_path, feishu, llm_server, larkgate_admins="ou_admin", larkgate_rate_limit_per_minute=0
    )
    handler = Tracebacks()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        async with running_bot(settings_, feishu, llm_server) as bot:
            yield bot, handler
    finally:
        root.removeHandler(handler)


async def snapshot(bot: Bot) -> tuple[int, int, int, int]:
    audit = await AuditLog(bot.services.database).recent(limit=1000)
    claims = await bot.services.database.transact(
        lambda c: c.exec_driver_sql("SELECT count(*) FROM message_claims").scalar(), write=False
    )
    return len(bot.feishu.sent), len(bot.llm_server.requests), claims, len(audit)


async def post(bot: Bot, route: str, body: bytes, headers: dict[str, str]) -> int:
    async with bot.session.post(bot.url + route, data=body, headers=headers) as response:
        await response.read()
        return response.status


def fresh(payload: dict[str, Any]) -> dict[str, Any]:
    """A real payload made current: our token, now, unique ids (so it could be acted on)."""
    envelope = copy.deepcopy(payload)
    header = envelope.setdefault("header", {})
    if isinstance(header, dict):
        header["token"] = VERIFICATION_TOKEN
        header["event_id"] = uuid.uuid4().hex
        header["create_time"] = str(int(time.time() * 1000))
    message = (envelope.get("event") or {}).get("message")
    if isinstance(message, dict):
        message["message_id"] = f"om_{uuid.uuid4().hex[:12]}"
        message["create_time"] = str(int(time.time() * 1000))
    return envelope


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += paths(child, (*prefix, index))
    return found


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    value = copy.copy(value)
    value[path[0]] = replaced(value[path[0]], path[1:], new)
    return value


wrong_types = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
    st.just("x" * 50_000),
    st.just([]),
    st.just({}),
    st.just([[[[{"a": [None]}]]]]),
    st.just({"encrypt": "AAAA"}),
    st.just('{"action": "admin", "setting": "read_only", "value": "on"}'),
)


@st.composite
def mutated_payloads(draw) -> dict[str, Any]:
    """A real payload with one field (or subtree) of the wrong type."""
    envelope = fresh(draw(st.sampled_from(REAL)))
    path = draw(st.sampled_from(paths(envelope)[1:]))
    return replaced(envelope, path, draw(wrong_types))


def deep(levels: int, kind: str) -> bytes:
    if kind == "array":
        return b"[" * levels + b"]" * levels
    return b'{"a":' * levels + b"1" + b"}" * levels


@st.composite
def unauthenticated_bodies(draw) -> tuple[bytes, dict[str, str]]:
    """Bodies no genuine Feishu push could be: none of them may be acted on."""
    json_headers = {"Content-Type": "application/json"}
    kind = draw(
        st.sampled_from(
            ["bytes", "deep", "truncated", "doubled", "garbage", "padding", "plain", "unsigned"]
        )
    )
    if kind == "bytes":
        return draw(st.binary(max_size=2_000)), draw(st.sampled_from([json_headers, {}]))
    if kind == "deep":
        levels = draw(st.sampled_from([33, 1_000, 100_000]))
        inner = deep(levels, draw(st.sampled_from(["array", "object"])))
        wrap = draw(st.booleans())
        return (b'{"encrypt": ' + inner + b"}" if wrap else inner), json_headers
    raw = json.dumps(fresh(draw(st.sampled_from(REAL)))).encode()
    if kind == "truncated":
        return raw[: draw(st.integers(0, len(raw) - 1))], json_headers
    if kind == "doubled":
        return raw + raw[: draw(st.integers(1, len(raw)))], json_headers
    if kind == "garbage":  # not base64, base64 of junk, a length that is not a block
        value = draw(
            st.one_of(
                st.text(max_size=200),
                st.binary(min_size=1, max_size=200).map(lambda b: base64.b64encode(b).decode()),
            )
        )
        return json.dumps({"encrypt": value}).encode(), json_headers
    if kind == "padding":  # a real ciphertext whose last block was tampered with
        cipher = bytearray(base64.b64decode(encrypt(raw.decode(), ENCRYPT_KEY)))
        cipher[-draw(st.integers(1, 16))] ^= draw(st.integers(1, 255))
        body = json.dumps({"encrypt": base64.b64encode(bytes(cipher)).decode()}).encode()
        ts, nonce = str(int(time.time())), "n"
        headers = {
            **json_headers,
            "X-Lark-Request-Timestamp": ts,
            "X-Lark-Request-Nonce": nonce,
            "X-Lark-Signature": sign(ts, nonce, ENCRYPT_KEY, body),
        }
        return body, headers
    if kind == "plain":  # a plaintext envelope: the bot expects encrypted, signed pushes
        return raw, json_headers
    # A real encrypted body, with missing, stale or forged signature headers.
    body, headers = signed_request(json.loads(raw), encrypt_key=ENCRYPT_KEY)
    change = draw(st.sampled_from(["drop", "stale", "forge"]))
    if change == "drop":
        headers.pop(draw(st.sampled_from(sorted(h for h in headers if h.startswith("X-")))))
    elif change == "stale":
        ts = str(int(time.time()) - 86_400 * 30)
        headers["X-Lark-Request-Timestamp"] = ts
        headers["X-Lark-Signature"] = sign(ts, headers["X-Lark-Request-Nonce"], ENCRYPT_KEY, body)
    else:
        headers["X-Lark-Signature"] = os.urandom(32).hex()
    return body, headers


@HOSTILE
@given(route=st.sampled_from(ROUTES), request=unauthenticated_bodies())
async def test_a_body_no_genuine_push_could_be_is_refused_and_changes_nothing(
    fuzzed, route, request
):
    bot, tracebacks = fuzzed
    body, headers = request
    before = await snapshot(bot)
    status = await post(bot, route, body, headers)
    assert 400 <= status < 500, (status, body[:200])
    assert await snapshot(bot) == before
    assert tracebacks.seen == []


@HOSTILE
@given(route=st.sampled_from(ROUTES), envelope=mutated_payloads())
async def test_signed_bodies_with_wrong_types_anywhere_never_break_the_server(
    fuzzed, route, envelope
):
    """Genuinely signed and encrypted (as if Feishu sent them) but hostile inside: answered
    with a 2xx or a 4xx, never a 5xx, never a traceback; the mode stays off (no button
    value from outside switches it)."""
    bot, tracebacks = fuzzed
    body, headers = signed_request(envelope, encrypt_key=ENCRYPT_KEY)
    status = await post(bot, route, body, headers)
    assert status < 500, status
    assert tracebacks.seen == []
    assert not (await bot.services.governance.org.read_only()).on


async def test_a_hundred_thousand_levels_deep_is_one_short_line(fuzzed, caplog):
    bot, tracebacks = fuzzed
    caplog.set_level(logging.WARNING)
    for route in ROUTES:
        status = await post(
            bot, route, deep(100_000, "array"), {"Content-Type": "application/json"}
        )
        assert status == 400
    refusals = [r for r in caplog.records if r.name == "bot.feishu.routes"]
    assert len(refusals) == 2
    assert all("nested deeper" in r.getMessage() and len(r.getMessage()) < 300 for r in refusals)
    assert tracebacks.seen == []


async def test_a_chunked_body_past_the_size_limit_is_refused_without_reading_it_all(fuzzed):
    bot, tracebacks = fuzzed

    async def chunks():
        for _ in range(3):
            yield b"[" * (600 * 1024)

    async with bot.session.post(bot.url + "/feishu/events", data=chunks()) as response:
        assert response.status == 413
    assert tracebacks.seen == []


@pytest.mark.parametrize("inflated_kb", [700, 1100, 4096])
async def test_a_small_gzip_body_is_judged_by_what_it_inflates_to(fuzzed, inflated_kb):
    """A few KB on the wire, all of it with the head (read at once, without the chunk
    loop): over the limit once inflated is refused, under it is read as any body."""
    bot, tracebacks = fuzzed
    bomb = gzip.compress(b"[" * (inflated_kb * 1024))
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    url = bot.url + "/feishu/events"
    async with bot.session.post(url, data=bomb, headers=headers) as response:
        # Under the limit: read whole, then refused as a body no genuine push could be.
        assert response.status == (413 if inflated_kb * 1024 > MAX_BODY_BYTES else 400)
    assert tracebacks.seen == []


@pytest.mark.parametrize("framing", ["length", "chunked"])
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    "header", ["X-Lark-Request-Nonce", "X-Lark-Request-Timestamp", "X-Lark-Signature"]
)
async def test_signature_headers_that_are_not_utf8_are_refused_not_a_500(
    fuzzed, route, header, framing
):
    bot, tracebacks = fuzzed
    envelope = fresh(REAL[0])
    body, headers = signed_request(envelope, encrypt_key=ENCRYPT_KEY)
    before = await snapshot(bot)
    lines = [f"POST {route} HTTP/1.1".encode(), b"Host: bot", b"Connection: close"]
    for name, value in headers.items():
        raw = value.encode()
        lines.append(name.encode() + b": " + (b"\xff\xfe" + raw if name == header else raw))
    if framing == "chunked":
        lines.append(b"Transfer-Encoding: chunked")
        payload = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    else:
        lines.append(f"Content-Length: {len(body)}".encode())
        payload = body
    host, port = bot.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"\r\n".join(lines) + b"\r\n\r\n" + payload)
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    status = int(answer.split(b" ", 2)[1])
    assert status == 401  # the signature does not match: never a 500
    assert await snapshot(bot) == before
    assert tracebacks.seen == []


async def test_a_declared_length_over_the_limit_is_refused_before_its_body(fuzzed):
    """The route refuses it from the head alone, 413, while the body has not even been
    sent."""
    bot, tracebacks = fuzzed
    before = await snapshot(bot)
    host, port = bot.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"POST /feishu/events HTTP/1.1\r\nHost: bot\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n"
    )
    writer.write(head.encode())
    status_line = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    assert status_line.split()[1] == b"413"
    assert await snapshot(bot) == before
    assert tracebacks.seen == []

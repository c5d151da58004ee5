"""The HTTP connector against a local aiohttp server, and its SSRF defences.

The server listens on 127.0.0.1 only. Positive tests allowlist it exactly
(``127.0.0.1:PORT``); the refusal tests check both the error and that the server
never saw the request. Host names other than ``localhost`` go through a fake
resolver, so nothing here touches the real network or DNS.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import html
import ipaddress
import json
import time
import urllib.parse
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from bot.engine import Tool, ToolError
from connectors.base import ConnectorContext
from connectors.http import HTTP, is_public_address, parse_rule
from connectors.http_headers import DEFAULT_REQUEST_HEADERS

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
BOMB = gzip.compress(b"a" * 20_000_000, compresslevel=9)  # ≈ 20 KB on the wire
# A configured API key, with characters that encode differently in URLs, JSON and HTML.
API_KEY = 'sk-test/9f8e+7d6c=5b4a"<x>'


class Server:
    """A local HTTP server that records the paths it served."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> Server:
        app = web.Application(middlewares=[self._record])
        routes = [
            web.get("/json", self.json_body),
            web.get("/big-json", self.big_json),
            web.get("/text", self.text),
            web.get("/html", self.html),
            web.get("/binary", self.binary),
            web.get("/status/{code}", self.status),
            web.get("/redirect", self.redirect),
            web.post("/redirect", self.redirect),
            web.get("/slow", self.slow),
            web.get("/drip", self.drip),
            web.get("/endless", self.endless),
            web.get("/headers", self.headers),
            web.get("/set-cookie", self.set_cookie),
            web.post("/echo", self.echo),
            web.get("/empty", self.empty),
            web.get("/gzip", self.gzipped),
            web.get("/deflate", self.deflated),
            web.get("/bomb", self.bomb),
            web.get("/echo-key/{mode}", self.echo_key),
        ]
        app.add_routes(routes)
        self._runner = web.AppRunner(
            app, access_log=None, shutdown_timeout=0.5, handler_cancellation=True
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @web.middleware
    async def _record(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        self.hits.append(request.path)
        self.requests.append({"path": request.path, "headers": dict(request.headers)})
        return await handler(request)

    async def json_body(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"hello": "world", "items": [1, 2, 3], "query": dict(request.query)}
        )

    async def big_json(self, request: web.Request) -> web.Response:
        return web.json_response({"rows": [{"id": i, "name": f"row {i}"} for i in range(2000)]})

    async def text(self, request: web.Request) -> web.Response:
        return web.Response(text="plain text body\nsecond line")

    async def html(self, request: web.Request) -> web.Response:
        page = (
            "<html><head><title>Shop</title><style>body{color:red}</style></head>"
            "<body><h1>Welcome</h1><script>alert('x')</script><p>Prices &amp; offers</p>"
            "</body></html>"
        )
        return web.Response(text=page, content_type="text/html")

    async def binary(self, request: web.Request) -> web.Response:
        return web.Response(body=PNG, content_type="image/png")

    async def status(self, request: web.Request) -> web.Response:
        code = int(request.match_info["code"])
        return web.Response(status=code, text=f"details for status {code}: something went wrong")

    async def redirect(self, request: web.Request) -> web.Response:
        code = int(request.query.get("code", "302"))
        return web.Response(status=code, headers={"Location": request.query["to"]})

    async def slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(text="too late")

    async def drip(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        for _ in range(100):
            await response.write(b"x")
            await asyncio.sleep(0.1)
        return response

    async def endless(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        chunk = b"y" * 65536
        try:
            for _ in range(100_000):  # ≈ 6.5 GB: only a cap stops this in time
                await response.write(chunk)
        except (ConnectionError, RuntimeError):
            pass
        return response

    async def headers(self, request: web.Request) -> web.Response:
        return web.json_response(dict(request.headers))

    async def set_cookie(self, request: web.Request) -> web.Response:
        response = web.Response(text="cookie set")
        response.set_cookie("session", "secret-session")
        return response

    async def echo(self, request: web.Request) -> web.Response:
        body = await request.text()
        return web.json_response(
            {"content_type": request.headers.get("Content-Type"), "body": body},
            status=201,
        )

    async def empty(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def gzipped(self, request: web.Request) -> web.Response:
        body = gzip.compress(json.dumps({"compressed": True}).encode())
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        return web.Response(body=body, headers=headers)

    async def deflated(self, request: web.Request) -> web.Response:
        headers = {"Content-Encoding": "deflate", "Content-Type": "text/plain"}
        return web.Response(body=zlib.compress(b"deflated text"), headers=headers)

    async def bomb(self, request: web.Request) -> web.Response:
        headers = {"Content-Encoding": "gzip", "Content-Type": "text/plain"}
        return web.Response(body=BOMB, headers=headers)

    async def echo_key(self, request: web.Request) -> web.Response:
        """Echoes the X-Api-Key it was sent, the way careless or hostile servers do."""
        key = request.headers.get("X-Api-Key", "")
        quoted = urllib.parse.quote(key, safe="")
        mode = request.match_info["mode"]
        if mode == "json":
            return web.json_response(
                {"key": key, "next": f"https://x.test/?k={quoted}", "as_text": json.dumps(key)}
            )
        if mode == "text":  # JSON-escaped and URL-encoded, not parsed as JSON
            text = f"raw={key} json={json.dumps(key)} url={quoted} form="
            return web.Response(text=text + urllib.parse.quote_plus(key))
        if mode == "html":
            entities = "".join(f"&#{ord(char)};" for char in key)
            split = f"<b>{html.escape(key[:4])}</b>{html.escape(key[4:])}"
            page = f"<html><body><p>key: {entities}</p><p>again {split}</p>"
            return web.Response(text=page + "</body></html>", content_type="text/html")
        if mode == "header":
            return web.Response(text="ok", headers={"Content-Type": f"text/plain; key={quoted}"})
        if mode == "redirect":
            return web.Response(status=302, headers={"Location": f"/json?key={quoted}"})
        if mode == "error":
            return web.Response(status=403, text=f"key {key} is not valid here")
        if mode == "padded":  # the key right where max_response_bytes cuts the body
            pad = int(request.query["pad"])
            return web.Response(text="." * pad + key + " and more")
        raise web.HTTPNotFound()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with Server() as running:
        yield running


@pytest.fixture
async def other_server() -> AsyncIterator[Server]:
    async with Server() as running:
        yield running


class FakeResolver:
    """Answers from a table; records what was asked."""

    def __init__(self, table: dict[str, list[list[str]] | list[str]]) -> None:
        self.table = table
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        answer = self.table.get(host)
        if answer is None:
            raise OSError(f"fake resolver: unknown host {host}")
        if answer and isinstance(answer[0], list):  # successive answers
            index = min(self.calls.count(host) - 1, len(answer) - 1)
            return list(answer[index])
        return list(answer)  # type: ignore[arg-type]


Factory = Callable[..., Awaitable[HTTP]]


@pytest.fixture
async def make() -> AsyncIterator[Factory]:
    made: list[HTTP] = []

    async def build(allowed: list[str] | str, resolver: Any = None, **settings: Any) -> HTTP:
        connector = HTTP(HTTP.Settings(allowed_hosts=allowed, **settings), ConnectorContext())
        if resolver is not None:
            connector.policy.resolver = resolver
        await connector.start()
        made.append(connector)
        return connector

    yield build
    for connector in made:
        await connector.aclose()


@functools.cache
def tools_of(connector: HTTP) -> dict[str, Tool]:
    return {tool.name: tool for tool in connector.tools()}


async def get(connector: HTTP, url: str, **arguments: Any) -> str:
    result = await tools_of(connector)["http_get"].handler(url=url, **arguments)
    assert isinstance(result, str)
    return result


async def post(connector: HTTP, url: str, **arguments: Any) -> str:
    result = await tools_of(connector)["http_post"].handler(url=url, **arguments)
    assert isinstance(result, str)
    return result


async def refused_get(connector: HTTP, url: str, **arguments: Any) -> str:
    with pytest.raises(ToolError) as caught:
        await get(connector, url, **arguments)
    return str(caught.value)


def exact(server: Server) -> list[str]:
    return [f"127.0.0.1:{server.port}"]


# ---------------------------------------------------------------- the tools


async def test_tools_and_side_effects(server: Server, make: Factory) -> None:
    tools = tools_of(await make(exact(server), timeout_seconds=7))
    assert {name: tool.side_effect for name, tool in tools.items()} == {
        "http_get": "read",
        "http_post": "write",
    }
    assert tools["http_get"].parameters["required"] == ["url"]
    assert set(tools["http_post"].parameters["properties"]) >= {"url", "json_body", "body"}
    assert all(tool.timeout == 12 for tool in tools.values())


async def test_get_json_is_pretty(server: Server, make: Factory) -> None:
    connector = await make(exact(server))
    text = await get(connector, f"{server.base}/json", params={"q": "shoes"})
    lines = text.splitlines()
    assert lines[0] == f"HTTP 200 OK · GET {server.base}/json?q=shoes"
    assert lines[1].startswith("content-type: application/json")
    assert '  "hello": "world",' in text
    assert '"q": "shoes"' in text


async def test_big_json_is_bounded(server: Server, make: Factory) -> None:
    connector = await make(exact(server), max_chars=3000)
    text = await get(connector, f"{server.base}/big-json")
    assert len(text) < 3300
    assert '{"rows":[{"id":0,"name":"row 0"}' in text  # compact once pretty does not fit
    assert "more characters not shown" in text


async def test_text_html_binary_and_empty(server: Server, make: Factory) -> None:
    connector = await make(exact(server))
    assert (await get(connector, f"{server.base}/text")).endswith("plain text body\nsecond line")
    page = await get(connector, f"{server.base}/html")
    body = page.split("\n\n", 1)[1]
    assert body.splitlines() == ["Shop", "Welcome", "Prices & offers"]
    binary = await get(connector, f"{server.base}/binary")
    assert f"[binary body: image/png, {len(PNG)} bytes; starts 89 50 4e 47" in binary
    assert "\x00" not in binary
    empty = await get(connector, f"{server.base}/empty")
    assert empty.startswith("HTTP 204 No Content") and empty.endswith("(empty body)")


async def test_post_json_and_text(server: Server, make: Factory) -> None:
    connector = await make(exact(server))
    sent = await post(connector, f"{server.base}/echo", json_body={"name": "Ada", "n": [1, 2]})
    assert sent.startswith("HTTP 201 Created · POST")
    echoed = json.loads(sent.split("\n\n", 1)[1])
    assert echoed["content_type"] == "application/json"
    assert json.loads(echoed["body"]) == {"name": "Ada", "n": [1, 2]}
    text = await post(connector, f"{server.base}/echo", body="hello", content_type="text/csv")
    assert json.loads(text.split("\n\n", 1)[1]) == {"content_type": "text/csv", "body": "hello"}
    plain = await post(connector, f"{server.base}/echo", body="hi")
    assert "text/plain; charset=utf-8" in plain
    with pytest.raises(ToolError, match="either json_body or body"):
        await post(connector, f"{server.base}/echo", json_body={"a": 1}, body="b")


async def test_headers_defaults_and_forbidden(server: Server, make: Factory) -> None:
    connector = await make(exact(server), headers='{"X-Team": "larkgate-team"}')
    await get(connector, f"{server.base}/headers", headers={"Accept": "application/json"})
    seen = server.requests[-1]["headers"]
    assert seen["X-Team"] == "larkgate-team"
    assert seen["Accept"] == "application/json"
    assert seen["User-Agent"].startswith("larkgate")
    for headers in ({"Host": "evil.test"}, {"Transfer-Encoding": "chunked"}):
        with pytest.raises(ToolError, match="not allowed"):
            await get(connector, f"{server.base}/headers", headers=headers)
    with pytest.raises(ToolError, match="line break"):
        await get(connector, f"{server.base}/headers", headers={"Accept": "a\r\nX-B: b"})
    with pytest.raises(ToolError, match="invalid header name"):
        await get(connector, f"{server.base}/headers", headers={"Bad Name": "x"})
    assert len(server.requests) == 1


# -- request headers the model may set ------------------------------------------------

DANGEROUS_HEADERS = {
    "X-HTTP-Method-Override": "DELETE",
    "X-HTTP-Method": "DELETE",
    "Host": "internal.test",
    "Authorization": "Bearer stolen",
    "Cookie": "session=stolen",
    "X-Forwarded-For": "10.0.0.1",
    "Forwarded": "for=10.0.0.1",
    "X-Real-IP": "10.0.0.1",
    "Transfer-Encoding": "chunked",
    "Content-Length": "0",
    "Connection": "close",
    "Proxy-Authorization": "Basic eDp5",
    "Accept-Encoding": "br",
    "X-Custom": "anything",
}


async def test_a_method_override_header_is_refused_and_never_sent(
    server: Server, make: Factory
) -> None:
    connector = await make(exact(server))
    message = await refused_get(
        connector, f"{server.base}/json", headers={"X-HTTP-Method-Override": "DELETE"}
    )
    assert "X-HTTP-Method-Override" in message and "nothing was sent" in message
    assert "Accept, Accept-Language" in message  # the model learns what it may set
    for name, value in DANGEROUS_HEADERS.items():
        with pytest.raises(ToolError, match="not allowed"):
            await get(connector, f"{server.base}/json", headers={"Accept": "*/*", name: value})
        with pytest.raises(ToolError, match="not allowed"):
            await post(connector, f"{server.base}/echo", body="x", headers={name: value})
    assert server.hits == []


async def test_the_write_tool_also_takes_content_type(server: Server, make: Factory) -> None:
    connector = await make(exact(server))
    sent = await post(
        connector,
        f"{server.base}/echo",
        body="a,b",
        headers={"content-type": "text/csv", "Idempotency-Key": "k-1"},
    )
    assert json.loads(sent.split("\n\n", 1)[1])["content_type"] == "text/csv"
    assert server.requests[-1]["headers"]["Idempotency-Key"] == "k-1"
    with pytest.raises(ToolError, match="not allowed: Content-Type"):
        await get(connector, f"{server.base}/json", headers={"Content-Type": "text/csv"})
    described = tools_of(connector)["http_get"].parameters["properties"]["headers"]
    assert "If-None-Match" in described["description"]


async def test_the_header_allowlist_is_a_setting(server: Server, make: Factory) -> None:
    connector = await make(exact(server), allowed_request_headers="Accept, X-Request-Id")
    await get(connector, f"{server.base}/json", headers={"x-request-id": "r-1"})
    received = {name.lower(): value for name, value in server.requests[-1]["headers"].items()}
    assert received["x-request-id"] == "r-1"
    message = await refused_get(connector, f"{server.base}/json", headers={"Range": "bytes=0-1"})
    assert message.endswith("Headers this tool may set: Accept, X-Request-Id")
    for never in ("X-HTTP-Method-Override", "Host", "Cookie", "Proxy-Foo", "X-Forwarded-Host"):
        with pytest.raises(ValidationError, match="may never set"):
            HTTP.Settings(allowed_hosts=["a.test"], allowed_request_headers=[never])
    with pytest.raises(ValidationError, match="invalid header name"):
        HTTP.Settings(allowed_hosts=["a.test"], allowed_request_headers=["Bad Name"])


async def test_header_names_and_values_are_checked(server: Server, make: Factory) -> None:
    connector = await make(exact(server), headers={"X-Api-Key": API_KEY})
    cases = [
        ({"Accépt": "x"}, "invalid header name"),
        ({"Accept": "a\nb"}, "line break"),
        ({"Accept": "a\rb"}, "line break"),
        ({"Accept": "caf\u00e9"}, "non-ASCII"),
        ({"Accept": "a\x00b"}, "control"),
        ({"Accept": "a", "accept": "b"}, "twice"),
        ({"x-api-key": "mine"}, "set by the connector's configuration"),
    ]
    for headers, expected in cases:
        with pytest.raises(ToolError, match=expected):
            await get(connector, f"{server.base}/json", headers=headers)
    with pytest.raises(ToolError, match="line break"):
        await post(connector, f"{server.base}/echo", body="x", content_type="a\r\nX: y")
    assert server.hits == []
    for bad in ({"X-A": "a\r\nX-B: b"}, {"Bad Name": "x"}, {"Host": "h"}):
        with pytest.raises(ValidationError):
            HTTP.Settings(allowed_hosts=["a.test"], headers=bad)


ALLOWED = {name.lower() for name in DEFAULT_REQUEST_HEADERS}
_TOKEN_CHARS = "!#$%&'*+.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-"
header_names = st.one_of(
    st.sampled_from([*DEFAULT_REQUEST_HEADERS, *DANGEROUS_HEADERS, "Content-Type", "TE"]).flatmap(
        lambda name: st.sampled_from([name, name.lower(), name.upper()])
    ),
    st.text(alphabet=_TOKEN_CHARS, min_size=1, max_size=12),
    st.text(max_size=8),  # anything, spaces, line breaks and non-ASCII included
)
header_values = st.one_of(
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=20),
    st.text(max_size=8),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(headers=st.dictionaries(header_names, header_values, max_size=4))
async def test_only_allowlisted_headers_ever_reach_the_server(
    server: Server, make: Factory, headers: dict[str, str]
) -> None:
    connector = await make(exact(server))
    before = len(server.requests)
    try:
        await get(connector, f"{server.base}/headers", headers=headers)
    except ToolError:
        assert len(server.requests) == before  # refused: nothing was sent
        return
    (request,) = server.requests[before:]
    assert {name.lower() for name in headers} <= ALLOWED
    baseline = {"host", "accept", "accept-encoding", "connection", "user-agent"}
    assert {name.lower() for name in request["headers"]} <= baseline | ALLOWED
    received = {name.lower(): value for name, value in request["headers"].items()}
    for name, value in headers.items():
        assert received[name.lower()] == value.strip(" \t")


# -- configured secrets never come back ------------------------------------------------


def _forms(secret: str) -> list[str]:
    return [
        secret,
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote_plus(secret),
        json.dumps(secret)[1:-1],
        secret[:6],
    ]


async def test_an_echoed_api_key_is_masked_in_every_observation(
    server: Server, make: Factory
) -> None:
    connector = await make(exact(server), headers={"X-Api-Key": API_KEY})
    observations = [
        await get(connector, f"{server.base}/echo-key/{mode}")
        for mode in ("json", "text", "html", "header")
    ]
    observations.append(await get(connector, f"{server.base}/headers"))
    refused = await refused_get(connector, f"{server.base}/echo-key/error")
    observations.append(refused)
    assert "HTTP 403" in refused and "key *** is not valid" in refused
    no_redirects = await make(exact(server), headers={"X-Api-Key": API_KEY}, max_redirects=0)
    moved = await get(no_redirects, f"{server.base}/echo-key/redirect")
    observations.append(moved)
    assert "location: /json?key=***" in moved
    for text in observations:
        assert "***" in text
        for form in _forms(API_KEY):
            assert form not in text, (form, text)
    # The server did get the key; the tools never show what they sent.
    assert all(r["headers"]["X-Api-Key"] == API_KEY for r in server.requests)
    assert all("X-Api-Key" not in text and "User-Agent:" not in text for text in observations[:4])


async def test_a_key_cut_by_the_size_cap_shows_no_prefix(server: Server, make: Factory) -> None:
    connector = await make(exact(server), headers={"X-Api-Key": API_KEY}, max_response_bytes=1024)
    for pad in (1024 - 10, 1024 - len(API_KEY) + 2, 1024 - 7):
        text = await get(connector, f"{server.base}/echo-key/padded", params={"pad": str(pad)})
        body = text.split("\n\n", 1)[1]
        assert body.endswith("***") and API_KEY[:6] not in body, body[-40:]


async def test_host_headers_go_only_to_their_host(
    server: Server, other_server: Server, make: Factory
) -> None:
    mine, theirs = f"127.0.0.1:{server.port}", f"127.0.0.1:{other_server.port}"
    connector = await make(
        [mine, theirs],
        host_headers={mine: {"X-Api-Key": API_KEY}},
        headers={"Authorization": "Bearer everywhere-1"},
    )
    await get(connector, f"{server.base}/json")
    await get(connector, f"{other_server.base}/json")
    # Redirected from the key's host to the other: neither the key nor (cross-origin)
    # the headers sent everywhere follow.
    target = urllib.parse.quote(f"{other_server.base}/headers", safe="")
    await get(connector, f"{server.base}/redirect?to={target}")
    assert server.requests[0]["headers"]["X-Api-Key"] == API_KEY
    assert [r["path"] for r in other_server.requests] == ["/json", "/headers"]
    assert all("X-Api-Key" not in r["headers"] for r in other_server.requests)
    direct, redirected = (r["headers"] for r in other_server.requests)
    assert direct["Authorization"] == "Bearer everywhere-1"
    assert "Authorization" not in redirected
    # Back to the key's host: it gets the key again.
    back = urllib.parse.quote(f"{server.base}/json", safe="")
    await get(connector, f"{other_server.base}/redirect?to={back}")
    assert server.requests[-1]["headers"]["X-Api-Key"] == API_KEY
    with pytest.raises(ValidationError, match="not one of allowed_hosts"):
        HTTP.Settings(allowed_hosts=[mine], host_headers={"b.test": {"X-Api-Key": "k"}})


async def test_cookies_are_never_kept(server: Server, make: Factory) -> None:
    connector = await make(exact(server))
    await get(connector, f"{server.base}/set-cookie")
    seen = json.loads((await get(connector, f"{server.base}/headers")).split("\n\n", 1)[1])
    assert "Cookie" not in seen


@pytest.mark.parametrize("code", [400, 401, 403, 404, 429, 500, 503])
async def test_error_status_is_a_tool_error(server: Server, make: Factory, code: int) -> None:
    connector = await make(exact(server))
    message = await refused_get(connector, f"{server.base}/status/{code}")
    assert message.startswith(f"HTTP {code} ")
    assert f"details for status {code}" in message
    assert len(message) < 500


# ---------------------------------------------------------------- limits


async def test_timeout(server: Server, make: Factory) -> None:
    connector = await make(exact(server), timeout_seconds=0.3)
    started = time.perf_counter()
    message = await refused_get(connector, f"{server.base}/slow")
    assert time.perf_counter() - started < 2
    assert "0.3 s" in message


async def test_slow_drip_hits_the_overall_deadline(server: Server, make: Factory) -> None:
    connector = await make(exact(server), timeout_seconds=0.5)
    started = time.perf_counter()
    message = await refused_get(connector, f"{server.base}/drip")
    assert time.perf_counter() - started < 2
    assert "0.5 s" in message


async def test_size_cap_stops_an_endless_body(server: Server, make: Factory) -> None:
    connector = await make(exact(server), max_response_bytes=200_000)
    started = time.perf_counter()
    text = await get(connector, f"{server.base}/endless")
    assert time.perf_counter() - started < 2
    assert "200000 bytes (cut at max_response_bytes=200000)" in text
    # Still usable afterwards (the cut connection was not reused).
    assert "world" in await get(connector, f"{server.base}/json")


async def test_compressed_bodies_are_decoded_within_the_cap(server: Server, make: Factory) -> None:
    connector = await make(exact(server), max_response_bytes=100_000)
    assert '"compressed": true' in await get(connector, f"{server.base}/gzip")
    assert (await get(connector, f"{server.base}/deflate")).endswith("deflated text")
    started = time.perf_counter()
    bomb = await get(connector, f"{server.base}/bomb")
    assert time.perf_counter() - started < 1
    assert "100000 bytes (cut at max_response_bytes=100000)" in bomb
    seen = server.requests[0]["headers"]
    assert seen["Accept-Encoding"] == "gzip, deflate"


# ---------------------------------------------------------------- where requests may go


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1/file",
        "file:///etc/passwd",
        "gopher://127.0.0.1:70/",
        "javascript:alert(1)",
        "/json",
        "127.0.0.1/json",
    ],
)
async def test_only_http_and_https(server: Server, make: Factory, url: str) -> None:
    connector = await make(["*", *exact(server)])
    assert "only http and https" in await refused_get(connector, url)
    assert server.hits == []


async def test_invalid_urls(server: Server, make: Factory) -> None:
    connector = await make(exact(server))
    for url in ["http://", "http://[::1", "http://exa mple.com/"]:
        await refused_get(connector, url)
    assert server.hits == []


async def test_hosts_not_allowlisted(server: Server, other_server: Server, make: Factory) -> None:
    resolver = FakeResolver({})
    connector = await make([*exact(server), "*.example.com"], resolver)
    for url in [
        "http://example.org/",
        "http://example.com/",  # a wildcard covers subdomains only
        "http://evil-example.com/",
        "http://example.com.evil.test/",
        f"{other_server.base}/json",  # same address, other port
        f"http://localhost:{server.port}/json",  # the address is allowed, the name is not
        f"http://127.0.0.1:{server.port}@evil.test/",  # userinfo trick
    ]:
        assert "is not an allowed host" in await refused_get(connector, url), url
    assert server.hits == [] and other_server.hits == []
    assert resolver.calls == []  # refused before any name was resolved


NON_PUBLIC = [
    "127.0.0.1:{port}",
    "127.9.9.9:{port}",
    "localhost:{port}",
    "LOCALHOST.:{port}",
    "[::1]:{port}",
    "[::ffff:127.0.0.1]:{port}",
    "[::ffff:7f00:1]:{port}",
    "[64:ff9b::7f00:1]:{port}",
    "0.0.0.0:{port}",
    "[::]:{port}",
    "2130706433:{port}",  # decimal 127.0.0.1
    "0x7f000001:{port}",  # hex
    "0177.0.0.1:{port}",  # octal
    "127.1:{port}",  # short form
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "169.254.169.254",  # cloud metadata
    "100.64.0.1",  # shared address space
    "224.0.0.1",  # multicast
    "240.0.0.1",  # reserved
    "198.18.0.1",  # benchmarking
    "[fe80::1]",
    "[fd00::1]",
    "[ff02::1]",
    "[2001:db8::1]",
]


@pytest.mark.parametrize("host", NON_PUBLIC)
async def test_non_public_addresses_need_an_exact_entry(
    server: Server, make: Factory, host: str
) -> None:
    connector = await make(["*"])
    message = await refused_get(connector, f"http://{host.format(port=server.port)}/json")
    assert message.startswith(("refused: ", "invalid URL")), message
    assert server.hits == []


async def test_names_resolving_to_private_addresses(server: Server, make: Factory) -> None:
    resolver = FakeResolver(
        {
            "internal.example.test": ["10.0.0.5"],
            "loop.example.test": ["127.0.0.1"],
            "mixed.example.test": ["93.184.216.34", "127.0.0.1"],
            "metadata.example.test": ["169.254.169.254"],
            "v6.example.test": ["::1"],
        }
    )
    connector = await make(["*.example.test"], resolver)
    for name, address in [
        ("internal", "10.0.0.5"),
        ("loop", "127.0.0.1"),
        ("mixed", "127.0.0.1"),
        ("metadata", "169.254.169.254"),
        ("v6", "::1"),
    ]:
        message = await refused_get(connector, f"http://{name}.example.test:{server.port}/json")
        assert f"{name}.example.test resolves to {address}" in message
    assert server.hits == []


async def test_connection_is_pinned_to_the_checked_address(server: Server, make: Factory) -> None:
    """The name is resolved once, by us; the socket goes to that answer, not a second lookup.

    ``api.example.test`` does not exist for the system resolver, so the request can only
    succeed by connecting to the address our resolver returned; later answers (a rebind
    to a private address) are never used for that connection.
    """
    resolver = FakeResolver({"api.example.test": [["127.0.0.1"], ["10.9.9.9"]]})
    connector = await make([f"api.example.test:{server.port}"], resolver)
    text = await get(connector, f"http://api.example.test:{server.port}/headers")
    seen = json.loads(text.split("\n\n", 1)[1])
    assert seen["Host"] == f"api.example.test:{server.port}"
    assert resolver.calls == ["api.example.test"]


async def test_exactly_listed_names_may_be_private(server: Server, make: Factory) -> None:
    connector = await make([f"localhost:{server.port}"])
    assert "world" in await get(connector, f"http://localhost:{server.port}/json")
    ipv6 = await make([f"[::1]:{server.port}"])
    # The server listens on IPv4 only: the connection is attempted, then refused.
    assert "cannot connect" in await refused_get(ipv6, f"http://[::1]:{server.port}/json")


# ---------------------------------------------------------------- redirects


async def test_redirect_to_an_allowed_url_is_followed(server: Server, make: Factory) -> None:
    connector = await make(exact(server))
    text = await get(connector, f"{server.base}/redirect", params={"to": "/json"})
    assert text.startswith(f"HTTP 200 OK · GET {server.base}/json")
    assert f"redirected from: {server.base}/redirect?to=%2Fjson" in text
    assert server.hits == ["/redirect", "/json"]


async def test_post_303_becomes_get(server: Server, make: Factory) -> None:
    connector = await make(exact(server))
    text = await post(connector, f"{server.base}/redirect?to=/json&code=303", json_body={})
    assert text.startswith(f"HTTP 200 OK · GET {server.base}/json")


@pytest.mark.parametrize(
    "target",
    [
        "http://localhost:{port}/json",
        "http://127.0.0.1:{other}/json",
        "http://10.0.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:{port}/json",
        "file:///etc/passwd",
        "ftp://127.0.0.1:{port}/",
        "http://example.org/",
    ],
)
async def test_redirect_to_a_disallowed_url_is_refused(
    server: Server, other_server: Server, make: Factory, target: str
) -> None:
    connector = await make([*exact(server), "*.example.com"])
    location = target.format(port=server.port, other=other_server.port)
    message = await refused_get(connector, f"{server.base}/redirect", params={"to": location})
    assert "redirected to" in message and "not allowed" in message
    assert server.hits == ["/redirect"]
    assert other_server.hits == []


async def test_redirect_loops_stop(server: Server, make: Factory) -> None:
    connector = await make(exact(server), max_redirects=3)
    loop = "/redirect?to=/redirect%3Fto%3D/redirect%253Fto%253D/redirect%25253Fto%25253D/json"
    assert "too many redirects" in await refused_get(connector, f"{server.base}{loop}")
    assert len(server.hits) == 4


async def test_redirects_can_be_turned_off(server: Server, make: Factory) -> None:
    connector = await make(exact(server), max_redirects=0)
    text = await get(connector, f"{server.base}/redirect", params={"to": "/json"})
    assert text.startswith("HTTP 302 Found")
    assert "location: /json" in text
    assert server.hits == ["/redirect"]


# ---------------------------------------------------------------- settings and policy


def test_settings_from_environment_strings() -> None:
    settings = HTTP.Settings(
        allowed_hosts="api.example.com, *.corp.example.com,127.0.0.1:8080,[::1]:9000",
        headers='{"Authorization": "Bearer t"}',
        host_headers='{"api.example.com": {"X-Api-Key": "k"}}',
        allowed_request_headers="Accept, X-Request-Id",
        timeout_seconds="5",
    )
    assert settings.allowed_hosts == [
        "api.example.com",
        "*.corp.example.com",
        "127.0.0.1:8080",
        "[::1]:9000",
    ]
    assert settings.headers["Authorization"].get_secret_value() == "Bearer t"
    assert settings.host_headers["api.example.com"]["X-Api-Key"].get_secret_value() == "k"
    assert settings.allowed_request_headers == ["Accept", "X-Request-Id"]
    assert "Bearer t" not in repr(settings)
    rules = [parse_rule(entry) for entry in settings.allowed_hosts]
    assert [(r.pattern, r.port, r.exact) for r in rules] == [
        ("api.example.com", None, True),
        ("*.corp.example.com", None, False),
        ("127.0.0.1", 8080, True),
        ("::1", 9000, True),
    ]


@pytest.mark.parametrize("entry", ["*.*.com", "host:99999", "a/b", "host:port", "ex*ample.com"])
def test_bad_allowlist_entries_are_settings_errors(entry: str) -> None:
    with pytest.raises(ValidationError):
        HTTP.Settings(allowed_hosts=[entry])


def test_rules_match_hosts_and_ports() -> None:
    wildcard = parse_rule("*.Example.COM.")
    assert wildcard.matches("a.example.com", 443) and wildcard.matches("a.b.example.com", 80)
    assert not wildcard.matches("example.com", 443)
    assert not wildcard.matches("badexample.com", 443)
    with_port = parse_rule("https://api.example.com:8443/path")
    assert with_port.matches("api.example.com", 8443)
    assert not with_port.matches("api.example.com", 443)


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("93.184.216.34", True),
        ("2606:4700:4700::1111", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.31.255.255", False),
        ("192.168.0.1", False),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("0.0.0.0", False),
        ("255.255.255.255", False),
        ("224.0.0.251", False),
        ("::1", False),
        ("::", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("ff02::1", False),
        ("::ffff:10.0.0.1", False),
        ("::ffff:8.8.8.8", True),
        ("64:ff9b::a00:1", False),
        ("2002:7f00:1::", False),  # 6to4 wrapping 127.0.0.1
    ],
)
def test_public_addresses(address: str, public: bool) -> None:
    assert is_public_address(ipaddress.ip_address(address)) is public


async def test_check(server: Server, make: Factory) -> None:
    status = await (await make(exact(server))).check()
    assert status.ok and f"127.0.0.1:{server.port}" in status.detail and status.tools == 2
    empty = await (await make([])).check()
    assert not empty.ok and "no allowed hosts" in empty.detail


async def test_aclose_closes_the_client(server: Server, make: Factory) -> None:
    connector = await make(exact(server))
    await get(connector, f"{server.base}/json")
    client = connector._client
    await connector.aclose()
    assert client is not None and client.is_closed

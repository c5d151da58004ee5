"""The HTTP connector against a local aiohttp server: its tools, limits, redirects and
SSRF defences, end to end (the host policy alone: test_http_policy.py).

Positive tests allowlist the server exactly (``127.0.0.1:PORT``); the refusal tests
check both the error and that the server never saw the request.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import pytest
from pydantic import ValidationError

from bot.engine import ToolError
from connectors.http import HTTP, parse_rule

from .http_server_fixture import (
    PNG,
    Factory,
    FakeResolver,
    Server,
    connectors,
    exact,
    get,
    post,
    refused_get,
    tools_of,
)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with Server() as running:
        yield running


@pytest.fixture
async def other_server() -> AsyncIterator[Server]:
    async with Server() as running:
        yield running


@pytest.fixture
async def make() -> AsyncIterator[Factory]:
    async with connectors() as build:
        yield build


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


# ---------------------------------------------------------------- settings and status


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


# ---------------------------------------------------------------- never through a proxy


async def test_the_environment_s_proxy_is_never_used(
    server: Server, make: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SSRF rules check the address the connector connects to; a proxy would resolve
    names on its own side and could reach what they refuse. So whatever the environment
    says, the connector goes direct to the address it checked, and a name only the proxy
    could resolve is not reached through it."""
    from support.forward_proxy import ForwardProxy

    async with ForwardProxy({"intranet.corp.test": "127.0.0.1"}) as proxy:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
            monkeypatch.setenv(name, proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        connector = await make([*exact(server), f"intranet.corp.test:{server.port}"])
        answer = await get(connector, f"{server.base}/json")
        refused = await refused_get(connector, f"http://intranet.corp.test:{server.port}/json")
    assert answer.startswith(f"HTTP 200 OK · GET {server.base}/json")
    assert proxy.seen == []  # neither request went near it
    assert len(server.hits) == 1
    assert "intranet.corp.test" in refused

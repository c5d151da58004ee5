"""The HTTP connector's request headers and configured secrets, against a local server:
only allowlisted headers are sent, and no configured secret ever comes back.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from bot.engine import ToolError
from connectors.http import HTTP
from connectors.http.headers import DEFAULT_REQUEST_HEADERS

from .http_server_fixture import (
    API_KEY,
    Factory,
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

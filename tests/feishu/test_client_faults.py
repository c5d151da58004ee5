"""FeishuClient when the network fails it: timeouts, resets, gateway pages, a proxy's refusals.

The OpenAPI goes over aiohttp (:mod:`bot.feishu.transport`), so these faults are made with
``aioresponses``, which stands in for aiohttp's session: no server, and exactly the
exception or answer a real network produces. Each goes through the public API (a reply,
a POST; ``bot_info``, a GET) and must end as ``FeishuTransportError``: retryable, counted
under its endpoint, with a message that says what happened and carries no token, secret
or proxy password. The wire-level behaviour behind these (what a cut-off or late answer
becomes) is tested against real sockets in test_transport_wire.py.
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aioresponses import aioresponses
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from bot.feishu import FeishuClient, FeishuError, FeishuProxyAuthRequired, FeishuTransportError
from bot.feishu.config import FeishuConfig
from bot.network import Network

DOMAIN = "https://open.feishu.cn"
TOKEN = "t-g1044tenant0token0secret0value"
SECRET = "app-secret-7f3a9c"
PROXY_PASSWORD = "pw-9z7y"
PROXY = f"http://corp:{PROXY_PASSWORD}@proxy.corp:3128"
PROXY_CREDENTIALS = base64.b64encode(f"corp:{PROXY_PASSWORD}".encode()).decode()

TOKEN_URL = f"{DOMAIN}/open-apis/auth/v3/tenant_access_token/internal"
REPLY_URL = f"{DOMAIN}/open-apis/im/v1/messages/om_1/reply"
BOT_INFO_URL = f"{DOMAIN}/open-apis/bot/v3/info"

REPLIED = {"code": 0, "msg": "success", "data": {"message_id": "om_2", "chat_id": "oc_1"}}
BOT = {"code": 0, "msg": "ok", "bot": {"open_id": "ou_bot", "app_name": "larkgate"}}


@dataclass(frozen=True)
class Call:
    """A public call of the client, the URL and method it goes to, and a good answer."""

    endpoint: str
    method: str
    url: str
    good: dict[str, Any]
    make: Callable[[FeishuClient], Awaitable[Any]]


CALLS = [
    Call(
        "im.message.reply",
        "POST",
        REPLY_URL,
        REPLIED,
        lambda client: client.reply_message("om_1", msg_type="text", content='{"text":"hi"}'),
    ),
    Call("bot.info", "GET", BOT_INFO_URL, BOT, lambda client: client.bot_info()),
]


def proxy_refusal(status: int, message: str) -> aiohttp.ClientHttpProxyError:
    """What aiohttp raises when the proxy answers the CONNECT with ``status``: its request
    info carries the Proxy-Authorization header it sent."""
    target = URL("https://open.feishu.cn:443")
    headers = CIMultiDictProxy(CIMultiDict({"Proxy-Authorization": f"Basic {PROXY_CREDENTIALS}"}))
    info = aiohttp.RequestInfo(target, "CONNECT", headers, target)
    return aiohttp.ClientHttpProxyError(info, (), status=status, message=message)


@dataclass(frozen=True)
class Fault:
    """An aioresponses answer (``mock``) and what the caller must be told: ``said``, regexes
    the message must match; ``retryable``, whether the same call may succeed later (None:
    not asserted); ``cause``, the aiohttp exception chained as ``__cause__``."""

    mock: dict[str, Any]
    said: tuple[str, ...]
    http_status: int | None = None
    retryable: bool = True
    cause: type[BaseException] | None = None
    kind: type[FeishuTransportError] = FeishuTransportError


FAULTS = {
    "timeout": Fault(
        {"exception": TimeoutError()},
        (r"no answer in time", r"TimeoutError"),
        cause=TimeoutError,
    ),
    "reset mid-body": Fault(
        {
            "exception": aiohttp.ClientPayloadError(
                "Response payload is not completed: <ContentLengthError: 400, message='Not "
                "enough data to satisfy content length header.'>"
            )
        },
        (r"ClientPayloadError", r"payload is not completed"),
        cause=aiohttp.ClientPayloadError,
    ),
    "server disconnected": Fault(
        {"exception": aiohttp.ServerDisconnectedError()},
        (r"ServerDisconnectedError", r"Server disconnected"),
        cause=aiohttp.ServerDisconnectedError,
    ),
    "connection reset": Fault(
        {"exception": aiohttp.ClientOSError(104, "Connection reset by peer")},
        (r"ClientOSError", r"Connection reset by peer"),
        cause=aiohttp.ClientOSError,
    ),
    "gateway's HTML 502": Fault(
        {"status": 502, "body": "<html>Bad Gateway</html>", "content_type": "text/html"},
        (r"no Feishu JSON in the answer \(HTTP 502\)",),
        http_status=502,
    ),
    "truncated JSON": Fault(
        {"status": 200, "body": '{"code":0,"data":{'},
        (r"no Feishu JSON in the answer \(HTTP 200\)",),
        http_status=200,
    ),
    "proxy's 407": Fault(
        {"exception": proxy_refusal(407, "Proxy Authentication Required")},
        (r"the proxy refused", r"407", r"Proxy Authentication Required"),
        # A wrong or missing proxy password is not fixed by trying again.
        http_status=407,
        retryable=False,
        cause=aiohttp.ClientHttpProxyError,
        kind=FeishuProxyAuthRequired,
    ),
    "proxy's 502": Fault(
        {"exception": proxy_refusal(502, "Bad Gateway")},
        (r"the proxy refused", r"502", r"Bad Gateway"),
        http_status=502,
        cause=aiohttp.ClientHttpProxyError,
    ),
    "proxy's HTML 502": Fault(
        {
            "status": 502,
            "body": "<html><h1>502 Bad Gateway</h1>squid</html>",
            "content_type": "text/html",
        },
        (r"no Feishu JSON in the answer \(HTTP 502\)",),
        http_status=502,
    ),
}


class _Answer(aiohttp.ClientResponse):
    """aiohttp 3.14's ClientResponse takes a ``stream_writer`` that aioresponses 0.7.9 does
    not pass (pnuckowski/aioresponses#289): the request is already "sent", so all the
    response reads of it is ``output_size``."""

    def __init__(self, method: str, url: URL, **kwargs: Any) -> None:
        kwargs.setdefault("stream_writer", SimpleNamespace(output_size=0))
        super().__init__(method, url, **kwargs)


class FaultyNetwork(aioresponses):
    """aioresponses whose answers are built as aiohttp 3.14 builds them."""

    # Only fills in one keyword: the same parameters as aioresponses.add, passed on.
    def add(self, url: Any, method: str = "GET", **kwargs: Any) -> None:  # type: ignore[override]
        kwargs.setdefault("response_class", _Answer)
        super().add(url, method, **kwargs)


@pytest.fixture
def mocked() -> Iterator[aioresponses]:
    with FaultyNetwork() as mock:
        yield mock


@pytest.fixture
def observed() -> list[tuple[str, str]]:
    return []


@pytest.fixture
async def client(observed: list[tuple[str, str]]) -> AsyncIterator[FeishuClient]:
    config = FeishuConfig(
        app_id="cli_test",
        app_secret=SECRET,
        verification_token="vt",
        encrypt_key="ek",
        domain=DOMAIN,
    )
    network = Network(proxies={"https": PROXY})
    on_call = lambda endpoint, code: observed.append((endpoint, code))  # noqa: E731
    async with FeishuClient(config, timeout=1.0, on_call=on_call, network=network) as feishu:
        yield feishu


def answer_the_token(mocked: aioresponses) -> None:
    mocked.post(
        TOKEN_URL, payload={"code": 0, "msg": "ok", "tenant_access_token": TOKEN, "expire": 7200}
    )


def assert_nothing_secret_in(text: str) -> None:
    for secret in (TOKEN, SECRET, PROXY_PASSWORD, PROXY_CREDENTIALS):
        assert secret not in text


@pytest.mark.parametrize("call", CALLS, ids=[c.endpoint for c in CALLS])
@pytest.mark.parametrize("fault", FAULTS.values(), ids=list(FAULTS))
async def test_a_fault_is_a_clear_retryable_transport_error(
    mocked: aioresponses,
    client: FeishuClient,
    observed: list[tuple[str, str]],
    caplog: pytest.LogCaptureFixture,
    call: Call,
    fault: Fault,
) -> None:
    caplog.set_level(logging.DEBUG)
    answer_the_token(mocked)
    mocked.add(call.url, call.method, **fault.mock)

    with pytest.raises(FeishuError) as caught:
        await call.make(client)

    error = caught.value
    assert type(error) is fault.kind
    assert error.endpoint == call.endpoint
    assert error.code is None
    assert error.http_status == fault.http_status
    message = str(error)
    assert message.startswith(f"{call.endpoint}: ")
    for said in fault.said:
        assert re.search(said, message), (said, message)
    assert error.retryable is fault.retryable
    if fault.cause is not None:
        assert isinstance(error.__cause__, fault.cause)
    assert_nothing_secret_in(message)
    assert_nothing_secret_in(caplog.text)
    assert f"feishu {call.endpoint} failed" in caplog.text

    # Counted once, under its endpoint and "no code"; not retried behind the caller's back.
    assert client.error_counts == {(call.endpoint, None): 1}
    assert client.call_counts == {"auth.tenant_token": 1, call.endpoint: 1}
    assert observed == [("auth.tenant_token", "0"), (call.endpoint, "transport")]

    # The request went through the proxy, with the token, as every request does.
    sent = mocked.requests[(call.method, URL(call.url))][0].kwargs
    assert sent["proxy"] == URL("http://proxy.corp:3128")
    assert sent["headers"]["Authorization"] == f"Bearer {TOKEN}"

    # The client is not broken by it: the same call then succeeds, on the same token.
    mocked.add(call.url, call.method, payload=call.good)
    await call.make(client)
    assert client.call_counts == {"auth.tenant_token": 1, call.endpoint: 2}
    assert client.error_counts == {(call.endpoint, None): 1}


@pytest.mark.parametrize(
    "fault", [FAULTS["timeout"], FAULTS["gateway's HTML 502"]], ids=["timeout", "HTML 502"]
)
async def test_a_fault_fetching_the_token_is_a_transport_error_without_the_secret(
    mocked: aioresponses, client: FeishuClient, caplog: pytest.LogCaptureFixture, fault: Fault
) -> None:
    caplog.set_level(logging.DEBUG)
    mocked.post(TOKEN_URL, **fault.mock)

    with pytest.raises(FeishuError) as caught:
        await client.bot_info()

    error = caught.value
    # Passed on as it is (retryable), not dressed up as wrong credentials.
    assert type(error) is fault.kind
    assert error.retryable is True
    assert error.endpoint == "auth.tenant_token"
    assert "FEISHU_APP_SECRET" not in str(error)
    for said in fault.said:
        assert re.search(said, str(error))
    assert_nothing_secret_in(str(error))
    assert_nothing_secret_in(caplog.text)
    assert client.error_counts == {("auth.tenant_token", None): 1}
    assert client.call_counts == {"auth.tenant_token": 1}

    # The next call fetches the token again and goes through.
    answer_the_token(mocked)
    mocked.get(BOT_INFO_URL, payload=BOT)
    assert (await client.bot_info()).open_id == "ou_bot"


async def test_a_body_nested_too_deep_to_parse_is_a_transport_error(
    mocked: aioresponses, client: FeishuClient
) -> None:
    # A gateway's garbage, or a hostile middlebox: json.loads raises RecursionError (not a
    # ValueError) on a body nested past the interpreter's recursion limit.
    answer_the_token(mocked)
    mocked.get(BOT_INFO_URL, status=200, body="[" * 100_000)

    with pytest.raises(FeishuTransportError) as caught:
        await client.bot_info()

    assert caught.value.retryable is True
    assert client.error_counts == {("bot.info", None): 1}

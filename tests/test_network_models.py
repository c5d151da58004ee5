"""The model, its start-up probe, transcription, MCP over HTTP and the whole bot, through a
company's network: a real forward proxy (tests/support/forward_proxy.py) and TLS fakes
whose certificates a test CA signed, under ``.test`` names that only the proxy resolves,
so a request that went around the proxy could not reach anything.

httpx (the model's client, MCP's) reads ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY`` from
the environment when a client is made, so each test sets them (``_through``) before it
makes one; ``NO_PROXY`` keeps 127.0.0.1 direct (the test's own pushes to the bot).
"""

from __future__ import annotations

import asyncio
import importlib.util
import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import trustme
import uvicorn
from mcp.server.transport_security import TransportSecuritySettings

from bot.engine.llm import LLMError, LLMTransientError
from bot.engine.messages import Message
from bot.engine.openai_compat import OpenAICompatibleLLM
from bot.engine.probe import probe_endpoint
from bot.network import Network, model_http_client
from connectors.base import ConnectorContext
from connectors.mcp import MCP, MCPSettings

from e2e.harness import BOT_OPEN_ID, answering, running_bot, settings_for
from fakes.feishu_server import FakeFeishu
from fakes.openai_server import FakeOpenAIServer
from support.forward_proxy import ForwardProxy, TestAuthority
from support.servers import free_port
from support.waiting import wait_until

MODEL = "model.corp.test"
FEISHU = "open.feishu.test"
MCP_HOST = "mcp.corp.test"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY")
MCP_FIXTURE = Path(__file__).parent / "connector_tools" / "mcp_server_fixture.py"


def _through(monkeypatch: pytest.MonkeyPatch, proxy: ForwardProxy, *schemes: str) -> None:
    """The environment of a company network: ``schemes`` go through ``proxy``, nothing else
    set (the lower-case names win, so they go too); 127.0.0.1 stays direct."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    for scheme in schemes:
        monkeypatch.setenv(f"{scheme.upper()}_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def _named(server: FakeOpenAIServer, name: str, tls: ssl.SSLContext | None) -> FakeOpenAIServer:
    server.name = name
    server.tls = tls
    return server


def _llm(server: FakeOpenAIServer, network: Network) -> OpenAICompatibleLLM:
    # No retries: a refused certificate must fail at once, not after backoff.
    return OpenAICompatibleLLM(
        server.base_url,
        "sk-corp-not-secret",
        "corp-model",
        max_retries=0,
        timeout=10.0,
        http_client=model_http_client(network),
    )


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: BaseException | None = exc
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


QUESTION = [Message.user("What is the capital of France?")]


@pytest.fixture
def authority(tmp_path: Path) -> TestAuthority:
    return TestAuthority(tmp_path)


@asynccontextmanager
async def _model_behind_proxy(
    monkeypatch: pytest.MonkeyPatch, tls: ssl.SSLContext | None
) -> AsyncIterator[tuple[FakeOpenAIServer, ForwardProxy]]:
    server = _named(FakeOpenAIServer(), MODEL, tls)
    async with server, ForwardProxy({MODEL: "127.0.0.1"}) as proxy:
        _through(monkeypatch, proxy, "https" if tls else "http")
        yield server, proxy


# -- the model over http://: absolute form -----------------------------------------------


async def test_the_model_over_http_goes_through_the_proxy_in_absolute_form(monkeypatch):
    async with _model_behind_proxy(monkeypatch, None) as (server, proxy):
        server.push_text("Paris.")
        server.push_text("Paris, streamed.")
        llm = _llm(server, Network())
        try:
            answer = await llm.chat(QUESTION)
            streamed = [delta async for delta in llm.stream_chat(QUESTION)]
        finally:
            await llm.aclose()

    assert answer.content == "Paris."
    assert "".join(delta.content for delta in streamed) == "Paris, streamed."
    assert len(streamed) > 2  # in pieces, as they were sent
    endpoint = f"http://{MODEL}:{server.port}/v1/chat/completions"
    assert proxy.seen == [("POST", endpoint), ("POST", endpoint)]
    assert [r.body.get("stream", False) for r in server.requests] == [False, True]


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_a_proxy_wanting_credentials_is_said_and_not_retried(monkeypatch, authority, scheme):
    """The proxy's 407: to an absolute-form request (http://) it is the HTTP answer, to a
    CONNECT (https://) the tunnel's refusal; either way the model hears nothing, the error
    says what to set, and no retry repeats it."""
    tls = authority.server_context(MODEL) if scheme == "https" else None
    server = _named(FakeOpenAIServer(), MODEL, tls)
    async with server, ForwardProxy({MODEL: "127.0.0.1"}, credentials="corp:right") as proxy:
        _through(monkeypatch, proxy, scheme)
        monkeypatch.setenv(f"{scheme.upper()}_PROXY", proxy.url_with("corp:wrong-pw"))
        llm = OpenAICompatibleLLM(
            server.base_url,
            "sk-corp-not-secret",
            "corp-model",
            max_retries=3,  # would back off and try again if it took this for a hiccup
            http_client=model_http_client(Network(ca_bundle=authority.pem)),
        )
        try:
            with pytest.raises(LLMError) as raised:
                await llm.chat(QUESTION)
        finally:
            await llm.aclose()
    assert "the proxy wants credentials (HTTP 407)" in str(raised.value)
    assert not isinstance(raised.value, LLMTransientError)
    assert proxy.refused == [407]  # once: not retried
    assert server.requests == []
    assert "wrong-pw" not in str(raised.value)


async def test_a_host_in_no_proxy_goes_direct_where_its_name_does_not_resolve(monkeypatch):
    # The control of the test above: the .test name resolves only at the proxy.
    async with _model_behind_proxy(monkeypatch, None) as (server, proxy):
        monkeypatch.setenv("NO_PROXY", f"127.0.0.1,localhost,{MODEL}")
        llm = _llm(server, Network())
        try:
            with pytest.raises(LLMError, match="connection error"):
                await llm.chat(QUESTION)
        finally:
            await llm.aclose()

    assert proxy.seen == []
    assert server.requests == []


# -- the model over https://: a CONNECT tunnel, and whom it trusts ---------------------


async def test_the_model_over_https_tunnels_through_the_proxy_trusting_the_company_ca(
    monkeypatch, authority
):
    async with _model_behind_proxy(monkeypatch, authority.server_context(MODEL)) as (
        server,
        proxy,
    ):
        server.push_text("Paris.")
        server.push_text("Paris, streamed.")
        llm = _llm(server, Network(ca_bundle=authority.pem))
        try:
            answer = await llm.chat(QUESTION)
            streamed = "".join([d.content async for d in llm.stream_chat(QUESTION)])
        finally:
            await llm.aclose()

    assert (answer.content, streamed) == ("Paris.", "Paris, streamed.")
    assert proxy.forwarded() == []  # nothing in the clear
    assert proxy.connects() and set(proxy.connects()) == {f"{MODEL}:{server.port}"}
    assert all(r.headers["Authorization"] == "Bearer sk-corp-not-secret" for r in server.requests)


async def test_ssl_cert_file_naming_the_company_ca_works_as_larkgate_ca_bundle_does(
    monkeypatch, authority
):
    monkeypatch.setenv("SSL_CERT_FILE", str(authority.pem))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    async with _model_behind_proxy(monkeypatch, authority.server_context(MODEL)) as (
        server,
        proxy,
    ):
        server.push_text("Paris.")
        llm = _llm(server, Network())
        try:
            answer = await llm.chat(QUESTION)
        finally:
            await llm.aclose()

    assert answer.content == "Paris."
    assert proxy.connects() == [f"{MODEL}:{server.port}"]


@pytest.mark.parametrize("who", ["unknown CA", "another CA", "another name"])
async def test_an_interceptor_the_bot_does_not_trust_is_refused_before_the_key_is_sent(
    monkeypatch, authority, tmp_path, who
):
    """What answers the tunnel is not trusted: a certificate from a CA the bot was not
    told of (no LARKGATE_CA_BUNDLE), one from another CA than the company's (a proxy that
    intercepts TLS with its own), or the company CA's certificate for another name."""
    if who == "another CA":
        certificate = trustme.CA().issue_cert(MODEL)
    elif who == "another name":
        certificate = authority.ca.issue_cert("elsewhere.corp.test")
    else:
        certificate = authority.ca.issue_cert(MODEL)
    interceptor = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    certificate.configure_cert(interceptor)
    network = Network() if who == "unknown CA" else Network(ca_bundle=authority.pem)
    async with _model_behind_proxy(monkeypatch, interceptor) as (server, proxy):
        server.push_text("whatever you asked")
        llm = _llm(server, network)
        try:
            with pytest.raises(LLMError) as raised:
                await llm.chat(QUESTION)
        finally:
            await llm.aclose()

    assert any(isinstance(c, ssl.SSLCertVerificationError) for c in _causes(raised.value))
    assert proxy.connects() == [f"{MODEL}:{server.port}"]
    assert server.requests == []  # no question, no API key, reached it


async def test_a_refused_certificate_says_so_in_the_error(monkeypatch, authority):
    async with _model_behind_proxy(monkeypatch, authority.server_context(MODEL)) as (
        server,
        _proxy,
    ):
        llm = _llm(server, Network())
        try:
            with pytest.raises(LLMError) as raised:
                await llm.chat(QUESTION)
        finally:
            await llm.aclose()

    # Said as what it is, with what to do, and not retried as a dropped connection.
    assert "certificate is not trusted" in str(raised.value)
    assert "LARKGATE_CA_BUNDLE" in str(raised.value)
    assert not isinstance(raised.value, LLMTransientError)


# -- the start-up probe and transcription -------------------------------------------------


async def test_the_start_up_probe_goes_through_the_proxy(monkeypatch, authority):
    async with _model_behind_proxy(monkeypatch, authority.server_context(MODEL)) as (
        server,
        proxy,
    ):
        network = Network(ca_bundle=authority.pem)
        report = await probe_endpoint(
            server.base_url,
            "sk-corp-not-secret",
            "corp-model",
            request_timeout=10.0,
            http_client=model_http_client(network),
        )

    assert (report.tool_calls, report.json_mode) == ("native", "accepted"), report.notes
    assert server.probes
    assert proxy.connects() and set(proxy.connects()) == {f"{MODEL}:{server.port}"}
    assert proxy.forwarded() == []


async def test_a_probe_of_an_untrusted_endpoint_finds_nothing_and_sends_nothing(
    monkeypatch, authority
):
    async with _model_behind_proxy(monkeypatch, authority.server_context(MODEL)) as (
        server,
        proxy,
    ):
        report = await probe_endpoint(
            server.base_url,
            "sk-corp-not-secret",
            "corp-model",
            request_timeout=10.0,
            http_client=model_http_client(Network()),
        )

    assert not report.answered
    assert proxy.connects()
    assert server.probes == [] and server.requests == []


async def test_transcription_goes_through_the_proxy(monkeypatch, authority):
    async with _model_behind_proxy(monkeypatch, authority.server_context(MODEL)) as (
        server,
        proxy,
    ):
        server.transcript = "  see you at noon  "
        llm = _llm(server, Network(ca_bundle=authority.pem))
        try:
            text = await llm.transcribe(b"OggS-voice", file_name="voice.ogg", model="whisper-1")
        finally:
            await llm.aclose()

    assert text == "see you at noon"
    assert server.transcriptions == [
        {"model": "whisper-1", "file_name": "voice.ogg", "data": b"OggS-voice"}
    ]
    assert proxy.connects() == [f"{MODEL}:{server.port}"]


# -- MCP over HTTP ------------------------------------------------------------------------


def _mcp_server_module() -> Any:
    spec = importlib.util.spec_from_file_location("larkgate_mcp_server_fixture", MCP_FIXTURE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@asynccontextmanager
async def _mcp_server(
    certificate: Path | None,
) -> AsyncIterator[tuple[int, list[tuple[str, str]]]]:
    """The fixture MCP server over streamable HTTP on 127.0.0.1 (over TLS with the PEM of
    ``certificate``'s key and chain): its port, and the method and Host of each request it
    received."""
    port = free_port()
    received: list[tuple[str, str]] = []
    # Its DNS-rebinding guard admits the name it is served under, as a company's would.
    app = (
        _mcp_server_module()
        .build_server()
        .streamable_http_app(
            transport_security=TransportSecuritySettings(allowed_hosts=[f"{MCP_HOST}:*"])
        )
    )

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            received.append((scope["method"], dict(scope["headers"]).get(b"host", b"").decode()))
        await app(scope, receive, send)

    # uvicorn types the grace as whole seconds; it takes a fraction as well.
    options: dict[str, Any] = {"timeout_graceful_shutdown": 0.2}
    if certificate is not None:
        options.update(ssl_certfile=str(certificate), ssl_keyfile=str(certificate))
    config = uvicorn.Config(
        recording, host="127.0.0.1", port=port, log_level="warning", lifespan="on", **options
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())

    def started() -> bool:
        if task.done():
            task.result()  # it failed to start: raise why
        return server.started

    try:
        await wait_until(started, 10.0, every=0.01)
        yield port, received
    finally:
        server.should_exit = True
        await task


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_mcp_over_http_goes_through_the_proxy(monkeypatch, authority, tmp_path, scheme):
    certificate = None
    if scheme == "https":
        certificate = tmp_path / "mcp.pem"
        authority.ca.issue_cert(MCP_HOST).private_key_and_cert_chain_pem.write_to_path(
            str(certificate)
        )
    async with (
        _mcp_server(certificate) as (port, received),
        ForwardProxy({MCP_HOST: "127.0.0.1"}) as proxy,
    ):
        _through(monkeypatch, proxy, scheme)
        url = f"{scheme}://{MCP_HOST}:{port}/mcp"
        settings = MCPSettings.model_validate(
            {
                "servers": [
                    {"name": "corp", "transport": "http", "url": url, "read": ["add"]},
                ],
                "startup_timeout_seconds": 10,
            }
        )
        network = Network(ca_bundle=authority.pem)
        connector = MCP(settings, ConnectorContext(network=network))
        await connector.start()
        try:
            tools = {tool.name: tool for tool in connector.tools()}
            assert "corp_add" in tools, (await connector.check(), proxy.seen, proxy.refused)
            add = tools["corp_add"]
            assert await add.handler(**add.validate_arguments({"a": 20, "b": 22})) == "42"
        finally:
            await connector.aclose()

    assert proxy.refused == []
    if scheme == "http":
        assert proxy.connects() == []
        # Every request the server received came through the proxy, one a connection.
        assert proxy.forwarded() == [url] * len(received), (proxy.seen, received)
    else:
        assert proxy.forwarded() == []
        assert proxy.connects() and set(proxy.connects()) == {f"{MCP_HOST}:{port}"}
    # The listing and the call at least, each addressed to the name only the proxy knows.
    assert len(received) >= 2
    assert {host for _, host in received} == {f"{MCP_HOST}:{port}"}


async def test_mcp_refuses_an_https_server_it_does_not_trust(monkeypatch, tmp_path):
    certificate = tmp_path / "mcp.pem"
    trustme.CA().issue_cert(MCP_HOST).private_key_and_cert_chain_pem.write_to_path(str(certificate))
    async with (
        _mcp_server(certificate) as (port, received),
        ForwardProxy({MCP_HOST: "127.0.0.1"}) as proxy,
    ):
        _through(monkeypatch, proxy, "https")
        settings = MCPSettings.model_validate(
            {
                "servers": [
                    {"name": "corp", "transport": "http", "url": f"https://{MCP_HOST}:{port}/mcp"}
                ],
                "startup_timeout_seconds": 10,
            }
        )
        connector = MCP(settings, ConnectorContext(network=Network()))
        await connector.start()
        try:
            assert connector.tools() == []
            status = await connector.check()
        finally:
            await connector.aclose()

    assert proxy.connects() == [f"{MCP_HOST}:{port}"]
    assert received == []  # the TLS handshake failed: no request reached it
    assert not status.ok and "corp" in status.detail, status
    assert "CERTIFICATE_VERIFY_FAILED" in status.detail  # MCP's status says why


# -- the whole bot ------------------------------------------------------------------------


async def test_the_bot_answers_with_feishu_and_the_model_behind_the_proxy_on_tls(
    monkeypatch, authority, tmp_path
):
    """FEISHU_DOMAIN https://open.feishu.test:<port>, LLM_BASE_URL
    https://model.corp.test:<port>/v1, both reachable only through HTTPS_PROXY and trusted
    only through LARKGATE_CA_BUNDLE; the Feishu push reaches the bot directly."""
    llm_server = _named(FakeOpenAIServer(), MODEL, authority.server_context(MODEL))
    llm_server.handler = answering
    feishu = FakeFeishu(bot_open_id=BOT_OPEN_ID, tls=authority.server_context(FEISHU), name=FEISHU)
    async with (
        feishu,
        llm_server,
        ForwardProxy({FEISHU: "127.0.0.1", MODEL: "127.0.0.1"}) as proxy,
    ):
        _through(monkeypatch, proxy, "https")
        settings = settings_for(tmp_path, feishu, llm_server, larkgate_ca_bundle=authority.pem)
        feishu_port = urlsplit(feishu.domain).port
        assert settings.feishu_domain == f"https://{FEISHU}:{feishu_port}"
        assert settings.llm_base_url == f"https://{MODEL}:{llm_server.port}/v1"
        async with running_bot(settings, feishu, llm_server) as bot:
            assert await bot.say("om_corp", "hello from behind the proxy") == 200
            reply = await bot.reply("om_corp")
            await bot.settle()

    assert "Answer to: hello from behind the proxy" in reply
    assert llm_server.probes  # the start-up probe went the same way
    # Everything the bot sent out went through a tunnel to one of the two, and only that.
    assert set(proxy.connects()) == {f"{FEISHU}:{feishu_port}", f"{MODEL}:{llm_server.port}"}
    assert proxy.forwarded() == [] and proxy.refused == []

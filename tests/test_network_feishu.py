"""larkgate on a company network, shown by behaviour: every way the bot reaches Feishu goes
through a real forward proxy (tests/support/forward_proxy.py) to TLS fakes whose
certificates a test CA signs, under ``.test`` names that only the proxy resolves. A call
that bypassed the proxy could not even find its host, so each success proves the route.

- the OpenAPI (token, bot info, a reply, a multipart upload, a download), the long
  connection (the endpoint request and the wss upgrade), the one-scan registration and
  the credential check of ``larkgate setup``, and the OAuth user-token calls: all in
  CONNECT tunnels, TLS end to end (the proxy never sees a path, a header or a token);
- trust: the company CA from ``LARKGATE_CA_BUNDLE`` or ``SSL_CERT_FILE``; an interceptor
  the deployment did not trust is refused before the app secret leaves the process;
- the environment as a deployment writes it: upper- and lower-case proxy variables,
  ``NO_PROXY``; proxy credentials (percent-encoded), a 407, and no password in any
  message or log line;
- the rules of :mod:`bot.network` as properties (hypothesis): NO_PROXY matching, the
  proxies of ws/wss, credentials kept out of URLs and reports, ``.env`` export.

Nothing sleeps: the tests wait on what the fakes observed.
"""

from __future__ import annotations

import base64
import io
import logging
import os
import string
import time
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bot.feishu import FeishuClient, FeishuError, FeishuTransportError
from bot.feishu.config import FeishuConfig
from bot.feishu.long_connection import LongConnection
from bot.feishu.oauth import FeishuOAuth, authorize_url
from bot.feishu.oauth_state import StateSigner
from bot.feishu.webhook import VerifiedEvent
from bot.network import (
    CA_BUNDLE_VARIABLE,
    NETWORK_VARIABLES,
    Network,
    export_from_env_file,
    parse_proxy,
    redacted,
)
from bot.onboarding import check_credentials, register

from fakes.feishu_push import card_action_event, message_event
from fakes.feishu_server import FakeFeishu
from fakes.feishu_ws import FakeLongConnection
from support.feishu import feishu_config
from support.forward_proxy import ForwardProxy, TestAuthority
from support.servers import free_port

# Names nothing but the proxy resolves (RFC 2606 reserves .test).
OPEN = "open.feishu.test"
ACCOUNTS = "accounts.feishu.test"  # where authorize_url puts the consent page of ``open.``
GATEWAY = "msg-frontier.feishu.test"
RESOLVES = {
    OPEN: "127.0.0.1",
    ACCOUNTS: "127.0.0.1",
    GATEWAY: "127.0.0.1",
    "127.0.0.1": "127.0.0.1",
}

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 16
TOKEN = "vt-corp"
REDIRECT = "https://bot.corp.test/feishu/oauth/callback"
SIGNER = StateSigner("a-secret-of-ours")
CORP_PROXY = "http://proxy.corp.test:3128"

# Every variable that could route or trust differently than a test says.
ENVIRONMENT = (*NETWORK_VARIABLES, CA_BUNDLE_VARIABLE, "ALL_PROXY", "all_proxy", "REQUEST_METHOD")


@pytest.fixture(autouse=True)
def clean_network_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy or CA setting of the machine (this one sets SSL_CERT_FILE) leaks in, and
    whatever a test or the code under test writes to them is undone afterwards (set
    first, so monkeypatch records the original state even of an absent variable)."""
    for name in ENVIRONMENT:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


@pytest.fixture
def ca(tmp_path: Path) -> TestAuthority:
    """The company's CA: what the deployment is told to trust."""
    folder = tmp_path / "company"
    folder.mkdir()
    return TestAuthority(folder)


@pytest.fixture
async def feishu(ca: TestAuthority) -> AsyncIterator[FakeFeishu]:
    """The Feishu emulator over TLS as ``open.feishu.test`` (the certificate also names
    the accounts host, which the consent page moves to)."""
    async with FakeFeishu(tls=ca.server_context(OPEN, ACCOUNTS), name=OPEN) as fake:
        yield fake


@pytest.fixture
async def proxy() -> AsyncIterator[ForwardProxy]:
    async with ForwardProxy(RESOLVES) as forward:
        yield forward


def through(proxy: ForwardProxy, ca: TestAuthority) -> Network:
    """The proxy for https (and so wss) targets, and the company CA added to the roots."""
    return Network(ca_bundle=ca.pem, proxies={"https": proxy.url})


def config(fake: FakeFeishu) -> FeishuConfig:
    return feishu_config(fake, verification_token="", encrypt_key="")


def authority(url: str) -> str:
    split = urllib.parse.urlsplit(url)
    return f"{split.hostname}:{split.port}"


def only_tunnels(proxy: ForwardProxy, *hosts: str) -> None:
    """The proxy carried CONNECT tunnels to exactly these ``host:port``s and nothing else:
    it never saw a method, path, header or body of the calls inside them."""
    assert proxy.seen, "nothing went through the proxy"
    assert all(method == "CONNECT" for method, _ in proxy.seen), proxy.seen
    assert set(proxy.connects()) == set(hosts), proxy.seen
    assert not any("/" in target for _, target in proxy.seen)
    assert proxy.refused == []


def debug_everywhere(caplog: pytest.LogCaptureFixture) -> None:
    for name in (None, "aiohttp", "asyncio", "bot", "Lark"):
        caplog.set_level(logging.DEBUG, logger=name)


# -- 1. the OpenAPI in a CONNECT tunnel --------------------------------------------------


async def test_the_openapi_goes_through_the_proxy_in_a_tunnel(feishu, proxy, ca):
    feishu.add_message("om_1", chat_id="oc_1")
    feishu.add_image_message("om_img", chat_id="oc_1", data=PNG, image_key="img_v3_in")

    async with FeishuClient(config(feishu), timeout=5.0, network=through(proxy, ca)) as client:
        token = await client.tokens.get()
        bot = await client.bot_info()
        sent = await client.reply_message(
            "om_1", msg_type="text", content='{"text":"from behind the proxy"}'
        )
        image_key = await client.upload_image(PNG)
        resource = await client.download_resource(
            "om_img", "img_v3_in", kind="image", max_bytes=1 << 20
        )

    assert token.startswith("t-")
    assert (bot.open_id, bot.app_name) == ("ou_bot", "larkgate")
    (reply,) = feishu.sent
    assert reply.message_id == sent.message_id and reply.reply_to == "om_1"
    assert reply.content == {"text": "from behind the proxy"}
    assert feishu.uploaded_images[image_key].data == PNG  # the multipart body arrived whole
    assert resource.data == PNG and resource.content_type == "image/png"
    paths = [r.path for r in feishu.requests]
    assert paths == [
        "/open-apis/auth/v3/tenant_access_token/internal",
        "/open-apis/bot/v3/info",
        "/open-apis/im/v1/messages/om_1/reply",
        "/open-apis/im/v1/images",
        "/open-apis/im/v1/messages/om_img/resources/img_v3_in",
    ]
    only_tunnels(proxy, authority(feishu.domain))


# -- 2. trust ------------------------------------------------------------------------------


@pytest.mark.parametrize("setting", ["LARKGATE_CA_BUNDLE", "SSL_CERT_FILE"])
async def test_the_company_ca_is_trusted_where_the_deployment_names_it(
    setting, feishu, proxy, ca, monkeypatch
):
    if setting == "SSL_CERT_FILE":
        # Replaces the default roots, as OpenSSL reads it; the context cache is keyed by
        # the variable's value, so this one is built afresh.
        monkeypatch.setenv("SSL_CERT_FILE", str(ca.pem))
        network = Network(proxies={"https": proxy.url})
    else:
        network = Network(ca_bundle=ca.pem, proxies={"https": proxy.url})

    async with FeishuClient(config(feishu), timeout=5.0, network=network) as client:
        bot = await client.bot_info()

    assert bot.open_id == "ou_bot"
    only_tunnels(proxy, authority(feishu.domain))


@pytest.mark.parametrize(
    ("trusted", "signer", "names"),
    [
        pytest.param(False, "company", (OPEN,), id="no CA configured"),
        pytest.param(True, "attacker", (OPEN,), id="an interceptor's own CA"),
        pytest.param(True, "company", ("other.feishu.test",), id="a trusted cert, other name"),
    ],
)
async def test_an_interceptor_the_deployment_did_not_trust_is_refused(
    trusted, signer, names, proxy, ca, tmp_path
):
    attacker_folder = tmp_path / "attacker"
    attacker_folder.mkdir()
    signers = {"company": ca, "attacker": TestAuthority(attacker_folder)}
    network = Network(ca_bundle=ca.pem if trusted else None, proxies={"https": proxy.url})

    interceptor = FakeFeishu(tls=signers[signer].server_context(*names), name=OPEN)
    async with (
        interceptor,
        FeishuClient(config(interceptor), timeout=5.0, network=network) as client,
    ):
        with pytest.raises(FeishuTransportError) as refused:
            await client.bot_info()

    message = str(refused.value)
    assert "CERTIFICATE_VERIFY_FAILED" in message or "certificate verify failed" in message
    assert refused.value.endpoint == "auth.tenant_token"
    # The tunnel was opened, TLS refused inside it: the app secret never reached the
    # interceptor (it got no request at all).
    assert proxy.connects() == [authority(interceptor.domain)]
    assert interceptor.requests == []
    assert interceptor.app_secret not in message


# -- 3. the environment as a deployment sets it --------------------------------------------


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "https_proxy"])
async def test_the_proxy_the_environment_names_is_used(variable, feishu, proxy, ca, monkeypatch):
    monkeypatch.setenv(variable, proxy.url)
    network = Network(ca_bundle=ca.pem)  # the environment read once, here

    async with FeishuClient(config(feishu), timeout=5.0, network=network) as client:
        bot = await client.bot_info()

    assert bot.open_id == "ou_bot"
    only_tunnels(proxy, authority(feishu.domain))


async def test_the_lower_case_proxy_variable_wins(feishu, proxy, ca, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{free_port()}")  # nothing there
    monkeypatch.setenv("https_proxy", proxy.url)

    async with FeishuClient(config(feishu), timeout=5.0, network=Network(ca_bundle=ca.pem)) as c:
        assert (await c.bot_info()).open_id == "ou_bot"

    only_tunnels(proxy, authority(feishu.domain))


@pytest.mark.parametrize("variable", ["NO_PROXY", "no_proxy"])
async def test_a_host_no_proxy_names_is_reached_directly(variable, proxy, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    async with FakeFeishu() as plain:  # http://127.0.0.1:<port>
        # Without NO_PROXY the same calls go to the proxy, in absolute form.
        async with FeishuClient(config(plain), timeout=5.0, network=Network()) as client:
            await client.bot_info()
        assert proxy.connects() == []
        assert proxy.forwarded() and all(
            target.startswith(f"{plain.domain}/open-apis/") for target in proxy.forwarded()
        )
        proxy.seen.clear()

        monkeypatch.setenv(variable, "localhost, 127.0.0.1")
        async with FeishuClient(config(plain), timeout=5.0, network=Network()) as client:
            bot = await client.bot_info()

    assert bot.open_id == "ou_bot"
    assert proxy.seen == []


async def test_a_test_name_resolves_only_through_the_proxy(feishu, proxy, ca, monkeypatch):
    # No proxy at all: the name is unknown to this machine's resolver.
    async with FeishuClient(config(feishu), timeout=5.0, network=Network(ca_bundle=ca.pem)) as c:
        with pytest.raises(FeishuTransportError) as direct:
            await c.bot_info()
    assert f"Cannot connect to host {authority(feishu.domain)}" in str(direct.value)

    # A proxy, but NO_PROXY covers the name (a dotted suffix): direct again, and failing.
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", ".feishu.test")
    async with FeishuClient(config(feishu), timeout=5.0, network=Network(ca_bundle=ca.pem)) as c:
        with pytest.raises(FeishuTransportError) as bypassed:
            await c.bot_info()
    assert f"Cannot connect to host {authority(feishu.domain)}" in str(bypassed.value)
    assert proxy.seen == [] and feishu.requests == []


# -- 4. proxy credentials ------------------------------------------------------------------


async def test_percent_encoded_proxy_credentials_are_accepted(feishu, ca, monkeypatch, caplog):
    debug_everywhere(caplog)
    async with ForwardProxy(RESOLVES, credentials="user:p@ss") as guarded:
        monkeypatch.setenv("HTTPS_PROXY", f"http://user:p%40ss@127.0.0.1:{guarded.port}")
        network = Network(ca_bundle=ca.pem)
        async with FeishuClient(config(feishu), timeout=5.0, network=network) as client:
            bot = await client.bot_info()

    assert bot.open_id == "ou_bot"
    only_tunnels(guarded, authority(feishu.domain))
    assert_never_logged(caplog, "p@ss", "p%40ss", base64.b64encode(b"user:p@ss").decode())


async def test_wrong_proxy_credentials_are_a_407_that_shows_no_password(
    feishu, ca, monkeypatch, caplog
):
    debug_everywhere(caplog)
    async with ForwardProxy(RESOLVES, credentials="user:p@ss") as guarded:
        monkeypatch.setenv("HTTPS_PROXY", f"http://user:wr%40ng-s3cret@127.0.0.1:{guarded.port}")
        network = Network(ca_bundle=ca.pem)
        async with FeishuClient(config(feishu), timeout=5.0, network=network) as client:
            with pytest.raises(FeishuError) as refused:
                await client.bot_info()

    assert "407" in str(refused.value)
    assert guarded.refused == [407] and feishu.requests == []
    leaks = ("wr@ng-s3cret", "wr%40ng-s3cret", base64.b64encode(b"user:wr@ng-s3cret").decode())
    for leak in leaks:
        assert leak not in str(refused.value) and leak not in repr(refused.value)
        assert leak not in str(refused.value.__cause__)
    assert_never_logged(caplog, *leaks)
    assert any("407" in r.getMessage() for r in caplog.records)  # the failure is logged


async def test_wrong_proxy_credentials_are_a_transport_error_about_the_proxy(
    feishu, ca, monkeypatch
):
    async with ForwardProxy(RESOLVES, credentials="user:p@ss") as guarded:
        monkeypatch.setenv("HTTPS_PROXY", f"http://user:wrong@127.0.0.1:{guarded.port}")
        network = Network(ca_bundle=ca.pem)
        async with FeishuClient(config(feishu), timeout=5.0, network=network) as client:
            with pytest.raises(FeishuTransportError) as refused:
                await client.bot_info()

    assert "407" in str(refused.value) and "proxy" in str(refused.value)
    assert "FEISHU_APP_SECRET" not in str(refused.value)


async def test_a_proxy_password_outside_latin1_is_sent_as_utf8(feishu, ca, monkeypatch):
    # RFC 7617's UTF-8, as httpx (the model's client) sends the same HTTPS_PROXY's.
    async with ForwardProxy(RESOLVES, credentials="user:密码") as guarded:
        password = urllib.parse.quote("密码")
        monkeypatch.setenv("HTTPS_PROXY", f"http://user:{password}@127.0.0.1:{guarded.port}")
        network = Network(ca_bundle=ca.pem)
        async with FeishuClient(config(feishu), timeout=5.0, network=network) as client:
            assert (await client.bot_info()).open_id == "ou_bot"

    only_tunnels(guarded, authority(feishu.domain))


def assert_never_logged(caplog: pytest.LogCaptureFixture, *secrets: str) -> None:
    for record in caplog.records:
        text = f"{record.getMessage()} {record.exc_text or ''} {record.args!r}"
        for secret in secrets:
            assert secret not in text, f"{secret!r} in a {record.name} log record"
    for secret in secrets:
        assert secret not in caplog.text


# -- 5. the long connection ----------------------------------------------------------------


async def test_the_long_connection_goes_through_the_proxy(
    proxy: ForwardProxy, ca: TestAuthority
) -> None:
    gateway = FakeLongConnection()
    gateway.tls = ca.server_context(GATEWAY)
    gateway.name = GATEWAY
    events: list[VerifiedEvent] = []
    cards: list[VerifiedEvent] = []

    async def on_event(event: VerifiedEvent) -> None:
        events.append(event)

    async def on_card(event: VerifiedEvent) -> dict[str, Any]:
        cards.append(event)
        return {"toast": {"type": "success", "content": "ok"}}

    async with gateway:
        connection = LongConnection(
            feishu_config(gateway, verification_token=TOKEN, encrypt_key=""),
            on_event=on_event,
            on_card=on_card,
            network=through(proxy, ca),
            heartbeat=None,
        )
        connection.start()
        try:
            link = await gateway.wait_connections(1)
            envelope = message_event(message_id="om_ws", chat_id="oc_1", verification_token=TOKEN)
            event_answer = await gateway.response_to(await gateway.push_event(envelope))
            card = card_action_event(verification_token=TOKEN, value={"action": "approve"})
            card_answer = await gateway.response_to(await gateway.push_event(card))
            health = connection.health
        finally:
            await connection.aclose()

    assert health.state == "connected" and health.reconnects == 0
    assert event_answer.code == 200 and [e.envelope for e in events] == [envelope]
    assert card_answer.data == {"toast": {"type": "success", "content": "ok"}}
    assert [c.event_type for c in cards] == ["card.action.trigger"]
    assert gateway.endpoint_requests == [{"AppID": "cli_test", "AppSecret": "secret"}]
    assert link.request.secure  # the endpoint answered wss://, and the upgrade was TLS
    assert link.request.host == authority(gateway.domain)
    only_tunnels(proxy, authority(gateway.domain))


# -- 6. larkgate setup: registration and credential check ----------------------------------


async def test_the_registration_and_credential_check_go_through_the_proxy(feishu, proxy, ca):
    feishu.registration_interval = 0  # the SDK sleeps this long between polls
    feishu.script_registration("pending", "success")
    network = through(proxy, ca)
    out = io.StringIO()

    app = await register(
        feishu_accounts=feishu.accounts_url,
        lark_accounts=feishu.lark_accounts_url,
        lark=False,
        out=out,
        network=network,
    )
    bot = await check_credentials(app, feishu.domain, network)

    assert feishu.registered_apps == {app.app_id: app.app_secret}
    assert app.brand == "feishu" and app.owner_open_id == "ou_fake_alice"
    assert bot.open_id == "ou_bot"
    (registration,) = feishu.registrations
    assert registration.polls == [("feishu", "pending"), ("feishu", "success")]
    assert f"user_code={registration.user_code}" in out.getvalue()  # the link was shown
    assert [r.path for r in feishu.requests] == [
        *["/oauth/v1/app/registration"] * 4,  # init, begin, two polls
        "/open-apis/auth/v3/tenant_access_token/internal",
        "/open-apis/bot/v3/info",
    ]
    only_tunnels(proxy, authority(feishu.domain))


# -- 7. OAuth user tokens --------------------------------------------------------------------


async def test_the_oauth_token_calls_go_through_the_proxy(feishu, proxy, ca):
    network = through(proxy, ca)
    feishu.consent_as("ou_fake_bob")
    issued = SIGNER.issue(open_id="ou_fake_bob", chat_id="oc_1", now=time.time(), ttl_seconds=600)
    url = authorize_url(
        feishu.app_id,
        REDIRECT,
        issued.state,
        issued.code_challenge,
        ["calendar:calendar"],
        domain=feishu.domain,
    )
    port = urllib.parse.urlsplit(feishu.domain).port
    split = urllib.parse.urlsplit(url)
    assert split.hostname == ACCOUNTS
    # The person's browser, on the same network, consents on the accounts host (at the
    # emulator's port).
    consent = f"https://{ACCOUNTS}:{port}{split.path}?{split.query}"
    async with (
        network.client_session() as browser,
        browser.get(consent, allow_redirects=False) as answer,
    ):
        assert answer.status == 302
        location = urllib.parse.urlsplit(answer.headers["Location"])
    back = dict(urllib.parse.parse_qsl(location.query))
    verifier = SIGNER.code_verifier(SIGNER.verify(back["state"], now=time.time()))
    assert proxy.connects() == [f"{ACCOUNTS}:{port}"]
    proxy.seen.clear()

    async with FeishuClient(config(feishu), timeout=5.0, network=network) as client:
        oauth = FeishuOAuth(client, config(feishu))
        tokens = await oauth.exchange_code(
            back["code"], redirect_uri=REDIRECT, code_verifier=verifier
        )
        renewed = await oauth.refresh(tokens.refresh_token, open_id=tokens.open_id)

    assert tokens.open_id == "ou_fake_bob" and tokens.access_token.startswith("u-")
    assert renewed.access_token != tokens.access_token
    assert client.call_counts["authen.oauth.token"] == 2
    assert client.call_counts["authen.user_info"] == 1
    grants = [r.json["grant_type"] for r in feishu.requests if r.path.endswith("/oauth/token")]
    assert grants == ["authorization_code", "refresh_token"]
    only_tunnels(proxy, authority(feishu.domain))


def test_the_consent_page_keeps_the_port_of_a_private_deployment():
    url = authorize_url("cli_1", REDIRECT, "st", "ch", [], domain="https://open.corp.test:8443")
    assert url.startswith("https://accounts.corp.test:8443/open-apis/authen/v1/authorize?")


# -- 8. the rules of bot.network, as properties ----------------------------------------------

LABEL = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=10)
HOST = st.lists(LABEL, min_size=1, max_size=4).map(".".join)
SCHEME = st.sampled_from(["http", "https", "ws", "wss"])


def every_scheme(no: str) -> Network:
    return Network(proxies={"http": CORP_PROXY, "https": CORP_PROXY, "no": no})


@given(HOST, HOST, SCHEME)
def test_no_proxy_covers_a_host_and_everything_under_it(name, sub, scheme):
    for entry in (name, f".{name}", name.upper()):
        network = every_scheme(f"localhost, {entry} ,10.0.0.1")
        assert network.proxy_for(f"{scheme}://{name}/") is None
        assert network.proxy_for(f"{scheme}://{sub}.{name}:8443/x?y") is None
        assert network.proxy_for(f"{scheme}://{name.upper()}/") is None


@given(HOST, HOST, SCHEME)
def test_any_other_host_goes_to_the_configured_proxy(covered, other, scheme):
    assume(other != covered and not other.endswith(f".{covered}"))
    network = every_scheme(f".{covered}")
    for host in (other, f"x{covered}", f"{covered}-x"):  # a look-alike is not covered
        proxy = network.proxy_for(f"{scheme}://{host}/")
        assert proxy is not None and str(proxy) == CORP_PROXY


@given(HOST, SCHEME)
def test_a_star_covers_every_host(host, scheme):
    assert every_scheme("*").proxy_for(f"{scheme}://{host}:1234/") is None


@given(HOST)
def test_websockets_use_the_proxy_of_their_http_scheme(host):
    network = Network(
        proxies={"http": "http://plain.corp.test:8080", "https": "http://tls.corp.test:3128"}
    )
    assert str(network.proxy_for(f"ws://{host}/ws")) == "http://plain.corp.test:8080"
    assert str(network.proxy_for(f"wss://{host}/ws")) == "http://tls.corp.test:3128"
    # Only an http proxy configured: a wss target goes direct, as an https one does.
    http_only = Network(proxies={"http": "http://plain.corp.test:8080"})
    assert http_only.proxy_for(f"wss://{host}/") is None
    assert http_only.proxy_for(f"https://{host}/") is None


def in_url(text: str) -> str:
    """``text`` as a URL's userinfo carries it."""
    return urllib.parse.quote(text, safe="")


# A Basic user-id cannot hold a colon (RFC 7617), so no proxy URL carries one in the user.
USER = st.text(min_size=1).filter(lambda text: ":" not in text)


@given(USER, st.text())
def test_parse_proxy_never_keeps_credentials_in_its_url(user, password):
    proxy = parse_proxy(f"http://{in_url(user)}:{in_url(password)}@proxy.corp.test:3128")
    bare = parse_proxy("http://proxy.corp.test:3128")

    assert proxy.url.user is None and proxy.url.password is None
    assert str(proxy.url) == str(proxy) == "http://proxy.corp.test:3128"
    assert repr(proxy) == repr(bare)  # the credentials are not in its repr either


@given(st.text(), st.text(), st.sampled_from(["", "/", "/path?q=1"]))
def test_redacted_never_shows_the_password(user, password, tail):
    with_password = f"http://{in_url(user)}:{in_url(password)}@proxy.corp.test:3128{tail}"
    user_only = f"http://{in_url(user)}@proxy.corp.test:3128{tail}"

    assert redacted(with_password) == f"http://***@proxy.corp.test:3128{tail}"
    assert redacted(user_only) == f"http://***@proxy.corp.test:3128{tail}"
    # A password written as it is, '@' and all (not a valid URL, but what people type).
    raw = password.replace("/", "").replace("?", "").replace("#", "")
    assume("[" not in raw and "]" not in raw and raw.isprintable() and raw.strip() == raw)
    assert redacted(f"http://me:{raw}@proxy.corp.test:3128") == "http://***@proxy.corp.test:3128"


OTHER_NAMES = ("FEISHU_APP_SECRET", "LLM_API_KEY", "ALL_PROXY", "PATH", "HTTPS_PROXY_HOST")
NAME = st.sampled_from([*NETWORK_VARIABLES, *OTHER_NAMES])
VALUE = st.text(string.ascii_letters + string.digits + ":/._@%,-", max_size=30)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(NAME, VALUE), st.dictionaries(NAME, VALUE.filter(bool)))
def test_export_copies_only_network_variables_the_environment_lacks(tmp_path, in_file, environ):
    env_file = tmp_path / ".env"
    env_file.write_text("".join(f"{name}={value}\n" for name, value in in_file.items()))
    before = dict(environ)

    copied = export_from_env_file(env_file, environ)

    # A variable the environment sets in either case is the environment's (the
    # libraries let a lower-case one win, so a file's would override it).
    set_here = {name.upper() for name in before}
    wanted = {
        name: value
        for name, value in in_file.items()
        if name in NETWORK_VARIABLES and value and name.upper() not in set_here
    }
    assert environ == before | wanted  # nothing overridden, nothing else copied
    assert sorted(copied) == sorted(wanted)


def test_export_without_a_file_changes_nothing(tmp_path):
    environ = {"HTTPS_PROXY": CORP_PROXY}
    assert export_from_env_file(tmp_path / "missing.env", environ) == []
    assert environ == {"HTTPS_PROXY": CORP_PROXY}


def test_export_writes_the_process_environment_by_default(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text(f"HTTPS_PROXY={CORP_PROXY}\nFEISHU_APP_SECRET=s3cret\n")

    assert export_from_env_file(env_file) == ["HTTPS_PROXY"]

    assert os.environ["HTTPS_PROXY"] == CORP_PROXY and "FEISHU_APP_SECRET" not in os.environ
    assert str(Network().proxy_for("https://open.feishu.cn/")) == CORP_PROXY


@pytest.mark.parametrize(
    ("in_environment", "in_file"),
    [
        ({"HTTPS_PROXY": CORP_PROXY}, "https_proxy=http://stale.corp.test:3128\n"),
        ({"HTTPS_PROXY": CORP_PROXY, "NO_PROXY": "localhost"}, "no_proxy=*\n"),
    ],
    ids=["https_proxy", "no_proxy"],
)
def test_the_environment_wins_over_the_file_in_any_case(
    in_environment, in_file, tmp_path, monkeypatch
):
    for name, value in in_environment.items():
        monkeypatch.setenv(name, value)
    env_file = tmp_path / ".env"
    env_file.write_text(in_file)

    export_from_env_file(env_file)

    assert str(Network().proxy_for("https://open.feishu.cn/")) == CORP_PROXY

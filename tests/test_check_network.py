"""``larkgate check``'s network lines: the proxy in effect for each host, and whether it answers.

Behind a real forward proxy on 127.0.0.1 (tests/support/forward_proxy.py) and with a
Feishu on TLS under a name only that proxy resolves, as a company network has it.
"""

from __future__ import annotations

import pytest

from bot.checks import run_checks
from bot.config import load_settings
from bot.network import Network
from bot.reachability import outbound_hosts, reach, route

from fakes.feishu_server import FakeFeishu
from fakes.openai_server import FakeOpenAIServer, Reply
from support.env import servable
from support.forward_proxy import ForwardProxy, TestAuthority
from support.servers import free_port

FEISHU_NAME = "open.feishu.test"
PASSWORD = "s3cret-proxy-pw"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def no_proxy_of_the_machine(monkeypatch):
    for name in (*PROXY_VARIABLES, "SSL_CERT_FILE", "SSL_CERT_DIR"):
        # Set first, so that the undo removes whatever a test (or larkgate's own copy
        # from an env file) leaves behind.
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


@pytest.fixture
def authority(tmp_path):
    return TestAuthority(tmp_path)


@pytest.fixture
async def llm():
    async with FakeOpenAIServer() as server:
        server.handler = lambda body: Reply(content="ok")
        yield server


def settings(feishu_domain, llm, **overrides):
    values = {
        "feishu_app_id": "cli_test",
        "feishu_app_secret": "secret",
        "feishu_verification_token": "vt",
        "feishu_encrypt_key": "ek",
        "feishu_domain": feishu_domain,
        "llm_base_url": llm.base_url,
        "llm_model": "fake-model",
    }
    values.update(overrides)
    return load_settings(**values)


async def network_lines(settings):
    return {r.name: r for r in await run_checks(settings) if r.name.startswith(("reach", "net"))}


async def test_each_host_says_its_route_and_that_it_answers(llm):
    async with FakeFeishu() as feishu:
        lines = await network_lines(settings(feishu.domain, llm))
    assert "no proxy set" in lines["network"].detail
    assert "the system's CA roots" in lines["network"].detail
    openapi = lines["reach Feishu OpenAPI"]
    assert openapi.level == "ok"
    assert openapi.detail.startswith(f"{feishu.domain} direct: reachable (HTTP ")
    assert lines["reach model"].level == "ok"


async def test_behind_the_proxy_each_host_names_it_without_its_password(
    llm, authority, monkeypatch
):
    tls = authority.server_context(FEISHU_NAME)
    async with (
        FakeFeishu(tls=tls, name=FEISHU_NAME) as feishu,
        ForwardProxy({FEISHU_NAME: "127.0.0.1"}, credentials=f"corp:{PASSWORD}") as proxy,
    ):
        monkeypatch.setenv("HTTPS_PROXY", proxy.url_with(f"corp:{PASSWORD}"))
        monkeypatch.setenv("http_proxy", proxy.url_with(f"corp:{PASSWORD}"))  # lower case too
        monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")  # the model stays inside
        found = settings(feishu.domain, llm, larkgate_ca_bundle=authority.pem)
        results = await run_checks(found)
    lines = {r.name: r for r in results}
    openapi = lines["reach Feishu OpenAPI"]
    assert openapi.level == "ok", openapi.detail
    assert f"via http://***@127.0.0.1:{proxy.port}" in openapi.detail
    assert "reachable (HTTP " in openapi.detail
    # The token and the bot's identity went the same way: the check uses the bot's stack.
    assert lines["feishu token"].ok and lines["feishu bot"].ok
    assert f"{FEISHU_NAME}:{feishu.domain.rsplit(':', 1)[1]}" in proxy.connects()
    assert "direct (NO_PROXY)" in lines["reach model"].detail
    assert f"LARKGATE_CA_BUNDLE {authority.pem}" in lines["network"].detail
    printed = "\n".join(f"{r.name} {r.detail}" for r in results)
    assert PASSWORD not in printed


@pytest.mark.parametrize("failure", ["wrong password", "untrusted certificate", "nothing there"])
async def test_a_host_out_of_reach_fails_with_why(llm, authority, monkeypatch, failure):
    tls = authority.server_context(FEISHU_NAME)
    async with (
        FakeFeishu(tls=tls, name=FEISHU_NAME) as feishu,
        ForwardProxy({FEISHU_NAME: "127.0.0.1"}, credentials=f"corp:{PASSWORD}") as proxy,
    ):
        domain, ca = feishu.domain, authority.pem
        credentials = f"corp:{PASSWORD}"
        if failure == "wrong password":
            credentials = "corp:guess"
        elif failure == "untrusted certificate":
            ca = None  # an interceptor nobody told the bot to trust
        else:
            domain = f"https://{FEISHU_NAME}:{free_port()}"
        monkeypatch.setenv("HTTPS_PROXY", proxy.url_with(credentials))
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        lines = await network_lines(settings(domain, llm, larkgate_ca_bundle=ca))
    openapi = lines["reach Feishu OpenAPI"]
    assert openapi.level == "FAIL"
    expected = {
        "wrong password": "the proxy refused: HTTP 407",
        "untrusted certificate": "certificate not trusted",
        # The proxy cannot connect on: its answer to the CONNECT says so.
        "nothing there": "the proxy refused: HTTP 502",
    }[failure]
    assert expected in openapi.detail, openapi.detail
    assert PASSWORD not in openapi.detail and "guess" not in openapi.detail


async def test_a_ca_bundle_that_is_not_one_fails_the_check(llm, tmp_path):
    bogus = tmp_path / "not-a-ca.pem"
    bogus.write_text("hello")
    async with FakeFeishu() as feishu:
        results = await run_checks(settings(feishu.domain, llm, larkgate_ca_bundle=bogus))
    network = next(r for r in results if r.name == "network")
    assert network.level == "FAIL"
    assert f"LARKGATE_CA_BUNDLE={bogus}" in network.detail


def test_the_hosts_of_a_public_deployment_are_the_firewall_list():
    hosts = outbound_hosts(
        feishu_domain="https://open.feishu.cn",
        event_mode="ws",
        user_auth=False,
        models=[
            ("model", "https://api.example.com/v1"),
            ("vision model", "https://api.example.com/v1"),
        ],
        mcp_urls=[("MCP docs", "https://user:pw@mcp.example.com/mcp")],
    )
    assert [(h.purpose, h.origin, h.required) for h in hosts] == [
        ("Feishu OpenAPI", "https://open.feishu.cn", True),
        ("long connection", "https://msg-frontier.feishu.cn", True),
        ("accounts (setup, user authorisation)", "https://accounts.feishu.cn", False),
        ("model", "https://api.example.com", True),  # once, whoever else uses it
        ("MCP docs", "https://mcp.example.com", False),  # its credentials never shown
    ]
    webhook = outbound_hosts(
        feishu_domain="https://open.larksuite.com", event_mode="webhook", user_auth=True, models=[]
    )
    assert [h.origin for h in webhook] == [
        "https://open.larksuite.com",
        "https://accounts.larksuite.com",
    ]


async def test_a_proxy_the_host_bypasses_is_said_and_not_used():
    network = Network(proxies={"https": "http://proxy.corp:3128", "no": ".feishu.cn"})
    assert route(network, "https://open.feishu.cn") == "direct (NO_PROXY)"
    assert route(network, "https://api.openai.com") == "via http://proxy.corp:3128"
    assert route(Network(proxies={}), "https://open.feishu.cn") == "direct"


async def test_reach_says_when_nothing_answers_in_time():
    import asyncio

    async def silent(reader, writer):
        await asyncio.sleep(30)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reached = await reach(Network(proxies={}), f"http://127.0.0.1:{port}", seconds=0.3)
    finally:
        server.close()
    assert not reached.ok and reached.detail == "no answer within 0.3 s"


async def test_a_proxy_in_the_env_file_is_the_one_larkgate_check_uses(
    llm, authority, tmp_path, monkeypatch, capsys
):
    """The HTTP libraries read proxies from the environment only: ``larkgate`` copies an
    env file's into it first, so a deployment that keeps them in ``.env`` works."""
    import asyncio

    from bot.cli import main

    tls = authority.server_context(FEISHU_NAME)
    async with (
        FakeFeishu(tls=tls, name=FEISHU_NAME) as feishu,
        ForwardProxy({FEISHU_NAME: "127.0.0.1"}, credentials=f"corp:{PASSWORD}") as proxy,
    ):
        (tmp_path / ".env").write_text(
            f"FEISHU_APP_ID=cli_test\nFEISHU_APP_SECRET=secret\nFEISHU_VERIFICATION_TOKEN=vt\n"
            f"FEISHU_ENCRYPT_KEY=ek\nFEISHU_DOMAIN={feishu.domain}\n"
            f"LLM_BASE_URL={llm.base_url}\nLLM_MODEL=fake-model\n"
            f"LARKGATE_CA_BUNDLE={authority.pem}\n"
            f"https_proxy={proxy.url_with(f'corp:{PASSWORD}')}\n"
        )
        monkeypatch.chdir(tmp_path)
        await asyncio.to_thread(main, ["check"])
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if "reach Feishu OpenAPI" in row)
    assert f"via http://***@127.0.0.1:{proxy.port}: reachable" in line
    assert proxy.connects() and PASSWORD not in out


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("HTTPS_PROXY", "socks5://proxy.corp:1080", "only http:// proxies"),
        ("https_proxy", "https://u:topsecret@proxy.corp:3128", "only http:// proxies"),
        ("LARKGATE_CA_BUNDLE", "/nonexistent/company-ca.pem", "LARKGATE_CA_BUNDLE="),
    ],
)
def test_serve_refuses_a_network_setting_it_cannot_use(
    variable, value, said, monkeypatch, tmp_path, capsys
):
    """Said at start, plainly, before anything is served (not as a failed call later)."""
    from bot.cli import main

    monkeypatch.chdir(tmp_path)
    servable(monkeypatch, **{variable: value})
    assert main(["serve", "--port", "9"]) == 2
    err = capsys.readouterr().err
    assert said in err
    assert "topsecret" not in err

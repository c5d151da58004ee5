"""Structured logs: JSON lines, the turn's ids on every line of the turn, and no secrets."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.cli import _configure_logging
from bot.feishu.errors import FeishuError
from bot.logs import (
    JsonFormatter,
    Redactor,
    bind_log_context,
    configure_logging,
    log_context,
    log_scope,
)

from e2e import harness
from e2e.harness import BOT_OPEN_ID, running_bot, settings_for
from fakes.feishu_server import FakeFeishu
from fakes.openai_server import FakeOpenAIServer, Reply

APP_SECRET = "app-secret-0f1e2d3c4b5a"
LLM_KEY = "sk-llm-key-9a8b7c6d5e4f"
ENCRYPT_KEY = "enc-key-1234abcd5678"
VERIFICATION = "vt-token-8877665544"
CONSOLE_TOKEN = "console-token-aabbccddeeff"
TENANT_TOKEN = "t-g1044ghJRUIJJ5ELPZZDZQZ7NCWSAVKFUNW6OZLF"
SECRETS = (APP_SECRET, LLM_KEY, ENCRYPT_KEY, VERIFICATION, CONSOLE_TOKEN)

NOISY = ("Lark", "httpx", "httpcore", "httpx2", "httpcore2", "openai")

log = logging.getLogger("larkgate.test")


@pytest.fixture
def captured() -> Iterator[Any]:
    """Configure logging the way ``larkgate serve`` does, into a buffer; undo it after."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    # The CLI also quiets the SDKs' loggers: put them back too.
    quieted = {name: logging.getLogger(name).level for name in NOISY}
    buffer = io.StringIO()

    def configure(fmt: str = "json", level: str = "DEBUG", secrets=SECRETS) -> io.StringIO:
        configure_logging(level, fmt, secrets, stream=buffer, force=True)  # type: ignore[arg-type]
        return buffer

    yield configure
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)
    for name, was in quieted.items():
        logging.getLogger(name).setLevel(was)


def lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]


def test_json_lines_parse_and_carry_the_turn_ids(captured):
    buffer = captured("json")
    log.info("before the turn")
    with log_scope():
        bind_log_context(conversation="p2p:ou_user", run="run-1", message="om_1")
        assert log_context() == {
            "conversation": "p2p:ou_user",
            "run": "run-1",
            "message_id": "om_1",
        }
        log.warning("inside %s", "the turn")
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("it failed")
    log.info("after the turn")

    before, inside, failed, after = lines(buffer)
    assert set(before) == {"ts", "level", "logger", "message"}
    assert before["ts"].endswith("+00:00") and before["logger"] == "larkgate.test"
    assert inside["message"] == "inside the turn" and inside["level"] == "WARNING"
    assert (inside["conversation"], inside["run"], inside["message_id"]) == (
        "p2p:ou_user",
        "run-1",
        "om_1",
    )
    assert failed["run"] == "run-1"
    assert "Traceback" in failed["exc_info"] and "ValueError: boom" in failed["exc_info"]
    assert "run" not in after and "conversation" not in after


def test_text_lines_keep_the_classic_shape_and_add_the_ids(captured):
    buffer = captured("text")
    log.info("plain")
    with log_scope():
        bind_log_context(conversation="chat:oc_1", run="r2")
        log.info("in a turn")
    plain, turn = buffer.getvalue().splitlines()
    assert plain.endswith(" INFO larkgate.test: plain")
    assert turn.endswith(" INFO larkgate.test: in a turn [conv=chat:oc_1 run=r2]")


async def test_tasks_started_inside_a_turn_inherit_its_ids(captured):
    buffer = captured("json")

    async def worker() -> None:
        log.info("from a task of the turn")

    with log_scope():
        bind_log_context(run="r3")
        await asyncio.create_task(worker())
    (line,) = lines(buffer)
    assert line["run"] == "r3"


def test_secrets_never_reach_the_output(captured):
    buffer = captured("json")
    log.info("app secret is %s and key %s", APP_SECRET, LLM_KEY)
    log.info("headers %s", {"Authorization": f"Bearer {TENANT_TOKEN}"})
    log.info(
        "raw header Authorization: Bearer abc.def-ghi and Basic: Authorization: Basic dXNlcg=="
    )
    log.info("token %s in a url https://x/?app_secret=%s", TENANT_TOKEN, "other-app-secret")
    log.info("db postgresql+asyncpg://larkgate:pa55word@db:5432/larkgate")
    log.info(f"encrypt={ENCRYPT_KEY} verification={VERIFICATION} console={CONSOLE_TOKEN}")
    log.info("json escaped %s", json.dumps({"k": APP_SECRET}))
    try:
        raise RuntimeError(f"refused: {APP_SECRET} Bearer {TENANT_TOKEN}")
    except RuntimeError:
        log.exception("a call failed")
    log.info("stack", stack_info=True)
    text = buffer.getvalue()
    for secret in (
        *SECRETS,
        TENANT_TOKEN,
        "abc.def-ghi",
        "dXNlcg==",
        "pa55word",
        "other-app-secret",
    ):
        assert secret not in text, secret
    entries = lines(buffer)
    assert entries[1]["message"] == "headers {'Authorization': 'Bearer ***'}"
    assert "larkgate:***@db:5432" in entries[4]["message"]
    assert "RuntimeError: refused: *** Bearer ***" in entries[7]["exc_info"]
    # Ordinary text is left alone.
    log.info("a t-shirt, run-1234567890abcdef1234, om_1234567890abcdef")
    assert (
        lines(buffer)[-1]["message"] == "a t-shirt, run-1234567890abcdef1234, om_1234567890abcdef"
    )


def test_redactor_prefers_the_longest_secret():
    redact = Redactor(["abcdef", "abcdefgh"])
    assert redact("x abcdefgh y abcdef") == "x *** y ***"
    assert Redactor([""])("nothing to hide") == "nothing to hide"


def test_values_too_short_to_mask_are_left_to_the_shapes():
    # An MCP server's env may hold DEBUG=1 or MODE=true: masking those everywhere
    # would garble every line, and they protect nothing.
    redact = Redactor(["1", "true", "ab12"])
    assert redact("retry 1 of 3, ok=true, ab12") == "retry 1 of 3, ok=true, ab12"
    assert redact("password=ab12") == "password=***"


@pytest.mark.parametrize(
    ("line", "masked"),
    [
        ("GET https://api.test/v1?token=abc&page=2", "GET https://api.test/v1?token=***&page=2"),
        ("GET /maps?key=abc123", "GET /maps?key=***"),
        ("X-Api-Key: abc", "X-Api-Key: ***"),
        ("api-key: abc", "api-key: ***"),
        ("x-goog-api-key: abc", "x-goog-api-key: ***"),
        ("api_key=abc apikey=def", "api_key=*** apikey=***"),
        ('{"token": "abc def", "key": "k1"}', '{"token": "***", "key": "***"}'),
        ("{'X-Api-Key': 'abc'}", "{'X-Api-Key': '***'}"),
        ("access_token=xyz refresh-token: uvw", "access_token=*** refresh-token: ***"),
        ("client_secret: zz password: hunter2", "client_secret: *** password: ***"),
        ("x-amz-security-token=abc&sig=def", "x-amz-security-token=***&sig=***"),
        ("secret=abc session_key=def", "secret=*** session_key=***"),
    ],
)
def test_secret_shaped_fields_are_masked(line: str, masked: str):
    assert Redactor()(line) == masked


@pytest.mark.parametrize(
    "line",
    [
        "the key is missing; press any key",
        "monkey=banana donkey: grey",
        "primary key: id, sort_key=name, cache_key=1",
        "max_tokens=100 prompt_tokens: 3 tokens=12",
        "the token: expired, a keyboard=us layout",
        "tool_prefix=kb key_count=3",
    ],
)
def test_ordinary_words_are_left_alone(line: str):
    assert Redactor()(line) == line


def test_connector_secrets_reach_the_log_masker(captured, tmp_path, monkeypatch):
    from bot import logs
    from bot.config import load_settings

    monkeypatch.chdir(tmp_path)  # no .env
    mcp_env, mcp_header = "ghp_mcpEnvSecret0123456789", "mcp-header-secret-abcdef"
    http_header, http_host_key, sql_password = (
        "sk-http-header-9876",
        "host-key-1234567",
        "db-pa55-w0rd",
    )
    config = tmp_path / "larkgate.toml"
    config.write_text(
        f"""
[connectors.mcp]
[[connectors.mcp.servers]]
name = "gh"
command = ["gh-mcp"]
env = {{ GITHUB_TOKEN = "{mcp_env}", DEBUG = "1" }}
[[connectors.mcp.servers]]
name = "kb"
url = "https://mcp.example.test/mcp"
headers = {{ Authorization = "Bearer {mcp_header}" }}

[connectors.http]
allowed_hosts = ["api.example.test"]
headers = {{ "X-Api-Key" = "{http_header}" }}
host_headers = {{ "api.example.test" = {{ "X-Other" = "{http_host_key}" }} }}

[connectors.sql]
enabled = false
url = "postgresql+asyncpg://larkgate:{sql_password}@db:5432/larkgate"
"""
    )
    buffer = io.StringIO()
    configure = logs.configure_logging
    monkeypatch.setattr(
        logs,
        "configure_logging",
        lambda *args: configure(*args, stream=buffer, force=True),  # type: ignore[misc]
    )
    _configure_logging(load_settings(larkgate_config=config, larkgate_log_format="text"))
    log.error("MCP server gh said: bad credentials %s", mcp_env)
    log.error("kb answered 401 for %s", mcp_header)
    log.error("upstream echoed %s and %s", json.dumps({"k": http_header}), http_host_key)
    log.error("password authentication failed (%s)", sql_password)
    log.error("GET https://api.example.test/v1?token=abc&page=2")
    log.error("request headers: X-Api-Key: abc")
    log.info("retry 1 of 3")  # DEBUG = "1" is too short to mask
    text = buffer.getvalue()
    for secret in (mcp_env, mcp_header, http_header, http_host_key, sql_password):
        assert secret not in text, secret
    assert "?token=***&page=2" in text and "X-Api-Key: ***" in text
    assert "retry 1 of 3" in text


_CHARS = st.characters(codec="utf-8", exclude_characters="*")


@settings(max_examples=150, deadline=None)
@given(
    secret=st.text(_CHARS, min_size=6, max_size=24),
    before=st.text(max_size=30),
    after=st.text(max_size=30),
    encoding=st.sampled_from(["raw", "url", "form", "json", "json_ascii", "html"]),
)
def test_the_redactor_never_shows_a_known_secret(secret, before, after, encoding):
    encoded = _encode(secret, encoding)
    redacted = Redactor([secret])(before + encoded + after)
    assert secret not in redacted and encoded not in redacted


def _encode(secret: str, encoding: str) -> str:
    import html
    import urllib.parse

    return {
        "raw": lambda: secret,
        "url": lambda: urllib.parse.quote(secret, safe=""),
        "form": lambda: urllib.parse.quote_plus(secret),
        "json": lambda: json.dumps(secret, ensure_ascii=False)[1:-1],
        "json_ascii": lambda: json.dumps(secret)[1:-1],
        "html": lambda: html.escape(secret),
    }[encoding]()


def test_the_json_formatter_stands_alone():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hi %s", ("there",), None)
    assert json.loads(JsonFormatter().format(record))["message"] == "hi there"


def test_the_cli_reads_format_and_secrets_from_the_settings(captured, tmp_path, monkeypatch):
    from bot import logs
    from bot.config import load_settings

    monkeypatch.chdir(tmp_path)  # no .env
    calls = []
    monkeypatch.setattr(logs, "configure_logging", lambda *args: calls.append(args))
    settings = load_settings(
        feishu_app_secret=APP_SECRET,
        llm_api_key=LLM_KEY,
        larkgate_console_token=CONSOLE_TOKEN,
        larkgate_log_format="json",
        larkgate_log_level="info",
    )
    _configure_logging(settings)
    ((level, fmt, secrets),) = calls
    assert (level, fmt) == ("info", "json")
    assert {APP_SECRET, LLM_KEY, CONSOLE_TOKEN} <= set(secrets)


def test_like_basic_config_it_leaves_a_configured_root_alone():
    root = logging.getLogger()
    assert root.handlers  # pytest's own
    before = list(root.handlers)
    assert configure_logging("INFO", "json", (), stream=io.StringIO()) is None
    assert root.handlers == before


# -- end to end: a real turn, a Feishu failure that echoes secrets -----------------------


@pytest.fixture
async def feishu() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu(bot_open_id=BOT_OPEN_ID, app_secret=APP_SECRET) as fake:
        yield fake


@pytest.fixture
def llm_server(fake_openai: FakeOpenAIServer) -> FakeOpenAIServer:
    def handler(body: Mapping[str, Any]) -> Reply:
        return Reply(content="the answer", usage={"prompt_tokens": 3})

    fake_openai.handler = handler
    return fake_openai


async def test_a_turn_logs_its_ids_and_no_secret(captured, tmp_path, feishu, llm_server):
    settings = settings_for(
        tmp_path,
        feishu,
        llm_server,
        llm_api_key=LLM_KEY,
        larkgate_console_token=CONSOLE_TOKEN,
    )
    # The harness signs with its own encrypt key and verification token: secrets too.
    secrets = (APP_SECRET, LLM_KEY, CONSOLE_TOKEN, harness.ENCRYPT_KEY, harness.VERIFICATION_TOKEN)
    buffer = captured("json", "DEBUG", secrets)
    echo = f"upstream said app_secret={APP_SECRET} Authorization: Bearer {TENANT_TOKEN}"
    async with running_bot(settings, feishu, llm_server) as bot:
        # Every reply is refused with a message that echoes secrets (as a proxy might).
        feishu.fail("POST", r"/reply$", 99991672, msg=echo, times=None)
        await bot.say("om_1", "hello")
        await bot.wait_for(lambda: '"run"' in buffer.getvalue())
        await bot.settle()
        # A traceback of the client's exception, as any caller might log it.
        with pytest.raises(FeishuError) as raised:
            await bot.services.feishu.reply_message("om_1", msg_type="text", content="{}")
        logging.getLogger("bot.feishu.client").error("reply failed", exc_info=raised.value)
    entries = lines(buffer)
    in_turn = [e for e in entries if e.get("message_id") == "om_1"]
    assert in_turn and all(e.get("run") and e.get("conversation") for e in in_turn)
    assert len({e["run"] for e in in_turn}) == 1
    # The refusals were logged, tracebacks included, with the secrets masked.
    refusals = [e for e in entries if "upstream said" in e["message"] + e.get("exc_info", "")]
    assert refusals
    (traceback,) = [e["exc_info"] for e in entries if e["message"] == "reply failed"]
    assert "Traceback" in traceback and "app_secret=*** Authorization: Bearer ***" in traceback
    text = buffer.getvalue()
    real_tokens = {
        r.headers.get("Authorization", "").removeprefix("Bearer ")
        for r in feishu.requests
        if r.headers.get("Authorization")
    }
    for secret in (*secrets, TENANT_TOKEN, *real_tokens):
        assert secret not in text, secret

"""larkgate check against the fakes: every check passes, and each failure says what to fix."""

from __future__ import annotations

import asyncio

import pytest

from bot.checks import PLACEHOLDER_CARD, PLACEHOLDER_MESSAGE, run_checks
from bot.cli import _check
from bot.config import load_settings

from fakes.feishu_server import FakeFeishu
from fakes.openai_server import FakeOpenAIServer, Reply

FEATURES = ("messages", "cardkit", "contact", "calendar", "task", "bitable", "docx")
# With a [connectors] table exactly those are on: the Feishu workspace tools, or not.
TOOLS_ON = "[connectors.feishu]\n"
TOOLS_OFF = "[connectors.utilities]\n"
CALENDAR_SCOPES = ["calendar:calendar", "calendar:calendar:readonly"]


@pytest.fixture
async def fakes():
    async with (
        FakeFeishu(bot_open_id="ou_bot", bot_name="larkgate") as feishu,
        FakeOpenAIServer() as llm,
    ):
        # Like Feishu, refuse a reply to a message nobody sent (the messages probe).
        feishu.strict = True
        llm.handler = lambda body: Reply(content="ok")
        yield feishu, llm


def settings_for(
    feishu, llm, tmp_path, connectors='[connectors.broken]\nsetting = "x"\n', **overrides
):
    config = tmp_path / "larkgate.toml"
    config.write_text(connectors)
    values = {
        "feishu_app_id": feishu.app_id,
        "feishu_app_secret": feishu.app_secret,
        "feishu_verification_token": "vt",
        # Signed pushes, as a deployment should have (without a key, "event signing" fails).
        "feishu_encrypt_key": "ek",
        "feishu_domain": feishu.domain,
        "llm_base_url": llm.base_url,
        "llm_model": "fake-model",
        "larkgate_config": config,
    }
    values.update(overrides)
    return load_settings(**values)


async def checks(settings):
    return {r.name: r for r in await run_checks(settings)}


async def check_command(settings, capsys):
    """``larkgate check`` as the CLI runs it (its own event loop): exit code and output."""
    capsys.readouterr()
    code = await asyncio.to_thread(_check, settings)
    return code, capsys.readouterr().out


def line(output, name):
    return next(row for row in output.splitlines() if f"  {name}  " in row)


async def test_a_working_deployment_passes_except_what_is_broken(fakes, tmp_path):
    feishu, llm = fakes
    results = await checks(settings_for(feishu, llm, tmp_path))
    assert results["settings"].ok
    assert results["feishu token"].ok
    assert results["feishu bot"].ok and "ou_bot" in results["feishu bot"].detail
    assert results["llm"].ok and "fake-model" in results["llm"].detail
    assert not results["connector broken"].ok
    assert "no connector named 'broken'" in results["connector broken"].detail


async def test_failures_say_what_to_fix(fakes, tmp_path):
    feishu, llm = fakes
    llm.handler = lambda body: Reply.error(401, "bad key")
    settings = settings_for(feishu, llm, tmp_path, feishu_app_secret="wrong")
    results = await checks(settings)
    assert not results["feishu token"].ok
    assert "FEISHU_APP_SECRET" in results["feishu token"].detail
    assert not results["llm"].ok and "401" in results["llm"].detail
    assert not any(name.startswith("scopes") for name in results)  # no token, no probes


async def test_all_scopes_present_every_feature_is_ok_and_nothing_is_sent(fakes, tmp_path, capsys):
    feishu, llm = fakes
    # Per-sender group conversations: session grants draw no warning (see the test below).
    settings = settings_for(
        feishu, llm, tmp_path, connectors=TOOLS_ON, larkgate_group_scope="chat_sender"
    )
    code, output = await check_command(settings, capsys)
    assert code == 0
    for feature in (*FEATURES, "events"):
        assert line(output, f"scopes {feature}").startswith("ok    "), output
    assert "WARN" not in output and "FAIL" not in output
    # One probe per feature, and the probes change nothing.
    assert feishu.count("POST", rf"/im/v1/messages/{PLACEHOLDER_MESSAGE}/reply$") == 1
    assert feishu.count("PATCH", rf"/cardkit/v1/cards/{PLACEHOLDER_CARD}/settings$") == 1
    assert feishu.count("GET", r"/contact/v3/users/find_by_department$") == 1
    assert feishu.count("POST", r"/calendar/v4/calendars/primary$") == 1
    assert feishu.count("GET", r"/task/v1/tasks$") == 1
    assert feishu.count("POST", r"/bitable/v1/apps/.+/records/search$") == 1
    assert feishu.count("GET", r"/docx/v1/documents/.+/raw_content$") == 1
    assert feishu.count("GET", r"/application/v6/scopes$") == 1
    assert feishu.sent == [] and feishu.cards == {}
    assert PLACEHOLDER_MESSAGE not in feishu.message_by_id


async def test_a_missing_calendar_scope_is_named_as_feishu_listed_it(fakes, tmp_path, capsys):
    feishu, llm = fakes
    feishu.deny_scopes("POST", r"/calendar/v4/calendars/primary$", CALENDAR_SCOPES)
    # The workspace connector is off: informational, the exit code stays 0.
    settings = settings_for(feishu, llm, tmp_path, connectors=TOOLS_OFF)
    code, output = await check_command(settings, capsys)
    assert code == 0
    calendar = line(output, "scopes calendar")
    assert calendar.startswith("WARN  ")
    assert "missing scope: any one of calendar:calendar, calendar:calendar:readonly" in calendar
    assert "the feishu connector's tools need it, and it is off" in calendar
    assert "Permissions & Scopes, then publish a new version" in calendar
    assert (
        "https://open.feishu.cn/app/cli_test/auth?q=calendar:calendar,calendar:calendar:readonly"
        "&op_from=openapi&token_type=tenant"
    ) in calendar
    assert line(output, "scopes contact").startswith("ok    ")


async def test_a_missing_scope_fails_when_the_workspace_tools_are_on(fakes, tmp_path, capsys):
    feishu, llm = fakes
    feishu.deny_scopes("POST", r"/calendar/v4/calendars/primary$", CALENDAR_SCOPES)
    settings = settings_for(feishu, llm, tmp_path, connectors=TOOLS_ON)
    code, output = await check_command(settings, capsys)
    assert code == 1
    calendar = line(output, "scopes calendar")
    assert calendar.startswith("FAIL  ")
    assert "calendar:calendar, calendar:calendar:readonly" in calendar
    assert "the feishu connector's calendar tools need it" in calendar
    assert [row for row in output.splitlines() if row.startswith("FAIL")] == [calendar]


async def test_a_missing_messaging_scope_fails_the_check(fakes, tmp_path, capsys):
    feishu, llm = fakes
    feishu.deny_scopes(
        "POST", r"/im/v1/messages/[^/]+/reply$", ["im:message", "im:message:send_as_bot"]
    )
    settings = settings_for(feishu, llm, tmp_path, connectors=TOOLS_OFF)
    code, output = await check_command(settings, capsys)
    assert code == 1
    messages = line(output, "scopes messages")
    assert messages.startswith("FAIL  ")
    assert "missing scope: any one of im:message, im:message:send_as_bot" in messages
    assert "publish a new version" in messages


async def test_a_missing_cardkit_scope_fails_and_no_card_is_created(fakes, tmp_path):
    feishu, llm = fakes
    feishu.deny_scopes("PATCH", r"/cardkit/v1/cards/[^/]+/settings$", ["cardkit:card:write"])
    results = await checks(settings_for(feishu, llm, tmp_path, connectors=TOOLS_OFF))
    cardkit = results["scopes cardkit"]
    assert cardkit.level == "FAIL"
    assert "missing scope: cardkit:card:write;" in cardkit.detail
    assert feishu.count("POST", r"/cardkit/v1/cards$") == 0 and feishu.cards == {}


async def test_scopes_named_only_in_permission_violations_are_reported(fakes, tmp_path):
    feishu, llm = fakes
    feishu.fail(
        "GET",
        r"/task/v1/tasks$",
        99991672,
        msg="Access denied.",
        error={
            "permission_violations": [
                {"type": "action_scope_required", "subject": "task:task:read"}
            ]
        },
    )
    results = await checks(settings_for(feishu, llm, tmp_path, connectors=TOOLS_OFF))
    task = results["scopes task"]
    assert task.level == "WARN"
    assert task.detail.startswith("missing scope: task:task:read ")


async def test_a_probe_without_a_usable_answer_is_a_warning(fakes, tmp_path):
    feishu, llm = fakes
    feishu.fail("GET", r"/raw_content$", 502, http_status=502, raw_body="<html>502</html>")
    results = await checks(settings_for(feishu, llm, tmp_path, connectors=TOOLS_ON))
    docx = results["scopes docx"]
    assert docx.level == "WARN" and docx.ok
    assert "not verified" in docx.detail and "HTTP 502" in docx.detail


async def test_event_scopes_come_from_the_apps_scope_list(fakes, tmp_path):
    feishu, llm = fakes
    feishu.granted_scopes.remove("im:message.p2p_msg:readonly")
    results = await checks(settings_for(feishu, llm, tmp_path, connectors=TOOLS_OFF))
    events = results["scopes events"]
    assert events.level == "WARN"
    assert "direct messages: im:message.p2p_msg:readonly" in events.detail
    assert "group @mentions" not in events.detail


async def test_without_the_scope_list_the_event_scopes_are_a_reminder(fakes, tmp_path):
    feishu, llm = fakes
    feishu.deny_scopes("GET", r"/application/v6/scopes$", ["application:application:self_manage"])
    results = await checks(settings_for(feishu, llm, tmp_path, connectors=TOOLS_OFF))
    events = results["scopes events"]
    assert events.level == "WARN" and events.ok
    assert "application:application:self_manage" in events.detail
    assert "im:message.p2p_msg:readonly" in events.detail
    assert "im:message.group_at_msg:readonly" in events.detail


async def test_session_grants_in_shared_group_conversations_are_reported(fakes, tmp_path):
    feishu, llm = fakes
    shared = (await checks(settings_for(feishu, llm, tmp_path)))["session grants"]
    assert shared.ok and shared.warn
    assert "default scope chat" in shared.detail and "session_grants = false" in shared.detail
    per_sender = settings_for(feishu, llm, tmp_path, larkgate_group_scope="chat_sender")
    assert not (await checks(per_sender))["session grants"].warn
    off = settings_for(feishu, llm, tmp_path, connectors="[approvals]\nsession_grants = false\n")
    result = (await checks(off))["session grants"]
    assert result.ok and not result.warn and "every call" in result.detail


async def test_the_agent_mode_and_each_model_by_hint_are_checked(fakes, tmp_path):
    feishu, llm = fakes
    asked: list[str] = []

    def answer(body):
        asked.append(body["model"])
        return Reply.error(404, "no such model") if body["model"] == "gone" else Reply("ok")

    llm.handler = answer
    models = '[models.fast]\nmodel = "small"\n\n[models.reasoning]\nmodel = "gone"\n'
    settings = settings_for(
        feishu, llm, tmp_path, connectors=TOOLS_OFF + models, larkgate_mode="auto"
    )
    results = await checks(settings)
    mode = results["agent mode"]
    assert mode.ok and "LARKGATE_MODE=auto" in mode.detail
    assert "fast = small" in mode.detail and "reasoning = gone" in mode.detail
    assert results["llm fast"].ok and "small answered 'ok'" in results["llm fast"].detail
    assert not results["llm reasoning"].ok and "404" in results["llm reasoning"].detail
    assert {"fake-model", "small", "gone"} <= set(asked)


async def test_a_wrong_models_table_fails_the_agent_check(fakes, tmp_path):
    feishu, llm = fakes
    settings = settings_for(feishu, llm, tmp_path, connectors='[models.tiny]\nmodel = "x"\n')
    result = (await checks(settings))["agent mode"]
    assert not result.ok and "models.tiny" in result.detail
    plain = await checks(settings_for(feishu, llm, tmp_path, connectors=TOOLS_OFF))
    assert plain["agent mode"].ok and "every hint uses LLM_MODEL" in plain["agent mode"].detail


async def test_user_authorisation_is_reported_off_on_or_misconfigured(fakes, tmp_path):
    from cryptography.fernet import Fernet

    feishu, llm = fakes
    off = (await checks(settings_for(feishu, llm, tmp_path)))["user authorisation"]
    assert off.ok and off.detail.startswith("off: set LARKGATE_TOKEN_KEY")
    key = Fernet.generate_key().decode()
    code = settings_for(
        feishu, llm, tmp_path, larkgate_token_key=key, larkgate_public_url="https://b.example"
    )
    line = (await checks(code))["user authorisation"]
    assert line.ok and "https://b.example/feishu/oauth/callback" in line.detail
    assert key not in line.detail
    device = await checks(settings_for(feishu, llm, tmp_path, larkgate_token_key=key))
    assert "device code" in device["user authorisation"].detail
    broken = settings_for(feishu, llm, tmp_path, larkgate_token_key="not-a-key")
    result = (await checks(broken))["user authorisation"]
    assert not result.ok and "Fernet.generate_key()" in result.detail


# -- the model's probe: what the endpoint showed and what the agent uses ------------------------


def plays(llm, server) -> None:
    """The fake answers the probe itself, as ``server(body)`` says (the one-word check too)."""
    llm.answers_probes = False
    llm.handler = server


def probing(body) -> bool:
    return bool(body.get("tools") or body.get("response_format"))


def ignores_tools(body):
    return Reply(content="ok")


def calls_tools(body):
    if body.get("tools"):
        name = body["tools"][0]["function"]["name"]
        return Reply(tool_calls=[("call_1", name, {"city": "Paris"})])
    return Reply(content="ok")


async def test_an_endpoint_with_native_tool_calls_is_ok_and_says_so(fakes, tmp_path, capsys):
    feishu, llm = fakes
    plays(llm, calls_tools)
    _, output = await check_command(settings_for(feishu, llm, tmp_path), capsys)
    row = line(output, "llm")
    assert row.startswith("ok    "), row
    assert "fake-model answered 'ok'" in row
    assert "found: tool calls native (it called the probe's tool); JSON mode accepted" in row
    assert "the agent uses native tool calls (LLM_TOOL_CALLS=auto)" in row


async def test_an_endpoint_that_ignores_tools_is_a_warning_and_gets_json_mode(
    fakes, tmp_path, capsys
):
    # Before the probe this was "ok llm", and the bot never made a tool call.
    feishu, llm = fakes
    plays(llm, ignores_tools)
    settings = settings_for(feishu, llm, tmp_path, connectors=TOOLS_OFF)
    code, output = await check_command(settings, capsys)
    row = line(output, "llm")
    assert row.startswith("WARN  "), row
    assert "tool calls ignored (it answered a tool request in text)" in row
    assert "the agent uses JSON mode: the endpoint ignores tools (LLM_TOOL_CALLS=auto)" in row
    assert "llama-server --jinja" in row and "LLM_TOOL_CALLS=json to keep this" in row
    assert code == 0  # the bot works, in JSON mode


async def test_json_mode_meant_by_the_setting_is_no_warning(fakes, tmp_path):
    feishu, llm = fakes
    plays(llm, ignores_tools)
    result = (await checks(settings_for(feishu, llm, tmp_path, llm_tool_calls="json")))["llm"]
    assert result.level == "ok"
    assert "the agent uses JSON mode, as set (LLM_TOOL_CALLS=json)" in result.detail


async def test_native_set_against_an_endpoint_that_ignores_tools_is_a_warning(fakes, tmp_path):
    feishu, llm = fakes
    plays(llm, ignores_tools)
    settings = settings_for(feishu, llm, tmp_path, llm_tool_calls="native")
    result = (await checks(settings))["llm"]
    assert result.level == "WARN"
    assert "the agent uses native tool calls, as set (LLM_TOOL_CALLS=native)" in result.detail
    assert "LLM_TOOL_CALLS=native although the endpoint's tool calls are ignored" in result.detail


async def test_an_endpoint_that_calls_tools_only_when_forced(fakes, tmp_path):
    feishu, llm = fakes

    def vllm(body):
        if body.get("tools") and not body.get("tool_choice"):
            message = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser'
            return Reply(status=400, body={"object": "error", "message": message, "code": 400})
        return calls_tools(body)

    plays(llm, vllm)
    result = (await checks(settings_for(feishu, llm, tmp_path)))["llm"]
    assert result.level == "WARN"
    assert "tool calls only when forced" in result.detail
    assert "the agent uses JSON mode: the endpoint calls a tool only when" in result.detail
    assert "vLLM: --enable-auto-tool-choice --tool-call-parser" in result.detail


async def test_an_endpoint_that_rejects_json_mode(fakes, tmp_path):
    feishu, llm = fakes

    def server(body):
        if body.get("response_format"):
            return Reply.error(400, "response_format is not supported")
        return calls_tools(body)

    plays(llm, server)
    result = (await checks(settings_for(feishu, llm, tmp_path)))["llm"]
    assert result.level == "ok"
    assert "JSON mode refused" in result.detail and "HTTP 400" in result.detail


async def test_an_endpoint_that_hangs_on_the_probe_is_a_warning_not_a_hung_check(
    fakes, tmp_path, monkeypatch
):
    feishu, llm = fakes
    release = asyncio.Event()

    async def hangs_when_probed(body):
        if probing(body):
            await release.wait()
        return Reply(content="ok")

    plays(llm, hangs_when_probed)
    monkeypatch.setattr("bot.checks.TIMEOUT", 0.3)
    try:
        result = (await checks(settings_for(feishu, llm, tmp_path)))["llm"]
    finally:
        release.set()
    assert result.level == "WARN"
    assert "timed out" in result.detail
    assert "the agent uses native tool calls (assumed: the probe got no answer)" in result.detail


async def test_the_context_length_the_server_reports_is_said_with_the_budget_it_leaves(
    fakes, tmp_path
):
    feishu, llm = fakes
    llm.models = [{"id": "fake-model", "object": "model", "max_model_len": 8192}]
    result = (await checks(settings_for(feishu, llm, tmp_path)))["llm"]
    assert result.level == "ok"
    assert "context 8,192 tokens (/models max_model_len)" in result.detail
    assert "it keeps its context to 6,144 tokens" in result.detail
    assert "LLM_CONTEXT_BUDGET=96000" in result.detail

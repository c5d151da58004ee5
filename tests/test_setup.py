"""``larkgate setup`` end to end: the command, lark-oapi's registration flow and the bot's
Feishu client against the emulator's accounts hosts and open platform.

The SDK's poll loop sleeps ``interval`` seconds (5 more after each slow_down) and stops
at ``expires_in``: its clock is replaced by a fake one, so the flow takes milliseconds and
the test can read the intervals the SDK waited.
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from pathlib import Path

import pytest
from dotenv import dotenv_values
from lark_oapi.scene import registration as sdk_registration

from bot.cli import main
from bot.onboarding import ADDONS, LARK_OPEN, open_domain, update_env_file

from fakes.feishu_server import FakeFeishu
from support.env import clear_settings
from support.registration import FakeClock, every_log_line, registration_clock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    return registration_clock(monkeypatch)


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    return every_log_line(caplog)


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, clock: FakeClock):
    clear_settings(monkeypatch, tmp_path)
    async with FakeFeishu() as server:
        monkeypatch.setenv("FEISHU_ACCOUNTS_URL", server.accounts_url)
        monkeypatch.setenv("LARK_ACCOUNTS_URL", server.lark_accounts_url)
        monkeypatch.setenv("FEISHU_DOMAIN", server.domain)
        yield server


async def setup(*args: str) -> int:
    # main() runs its own event loop: in a thread, while the emulator serves on this one.
    return await asyncio.to_thread(main, ["setup", *args])


EXISTING = """\
# my bot
LLM_BASE_URL=http://127.0.0.1:11434/v1
FEISHU_APP_ID=cli_old   # replaced
export FEISHU_APP_SECRET='old secret'

# kept as it is
DATABASE_URL=sqlite+aiosqlite:///./bot.db
"""


async def test_success_updates_the_env_file_in_place(fake, clock, tmp_path, capsys, logs):
    fake.script_registration("pending", "slow_down", "pending", "success")
    env = tmp_path / "bot.env"
    env.write_text(EXISTING)
    env.chmod(0o644)

    assert await setup("--env-file", str(env)) == 0

    [registration] = fake.registrations
    [(app_id, secret)] = fake.registered_apps.items()
    assert registration.app_id == app_id
    values = dotenv_values(env)
    assert values["FEISHU_APP_ID"] == app_id
    assert values["FEISHU_APP_SECRET"] == secret
    assert values["FEISHU_EVENT_MODE"] == "ws"
    assert values["LARKGATE_ADMINS"] == "ou_fake_alice"  # the person who scanned
    assert "FEISHU_DOMAIN" not in values  # Feishu: the default
    assert env.read_text() == (
        "# my bot\n"
        "LLM_BASE_URL=http://127.0.0.1:11434/v1\n"
        f"FEISHU_APP_ID={app_id}\n"
        f"export FEISHU_APP_SECRET={secret}\n"
        "\n"
        "# kept as it is\n"
        "DATABASE_URL=sqlite+aiosqlite:///./bot.db\n"
        "# Feishu app (larkgate setup)\n"
        "FEISHU_EVENT_MODE=ws\n"
        "LARKGATE_ADMINS=ou_fake_alice\n"
    )
    assert stat.S_IMODE(os.stat(env).st_mode) == 0o600

    # The SDK waited the interval, 5 s more after slow_down, and polled only Feishu's host.
    assert clock.sleeps == [5, 10, 10]
    assert [host for host, _ in registration.polls] == ["feishu"] * 4
    # It asked for larkgate's scopes, event and callback, and for a new app only.
    assert registration.begin["archetype"] == "PersonalAgent"
    # The new credentials were checked on the open platform before they were written.
    assert fake.count("POST", "/auth/v3/tenant_access_token/internal") == 1
    assert fake.count("GET", "/bot/v3/info") == 1

    out = capsys.readouterr().out
    assert out.count(f"user_code={registration.user_code}") == 1  # the link, once
    assert "▀" in out or "█" in out  # the QR code
    assert "Publish a version" in out
    assert "/feishu/events" not in out  # the long connection needs no URLs
    # Never logged (the log did see the registration's requests); only the link is on screen.
    assert "/oauth/v1/app/registration" in logs.text
    for secret_text in (secret, registration.device_code, registration.user_code):
        assert secret_text not in logs.text
    assert secret not in out and registration.device_code not in out


async def test_the_link_carries_the_addons_and_create_only(fake, tmp_path, capsys):
    import base64
    import gzip
    import json
    from urllib.parse import parse_qs, urlsplit

    fake.script_registration("success")
    assert await setup("--env-file", str(tmp_path / ".env")) == 0
    url = next(word for word in capsys.readouterr().out.split() if "/page/launcher?" in word)
    query = parse_qs(urlsplit(url).query)
    assert query["createOnly"] == ["true"]
    encoded = query["addons"][0]
    addons = json.loads(
        gzip.decompress(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    )
    assert addons == ADDONS
    assert "im.message.receive_v1" in addons["events"]["items"]["tenant"]
    assert addons["callbacks"]["items"] == ["card.action.trigger"]
    assert {"im:message:send_as_bot", "cardkit:card:write"} <= set(addons["scopes"]["tenant"])


async def test_a_new_file_is_created_private_with_webhook_mode(fake, tmp_path, capsys):
    fake.script_registration("success")
    env = tmp_path / "new.env"

    assert await setup("--env-file", str(env), "--webhook", "https://bot.example.com/") == 0

    values = dotenv_values(env)
    assert values["FEISHU_EVENT_MODE"] == "webhook"
    assert values["FEISHU_APP_ID"].startswith("cli_")
    assert stat.S_IMODE(os.stat(env).st_mode) == 0o600
    out = capsys.readouterr().out
    assert "https://bot.example.com/feishu/events" in out
    assert "https://bot.example.com/feishu/card" in out
    assert "FEISHU_ENCRYPT_KEY" in out


async def test_admins_already_set_are_kept(fake, tmp_path, monkeypatch):
    fake.script_registration("success")
    env = tmp_path / ".env"
    env.write_text("LARKGATE_ADMINS=ou_boss\n")
    assert await setup("--env-file", str(env)) == 0
    assert dotenv_values(env)["LARKGATE_ADMINS"] == "ou_boss"

    fake.script_registration("success")
    env2 = tmp_path / "other.env"
    monkeypatch.setenv("LARKGATE_ADMINS", "ou_from_env")
    assert await setup("--env-file", str(env2)) == 0
    assert "LARKGATE_ADMINS" not in dotenv_values(env2)


@pytest.mark.parametrize(("step", "says"), [("denied", "refused"), ("expired", "expired")])
async def test_a_refusal_or_an_expired_link_writes_nothing(fake, tmp_path, capsys, step, says):
    fake.script_registration("pending", step)
    env = tmp_path / ".env"
    env.write_text(EXISTING)

    assert await setup("--env-file", str(env)) == 1

    assert env.read_text() == EXISTING
    assert not fake.registered_apps
    err = capsys.readouterr().err
    assert says in err and "larkgate setup:" in err


async def test_the_sdk_deadline_is_an_expired_link(fake, tmp_path, capsys):
    fake.registration_ttl = 12  # the SDK stops polling at expires_in (its fake clock)
    fake.registration_script = ["pending"] * 10
    env = tmp_path / ".env"
    assert await setup("--env-file", str(env)) == 1
    assert not env.exists()
    assert "expired" in capsys.readouterr().err


async def test_a_network_failure_writes_nothing(fake, tmp_path, monkeypatch, capsys):
    with socket.socket() as sock:  # a port where nothing listens
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    monkeypatch.setenv("FEISHU_ACCOUNTS_URL", closed)
    env = tmp_path / ".env"

    assert await setup("--env-file", str(env)) == 1

    assert not env.exists()
    assert "could not reach 127.0.0.1" in capsys.readouterr().err


async def test_a_gateway_page_instead_of_json_writes_nothing(fake, tmp_path, capsys):
    fake.fail("POST", "/oauth/v1/app/registration", 0, http_status=502, raw_body="<html>502</html>")
    env = tmp_path / ".env"
    assert await setup("--env-file", str(env)) == 1
    assert not env.exists()
    assert "nothing was written" in capsys.readouterr().err


async def test_credentials_that_fail_the_check_are_not_written(fake, tmp_path, capsys, logs):
    fake.script_registration("success")
    fake.fail("POST", "/auth/v3/tenant_access_token/internal", 10014, times=None)
    env = tmp_path / ".env"

    assert await setup("--env-file", str(env)) == 1

    assert not env.exists()
    err = capsys.readouterr().err
    [app_id] = fake.registered_apps
    assert app_id in err and "could not be checked" in err
    assert fake.registered_apps[app_id] not in err
    assert fake.registered_apps[app_id] not in logs.text


async def test_a_lark_tenant_switches_host_once(fake, clock, tmp_path, capsys, logs):
    fake.script_registration("pending", "lark", "pending", "success")
    env = tmp_path / ".env"

    assert await setup("--env-file", str(env)) == 0

    [registration] = fake.registrations
    assert registration.polls == [
        ("feishu", "pending"),
        ("feishu", "lark"),
        ("lark", "pending"),
        ("lark", "success"),
    ]
    assert clock.sleeps == [5, 5]  # the switch polls again at once
    values = dotenv_values(env)
    assert values["FEISHU_APP_ID"] == registration.app_id
    # Checked where FEISHU_DOMAIN points (the emulator), and written for the Lark app.
    assert values["FEISHU_DOMAIN"] == fake.domain
    assert "Lark" in capsys.readouterr().out
    assert fake.registered_apps[registration.app_id] not in logs.text


async def test_lark_flag_starts_on_the_lark_host(fake, tmp_path):
    fake.script_registration("lark", "success")
    env = tmp_path / ".env"
    assert await setup("--env-file", str(env), "--lark") == 0
    [registration] = fake.registrations
    assert [host for host, _ in registration.polls] == ["lark", "lark"]
    assert dotenv_values(env)["FEISHU_DOMAIN"] == fake.domain


async def test_the_launcher_page_is_the_scan(fake, clock, tmp_path, capsys):
    """With no script (as in ``larkgate dev``), opening the link is the scan."""
    import aiohttp

    async def scan() -> None:
        revision = fake.revision
        while not fake.registrations:
            revision = await fake.wait_for_change(revision, 1.0)
        url = f"{fake.domain}/page/launcher?user_code={fake.registrations[0].user_code}"
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            assert response.status == 200

    scanner = asyncio.create_task(scan())
    clock_sleep = clock.sleep

    async def slower(seconds: float) -> None:  # give the scan a moment between polls
        await clock_sleep(seconds)
        await asyncio.sleep(0.02)

    clock.sleep = slower  # type: ignore[method-assign]
    sdk_registration.asyncio.sleep = slower
    assert await setup("--env-file", str(tmp_path / ".env")) == 0
    await scanner


async def test_an_env_file_that_cannot_be_written_stops_before_the_scan(fake, tmp_path, capsys):
    fake.script_registration("success")
    assert await setup("--env-file", str(tmp_path / "missing" / ".env")) == 1
    assert not fake.registrations
    assert "does not exist" in capsys.readouterr().err


def test_open_domain():
    assert open_domain("feishu", "") == "https://open.feishu.cn"
    assert open_domain("lark", "") == LARK_OPEN
    assert open_domain("lark", "https://open.feishu.cn/") == LARK_OPEN
    assert open_domain("lark", "http://127.0.0.1:9/") == "http://127.0.0.1:9"


def test_update_env_file_keeps_every_other_line(tmp_path):
    env = tmp_path / ".env"
    env.write_bytes(b"A=1\r\n# note\r\nfeishu_app_id=x\r\nB='two words'")
    update_env_file(env, {"FEISHU_APP_ID": "cli_1", "LARKGATE_ADMINS": "ou 1"})
    assert env.read_bytes() == (
        b"A=1\r\n# note\r\nFEISHU_APP_ID=cli_1\r\nB='two words'\n"
        b'# Feishu app (larkgate setup)\nLARKGATE_ADMINS="ou 1"\n'
    )
    assert dotenv_values(env)["LARKGATE_ADMINS"] == "ou 1"


def test_webhook_must_be_a_url(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["setup", "--webhook", "bot.example.com"])
    assert exit_info.value.code == 2
    assert "public URL" in capsys.readouterr().err

"""``larkgate dev``'s "Connect a real Feishu app" panel: ``larkgate setup``'s one scan run by
the dev server, driven over HTTP through the page's own routes (``/api/setup``) as the
page calls them, against an emulator standing in for Feishu's accounts hosts and open
platform (not the sandbox's own emulator: the app is a real one, elsewhere).

lark-oapi's poll loop sleeps ``interval`` seconds between polls: its clock is replaced by
a fake one (as in tests/test_setup.py) whose sleeps take no time, and which the test can
hold, to keep a registration waiting while it looks.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from dotenv import dotenv_values

from bot.sandbox.setup import qr_svg

from fakes.feishu_server import FakeFeishu
from support.env import clear_settings
from support.registration import FakeClock, every_log_line, registration_clock
from support.sandbox import Page

EXISTING = """\
# my bot
LLM_BASE_URL=http://127.0.0.1:11434/v1
LLM_MODEL=qwen2.5
FEISHU_APP_ID=cli_old
DATABASE_URL=sqlite+aiosqlite:///./bot.db
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clear_settings(monkeypatch, tmp_path)  # and run in tmp_path: dev's .env is there


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    return registration_clock(monkeypatch)


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    return every_log_line(caplog)


@pytest.fixture
async def accounts(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> AsyncIterator[FakeFeishu]:
    """Feishu's accounts hosts and open platform, where setup finds them."""
    async with FakeFeishu() as server:
        monkeypatch.setenv("FEISHU_ACCOUNTS_URL", server.accounts_url)
        monkeypatch.setenv("LARK_ACCOUNTS_URL", server.lark_accounts_url)
        monkeypatch.setenv("FEISHU_DOMAIN", server.domain)  # where the app is checked
        yield server


class Panel:
    """``/api/setup`` as the page calls it; every answer is kept (``answers``)."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.answers: list[str] = []

    async def _answer(self, response: aiohttp.ClientResponse) -> dict[str, Any]:
        text = await response.text()
        self.answers.append(text)
        assert response.status == 200, text
        return json.loads(text)

    async def start(self, body: dict[str, Any] | None = None) -> dict[str, Any]:
        # The page's own origin, as the browser sends it.
        headers = {"Origin": self.page.url}
        async with self.page.session.post(
            self.page.url + "/api/setup", json=body or {}, headers=headers
        ) as response:
            return await self._answer(response)

    async def state(self) -> dict[str, Any]:
        async with self.page.session.get(self.page.url + "/api/setup") as response:
            return await self._answer(response)

    async def until(self, *states: str, within: float = 20.0) -> dict[str, Any]:
        async with asyncio.timeout(within):
            while True:
                state = await self.state()
                if state["state"] in states:
                    return state
                await asyncio.sleep(0.02)


@pytest.fixture
def panel(page: Page) -> Panel:
    return Panel(page)


def assert_nothing_leaked(accounts: FakeFeishu, panel: Panel, logs: pytest.LogCaptureFixture):
    """The secret and the device code in no log line and no answer; the link (its user
    code) in no log line."""
    answers = "\n".join(panel.answers)
    for registration in accounts.registrations:
        assert registration.device_code not in logs.text
        assert registration.user_code not in logs.text
        assert registration.device_code not in answers
    for secret in accounts.registered_apps.values():
        assert secret not in logs.text
        assert secret not in answers


async def test_waiting_shows_the_link_and_its_qr_code(sandbox, accounts, clock, panel, logs):
    accounts.script_registration("pending", "success")
    clock.hold()  # the SDK waits after its first poll (pending) until released

    assert (await panel.state()) == {"state": "idle"}
    waiting = await panel.start()

    assert waiting["state"] == "waiting"
    [registration] = accounts.registrations
    url = waiting["url"]
    assert url.startswith(f"{accounts.domain}/page/launcher?")
    assert f"user_code={registration.user_code}" in url
    assert waiting["qr_svg"].startswith("<svg") and "<path" in waiting["qr_svg"]
    assert waiting["qr_svg"] == qr_svg(url)  # the QR code of that link
    assert 0 < waiting["expires_in"] <= 600
    assert waiting["lark"] is False
    again = await panel.state()  # the page's poll: the same link, the time left
    assert again == {**waiting, "expires_in": again["expires_in"]}
    assert not (sandbox.env_file).exists()

    clock.release()
    await panel.until("done")
    # Registering logged its requests, never the link, the device code or the secret.
    assert "/oauth/v1/app/registration" in logs.text
    assert_nothing_leaked(accounts, panel, logs)


async def test_success_writes_the_env_file_as_setup_does(
    sandbox, accounts, clock, panel, logs, tmp_path
):
    accounts.script_registration("pending", "slow_down", "pending", "success")
    env = tmp_path / ".env"
    env.write_text(EXISTING)
    assert sandbox.env_file == env  # dev's working directory's .env

    assert (await panel.start())["state"] in ("waiting", "checking", "done")
    done = await panel.until("done", "failed")

    [registration] = accounts.registrations
    [(app_id, secret)] = accounts.registered_apps.items()
    assert done["state"] == "done", done
    assert done["app_id"] == app_id == registration.app_id
    assert done["env_file"] == str(env)
    assert done["written"] == [
        "FEISHU_APP_ID",
        "FEISHU_APP_SECRET",
        "FEISHU_EVENT_MODE",
        "LARKGATE_ADMINS",
    ]
    assert done["admin"] == "ou_fake_alice"
    assert "restart with larkgate serve" in done["message"]
    # What is left, as setup prints it: publish, the long connection, serve (the model's
    # settings are in the file already).
    assert done["next"][0].startswith("Publish a version of the app")
    assert f"/app/{app_id}" in done["next"][0]
    assert "long connection" in done["next"][1]
    assert done["next"][-1].startswith("Run larkgate serve")
    assert not any("LLM_BASE_URL" in step for step in done["next"])

    values = dotenv_values(env)
    assert values["FEISHU_APP_ID"] == app_id
    assert values["FEISHU_APP_SECRET"] == secret
    assert values["FEISHU_EVENT_MODE"] == "ws"
    assert values["LARKGATE_ADMINS"] == "ou_fake_alice"
    assert values["DATABASE_URL"] == "sqlite+aiosqlite:///./bot.db"  # other lines kept
    assert env.read_text().startswith(EXISTING.replace("cli_old", app_id))
    assert stat.S_IMODE(os.stat(env).st_mode) == 0o600
    # The SDK waited on its (fake) clock, and the credentials were checked before writing.
    assert clock.sleeps == [5, 10, 10]
    assert accounts.count("POST", "/auth/v3/tenant_access_token/internal") == 1
    assert accounts.count("GET", "/bot/v3/info") == 1
    assert_nothing_leaked(accounts, panel, logs)


async def test_a_second_press_while_waiting_starts_no_second_registration(
    sandbox, accounts, clock, panel, logs
):
    accounts.script_registration("pending", "success")
    clock.hold()

    first = await panel.start()
    second = await panel.start()

    assert first["state"] == second["state"] == "waiting"
    assert second["url"] == first["url"]
    assert len(accounts.registrations) == 1
    assert [step for _, step in accounts.registrations[0].polls] == ["pending"]

    clock.release()
    done = await panel.until("done")
    assert len(accounts.registrations) == 1 and len(accounts.registered_apps) == 1
    assert done["app_id"] == accounts.registrations[0].app_id
    assert_nothing_leaked(accounts, panel, logs)


@pytest.mark.parametrize(("step", "says"), [("denied", "refused"), ("expired", "expired")])
async def test_a_refusal_or_an_expired_link_fails_and_writes_nothing(
    sandbox, accounts, panel, logs, tmp_path, step, says
):
    accounts.script_registration("pending", step)
    env = tmp_path / ".env"
    env.write_text(EXISTING)

    await panel.start()
    failed = await panel.until("failed", "done")

    assert failed["state"] == "failed", failed
    assert says in failed["message"] and "nothing was written" in failed["message"]
    assert set(failed) == {"state", "message"}
    assert env.read_text() == EXISTING
    assert not accounts.registered_apps
    assert_nothing_leaked(accounts, panel, logs)

    # Another press after a failure is a new registration.
    accounts.script_registration("success")
    await panel.start()
    assert (await panel.until("done", "failed"))["state"] == "done"
    assert len(accounts.registrations) == 2


async def test_the_sdk_deadline_is_an_expired_link(sandbox, accounts, panel, tmp_path):
    accounts.registration_ttl = 12  # the SDK stops polling at expires_in (its fake clock)
    accounts.registration_script = ["pending"] * 10

    await panel.start()
    failed = await panel.until("failed", "done")

    assert failed["state"] == "failed" and "expired" in failed["message"]
    assert not (tmp_path / ".env").exists()


async def test_no_network_fails_with_the_host_and_writes_nothing(
    sandbox, accounts, panel, monkeypatch, tmp_path
):
    with socket.socket() as sock:  # a port where nothing listens
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    monkeypatch.setenv("FEISHU_ACCOUNTS_URL", closed)

    failed = await panel.start()  # it fails before there is a link: the press says so

    assert failed["state"] == "failed"
    assert "could not reach 127.0.0.1" in failed["message"]
    assert not (tmp_path / ".env").exists()


async def test_credentials_that_fail_the_check_are_not_written(
    sandbox, accounts, panel, logs, tmp_path
):
    accounts.script_registration("success")
    accounts.fail("POST", "/auth/v3/tenant_access_token/internal", 10014, times=None)

    await panel.start()
    failed = await panel.until("failed", "done")

    [app_id] = accounts.registered_apps
    assert failed["state"] == "failed"
    assert app_id in failed["message"] and "could not be checked" in failed["message"]
    assert not (tmp_path / ".env").exists()
    assert_nothing_leaked(accounts, panel, logs)


async def test_a_lark_tenant_from_the_start(sandbox, accounts, panel, tmp_path):
    accounts.script_registration("lark", "success")

    await panel.start({"lark": True})
    done = await panel.until("done", "failed")

    assert done["state"] == "done", done
    [registration] = accounts.registrations
    assert [host for host, _ in registration.polls] == ["lark", "lark"]
    assert dotenv_values(tmp_path / ".env")["FEISHU_DOMAIN"] == accounts.domain


async def test_another_origin_may_not_start_it(sandbox, accounts, page, panel):
    accounts.script_registration("success")
    url = page.url + "/api/setup"
    async with page.session.post(url, json={}, headers={"Origin": "http://evil.example"}) as r:
        assert r.status == 403
    async with page.session.post(url, data=b"nope") as r:
        assert r.status == 400
    assert not accounts.registrations
    assert (await panel.state()) == {"state": "idle"}


async def test_stopping_dev_while_waiting_writes_nothing(sandbox, accounts, clock, panel):
    accounts.script_registration("pending", "success")
    clock.hold()
    assert (await panel.start())["state"] == "waiting"

    await sandbox.stop()
    clock.release()
    await asyncio.sleep(0.05)

    assert not sandbox.env_file.exists()
    assert not accounts.registered_apps
    assert [step for _, step in accounts.registrations[0].polls] == ["pending"]  # no more


async def test_the_page_has_the_panel(sandbox, page):
    async with page.session.get(page.url + "/") as response:
        html = await response.text()
    assert "Connect a real Feishu app" in html
    assert '"/api/setup"' in html


async def test_a_page_whose_name_was_rebound_to_loopback_gets_nothing(sandbox, accounts, page):
    """DNS rebinding: evil.example now resolves to 127.0.0.1, so a browser sends that
    page's requests here with ``Host: evil.example:<port>`` and an Origin of the same name
    (the Origin check passes); the Host header is what gives it away."""
    accounts.script_registration("success")
    rebound = {"Host": "evil.example:8765", "Origin": "http://evil.example:8765"}
    for path in ("/", "/api/transcript", "/api/setup"):
        async with page.session.get(page.url + path, headers=rebound) as answer:
            assert answer.status == 421, path
    async with page.session.post(page.url + "/api/setup", json={}, headers=rebound) as answer:
        assert answer.status == 421
    assert not accounts.registrations
    async with page.session.get(page.url + "/api/setup", headers={"Host": "localhost"}) as ok:
        assert ok.status == 200  # addressed to loopback by any of its names: served

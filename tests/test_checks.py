"""larkgate check against the fakes: every check passes, and each failure says what to fix."""

from __future__ import annotations

import pytest

from bot.checks import run_checks
from bot.config import load_settings

from fakes.feishu_server import FakeFeishu
from fakes.openai_server import FakeOpenAIServer, Reply


@pytest.fixture
async def fakes():
    async with (
        FakeFeishu(bot_open_id="ou_bot", bot_name="larkgate") as feishu,
        FakeOpenAIServer() as llm,
    ):
        llm.handler = lambda body: Reply(content="ok")
        yield feishu, llm


def settings_for(feishu, llm, tmp_path, **overrides):
    config = tmp_path / "larkgate.toml"
    config.write_text('[connectors.broken]\nsetting = "x"\n')
    values = {
        "feishu_app_id": feishu.app_id,
        "feishu_app_secret": feishu.app_secret,
        "feishu_verification_token": "vt",
        "feishu_domain": feishu.domain,
        "llm_base_url": llm.base_url,
        "llm_model": "fake-model",
        "larkgate_config": config,
    }
    values.update(overrides)
    return load_settings(**values)


async def test_a_working_deployment_passes_except_what_is_broken(fakes, tmp_path):
    feishu, llm = fakes
    results = {r.name: r for r in await run_checks(settings_for(feishu, llm, tmp_path))}
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
    results = {r.name: r for r in await run_checks(settings)}
    assert not results["feishu token"].ok
    assert "FEISHU_APP_SECRET" in results["feishu token"].detail
    assert not results["llm"].ok and "401" in results["llm"].detail

"""larkgate check on agent profiles: what each offers and where, and a tools entry that
matches nothing fails (a typo would otherwise leave a chat's agent without its tool)."""

from __future__ import annotations

import pytest

from bot.checks import run_checks

from fakes.feishu_server import FakeFeishu
from fakes.openai_server import FakeOpenAIServer, Reply
from support.env import checkable

TOML = """
[connectors.utilities]

[models.fast]
model = "small"

[profiles.ops]
instructions = "Operations."
tools = ["calculator", "current_*", "sql_quer"]
model = "fast"
approvers = ["ou_lead"]

[profiles.hr]
tools = ["calculator"]
read_only = true
model = "hr-model"

[profiles.spare]

[groups."oc_ops"]
profile = "ops"

[dm]
profile = "hr"
"""


@pytest.fixture
async def fakes():
    async with FakeFeishu() as feishu, FakeOpenAIServer() as llm:
        llm.handler = lambda body: Reply(content="ok")
        yield feishu, llm


async def test_each_profile_is_described_and_a_typo_fails(fakes, tmp_path):
    feishu, llm = fakes
    config = tmp_path / "larkgate.toml"
    config.write_text(TOML)
    settings = checkable(feishu, llm, config)
    lines = {r.name: r for r in await run_checks(settings)}
    ops = lines["profile ops"]
    assert ops.level == "FAIL"
    assert "'sql_quer' match no tool" in ops.detail
    assert "tools: calculator, current_time" in ops.detail
    assert "model fast;" in ops.detail and "approvers ou_lead" in ops.detail
    assert "used in group oc_ops" in ops.detail
    hr = lines["profile hr"]
    assert hr.level == "ok"
    assert "read-only" in hr.detail and "model hr-model (on LLM_BASE_URL)" in hr.detail
    assert "used in direct messages" in hr.detail
    spare = lines["profile spare"]
    assert spare.level == "WARN" and "all tools" in spare.detail and "used nowhere" in spare.detail

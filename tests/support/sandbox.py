"""``larkgate dev``'s sandbox (the real bot, the Feishu emulator, the chat page) started on
the fake model, with the deploy tool of ``support.deploy``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from bot.config import load_settings
from bot.sandbox.runner import Sandbox
from connectors.config import ConnectorsConfig

from fakes.openai_server import FakeOpenAIServer, Reply
from support.deploy import Deployer


def model(body: dict[str, Any]) -> Reply:
    """Deploys when asked to (once), answers everything else; streams its answers slowly."""
    messages = body["messages"]
    if body.get("stream"):
        trace = messages[-1]["content"]
        outcome = "web deployed" if "web deployed" in trace else "nothing to do"
        return Reply(content=f"All done here: {outcome}.", chunk_size=3, chunk_interval=0.08)
    last_user = [m["content"] for m in messages if m["role"] == "user"][-1]
    ran = any(m["role"] == "tool" for m in messages)
    if "deploy" in last_user and not ran:
        return Reply(tool_calls=[("c1", "deploy", {"service": "web"})])
    return Reply(content="draft")


@asynccontextmanager
async def running_sandbox(
    tmp_path: Path, llm_server: FakeOpenAIServer, deployer: Deployer
) -> AsyncIterator[Sandbox]:
    """A started Sandbox on a free port, its database in ``tmp_path``, no connectors."""
    settings = load_settings(
        llm_base_url=llm_server.base_url,
        llm_api_key="sk-sandbox-not-secret",
        llm_model="fake-model",
        database_url=f"sqlite+aiosqlite:///{tmp_path}/dev.db",
        larkgate_claim_lease_seconds=2.0,
        larkgate_shutdown_grace_seconds=2.0,
    )
    tools = [deployer.tool()]
    connectors = ConnectorsConfig(explicit=True)
    async with Sandbox(settings, port=0, tools=tools, connectors=connectors) as running:
        yield running

"""The connector holes, tried through the running bot: signed pushes in, the fake model
calling tools, the fake Feishu receiving what the bot says.

Each test plays a model that does what a prompt injection would make it do, and checks
what reaches the backend, the model and the chat.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio
from aiohttp import web

from connectors.config import ConnectorsConfig

from e2e.harness import answer_of, running_bot, settings_for
from fakes.openai_server import Reply
from support.servers import serving

API_KEY = "sk-live-9f8e7d6c5b4a39281706"
MCP_FIXTURE = Path(__file__).parent.parent / "connector_tools" / "mcp_server_fixture.py"


class EchoServer:
    """An API on 127.0.0.1 that answers with the headers it received, the API key
    included, as a careless server's error page does."""

    def __init__(self) -> None:
        self.requests: list[dict[str, str]] = []
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(dict(request.headers))
        return web.json_response({"you_sent": dict(request.headers)})


@pytest_asyncio.fixture
async def echo_server() -> AsyncIterator[EchoServer]:
    server = EchoServer()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    async with serving(app, access_log=None) as served:
        server.port = served.port
        yield server


def _tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def _all_tool_results(llm_server: Any) -> list[str]:
    """The tool results of the model call that saw the most of them."""
    return max((_tool_results(r.body) for r in llm_server.requests), key=len)


async def test_the_model_cannot_override_the_method_nor_show_the_key_it_was_sent(
    tmp_path, feishu, llm_server, echo_server
):
    host = f"127.0.0.1:{echo_server.port}"
    url = f"http://{host}/status"

    def handler(body: dict[str, Any]) -> Reply:
        results = _tool_results(body)
        if not results:
            # A read tool, told to delete: the override header would turn GET into DELETE
            # on many frameworks.
            headers = {"X-HTTP-Method-Override": "DELETE"}
            return Reply(tool_calls=[("t1", "http_get", {"url": url, "headers": headers})])
        if len(results) == 1:
            return Reply(tool_calls=[("t2", "http_get", {"url": url})])
        # A model that repeats what it read, word for word, into the chat.
        return Reply(content="\n".join(results))

    llm_server.handler = handler
    settings = settings_for(tmp_path, feishu, llm_server)
    connectors = ConnectorsConfig(
        sections={"http": {"allowed_hosts": host, "host_headers": {host: {"X-Api-Key": API_KEY}}}},
        explicit=True,
    )
    async with running_bot(settings, feishu, llm_server, connectors=connectors) as bot:
        await bot.say("om_http", "Is the status page up?")
        await bot.reply("om_http")
        await bot.settle()
        answer = answer_of(bot.replies_to("om_http")[-1], feishu)

    # The override was refused before anything was sent; the plain GET went out with the key.
    assert len(echo_server.requests) == 1
    assert echo_server.requests[0]["X-Api-Key"] == API_KEY
    assert not any("Override" in name for name in echo_server.requests[0])
    refused, echoed = _all_tool_results(llm_server)
    assert "X-HTTP-Method-Override" in refused
    assert "***" in echoed
    # Neither the model nor the chat ever saw the key.
    assert all(API_KEY not in json.dumps(r.body) for r in llm_server.requests)
    assert "***" in answer and API_KEY not in answer
    assert feishu.requests and not any(API_KEY.encode() in r.body for r in feishu.requests)


async def test_sql_query_only_reads_even_in_read_only_mode(tmp_path, feishu, llm_server):
    orders = tmp_path / "orders.db"
    with sqlite3.connect(orders) as db:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
        db.execute("INSERT INTO orders (total) VALUES (10.5)")
    attempts = [
        "SELECT 1; DROP TABLE orders",
        "SELECT * FROM orders /* ; */ ; DELETE FROM orders",
        f"ATTACH DATABASE '{tmp_path / 'attached.db'}' AS x",
        "PRAGMA writable_schema = 1",
        "SELECT load_extension('/tmp/evil')",
    ]

    def handler(body: dict[str, Any]) -> Reply:
        results = _tool_results(body)
        if len(results) < len(attempts):
            sql = attempts[len(results)]
            return Reply(tool_calls=[(f"q{len(results)}", "sql_query", {"sql": sql})])
        return Reply(content="done")

    llm_server.handler = handler
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_admins="ou_admin")
    connectors = ConnectorsConfig(sections={"sql": {"url": f"sqlite:///{orders}"}}, explicit=True)
    async with running_bot(settings, feishu, llm_server, connectors=connectors) as bot:
        await bot.say("om_ro", "/readonly on", sender_open_id="ou_admin")
        await bot.reply("om_ro")
        await bot.say("om_sql", "Tidy up the orders table.")
        await bot.reply("om_sql")
        await bot.settle()

    results = _all_tool_results(llm_server)
    assert len(results) == len(attempts)
    for sql, result in zip(attempts, results, strict=True):
        assert "refused" in result.lower(), (sql, result)
    with sqlite3.connect(orders) as db:
        assert db.execute("SELECT count(*) FROM orders").fetchone() == (1,)
    assert not _exists(tmp_path / "attached.db")


def _exists(path: Path) -> bool:
    return path.exists()


async def test_mcp_tools_that_would_share_a_name_are_never_offered(
    tmp_path, feishu, llm_server, caplog
):
    """Two servers whose tools would both become ``notes_read_note``: neither is offered,
    whatever the order, so a destructive tool can never answer to a read tool's name."""
    command = [sys.executable, str(MCP_FIXTURE)]
    servers = [
        {"name": "team", "transport": "stdio", "command": command, "tool_prefix": "notes"},
        {
            "name": "personal",
            "transport": "stdio",
            "command": command,
            "tool_prefix": "notes",
            "read": ["read_note"],
        },
    ]
    connectors = ConnectorsConfig(sections={"mcp": {"servers": servers}}, explicit=True)
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(settings, feishu, llm_server, connectors=connectors) as bot:
        names = set(bot.services.tools.names())
    assert not any(name.startswith("notes_") for name in names), names
    assert "tool name collision" in caplog.text

"""The MCP connector against a real MCP server (the SDK's), over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import mcp.types as mcp_types
import pytest
import pytest_asyncio
import uvicorn
from pydantic import ValidationError

from bot.engine import ReActAgent, Tool, ToolError, ToolRegistry
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response
from connectors.base import ConnectorContext
from connectors.mcp import MCP, MCPSettings, render_result, tool_name, tool_parameters

FIXTURE = Path(__file__).with_name("mcp_server_fixture.py")
module_loop = pytest.mark.asyncio(loop_scope="module")


def _load_fixture() -> ModuleType:
    # By path: the test directories' package layout must not matter.
    spec = importlib.util.spec_from_file_location("larkgate_mcp_server_fixture", FIXTURE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stdio(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": [sys.executable, str(FIXTURE)], **extra}


class HttpServer:
    """The fixture server over streamable HTTP, in-process, on 127.0.0.1."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.headers: list[dict[bytes, bytes]] = []  # of every HTTP request

    async def start(self) -> None:
        app = _load_fixture().build_server().streamable_http_app()

        async def recording(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                self.headers.append(dict(scope["headers"]))
            await app(scope, receive, send)

        config = uvicorn.Config(
            recording,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=0.2,
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        assert self._server is not None and self._task is not None
        self._server.should_exit = True
        await self._task


def _tools(connector: MCP) -> dict[str, Tool]:
    return {tool.name: tool for tool in connector.tools()}


async def _call(connector: MCP, name: str, /, **arguments: Any) -> str:
    """Call a tool the way the engine does: validate (defaults filled), then the handler."""
    tool = _tools(connector)[name]
    return await tool.handler(**tool.validate_arguments(arguments))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def http_server() -> AsyncIterator[HttpServer]:
    server = HttpServer()
    await server.start()
    yield server
    await server.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def hub(http_server: HttpServer) -> AsyncIterator[MCP]:
    """Three servers: stdio, HTTP, and one whose command does not exist."""
    settings = MCPSettings.model_validate(
        {
            "servers": [
                _stdio(
                    "notes",
                    read=["add", "read_note", "slow", "pid", "picture"],
                    write=["write_note"],
                    timeout_seconds=1.0,
                ),
                {
                    "name": "web",
                    "transport": "http",
                    "url": http_server.url,
                    "tool_prefix": "remote",
                    "headers": {"X-Larkgate-Test": "sesame"},
                    "read": "add, read_note",
                    "write": ["write_note"],
                },
                {"name": "broken", "command": ["/nonexistent/larkgate-mcp-server"]},
            ]
        }
    )
    connector = MCP(settings, ConnectorContext())
    await connector.start()
    yield connector
    await connector.aclose()


# -- discovery and classification ------------------------------------------------------


@module_loop
async def test_tools_are_discovered_named_and_classified(hub: MCP):
    tools = _tools(hub)
    notes = {name for name in tools if name.startswith("notes_")}
    assert notes == {
        "notes_add",
        "notes_read_note",
        "notes_write_note",
        "notes_write_note_slowly",
        "notes_fail",
        "notes_slow",
        "notes_pid",
        "notes_picture",
        "notes_notes_search",  # "notes.search", sanitised
    }
    assert {name for name in tools if name.startswith("remote_")} == {
        name.replace("notes_", "remote_", 1) for name in notes
    }
    assert not any(name.startswith("broken") for name in tools)

    assert tools["notes_add"].side_effect == "read"
    assert tools["notes_write_note"].side_effect == "write"
    # Not listed in read or write: a write, whatever the tool is.
    assert tools["notes_fail"].side_effect == "write"
    assert tools["notes_notes_search"].side_effect == "write"
    assert tools["remote_add"].side_effect == "read"
    assert tools["remote_slow"].side_effect == "write"

    add = tools["notes_add"]
    assert add.description == "Add two integers."
    assert add.parameters["type"] == "object"
    assert set(add.parameters["properties"]) == {"a", "b"}
    assert add.parameters["required"] == ["a", "b"]
    assert tools["notes_notes_search"].description == "Search notes by substring."
    assert add.timeout is not None and add.timeout > 1.0


@module_loop
async def test_check_names_the_failed_server_and_why(hub: MCP):
    status = await hub.check()
    assert status.name == "mcp"
    assert not status.ok
    assert "broken: failed: FileNotFoundError" in status.detail
    assert "notes: up, 9 tools" in status.detail
    assert "web: up, 9 tools" in status.detail
    assert status.tools == 18


# -- calls -----------------------------------------------------------------------------


@module_loop
async def test_calls_over_stdio_and_http(hub: MCP, http_server: HttpServer):
    assert await _call(hub, "notes_add", a=2, b=3) == "5"
    assert await _call(hub, "remote_add", a=20, b=22) == "42"

    assert await _call(hub, "notes_write_note", name="todo", text="buy milk") == "saved todo"
    assert await _call(hub, "notes_read_note", name="todo") == "buy milk"
    assert await _call(hub, "notes_notes_search", query="milk") == "todo"

    assert await _call(hub, "remote_write_note", name="plan", text="ship it") == "saved plan"
    assert await _call(hub, "remote_read_note", name="plan") == "ship it"
    assert http_server.headers
    assert all(h.get(b"x-larkgate-test") == b"sesame" for h in http_server.headers)


@module_loop
async def test_an_error_result_is_a_tool_error(hub: MCP):
    with pytest.raises(ToolError, match="the fail tool always fails"):
        await _call(hub, "notes_fail")
    with pytest.raises(ToolError, match="no note called 'missing'"):
        await _call(hub, "remote_read_note", name="missing")


@module_loop
async def test_images_are_summarised(hub: MCP):
    size = len(_load_fixture().PIXEL)
    assert await _call(hub, "notes_picture") == f"a pixel\n[image: image/png, {size} bytes]"


@module_loop
async def test_a_slow_call_times_out_and_the_server_keeps_serving(hub: MCP):
    with pytest.raises(ToolError, match=r"notes_slow|slow on MCP server notes timed out after 1 s"):
        await _call(hub, "notes_slow", seconds=10)
    assert await _call(hub, "notes_add", a=1, b=1) == "2"
    assert (await hub.check()).detail.count(": up,") == 2


@module_loop
async def test_the_engine_runs_mcp_tools(hub: MCP):
    llm = ScriptedLLM(
        [
            tool_calls_response(
                tool_call("notes_add", {"a": 1, "b": 41}, id="a"),
                tool_call("remote_fail", {}, id="b"),
            ),
            "done",
        ]
    )
    registry = ToolRegistry(hub.tools()).filter(["notes_add", "remote_fail"])  # no selection
    result = await ReActAgent(llm, registry).run("go")
    assert [step.status for step in result.steps] == ["ok", "error"]
    assert result.steps[0].observation == "42"
    assert "the fail tool always fails" in result.steps[1].observation


# -- reconnecting and closing ----------------------------------------------------------


async def _wait_until_disconnected(connector: MCP, pid: int) -> None:
    for _ in range(200):
        detail = (await connector.check()).detail
        if "disconnected" in detail:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"server {pid} still looks connected: {detail}")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@module_loop
async def test_a_killed_server_is_reconnected_and_aclose_leaves_no_process(caplog):
    caplog.set_level(logging.ERROR, logger="asyncio")
    settings = MCPSettings.model_validate(
        {
            "servers": [
                _stdio(
                    "solo",
                    read=["pid", "slow", "read_note"],
                    write=["write_note", "write_note_slowly"],
                )
            ]
        }
    )
    connector = MCP(settings, ConnectorContext())
    await connector.start()
    pids = [int(await _call(connector, "solo_pid"))]
    try:
        # Killed during a write: never repeated blindly.
        call = asyncio.create_task(
            _call(connector, "solo_write_note_slowly", name="b", text="2", seconds=0.5)
        )
        await asyncio.sleep(0.2)
        os.kill(pids[-1], signal.SIGKILL)
        with pytest.raises(ToolError, match="may or may not have run"):
            await call
        await _wait_until_disconnected(connector, pids[-1])

        # The session is known dead: the next call, even a write, reconnects before sending.
        assert await _call(connector, "solo_write_note", name="a", text="1") == "saved a"
        pids.append(int(await _call(connector, "solo_pid")))
        assert pids[-1] != pids[-2]
        assert (await connector.check()).ok

        # Killed during a read: the read is sent again on a new connection.
        call = asyncio.create_task(_call(connector, "solo_slow", seconds=0.3))
        await asyncio.sleep(0.15)
        os.kill(pids[-1], signal.SIGKILL)
        assert await call == "slept 0.3"
        pids.append(int(await _call(connector, "solo_pid")))
        assert len(set(pids)) == 3
    finally:
        await connector.aclose()

    assert all(_gone(pid) for pid in pids)
    assert "solo: closed" in (await connector.check()).detail
    with pytest.raises(ToolError, match="closed"):
        await _call(connector, "solo_pid")
    gc.collect()
    await asyncio.sleep(0)
    assert "never retrieved" not in caplog.text


@module_loop
@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_an_http_server_that_goes_away_is_a_tool_error_then_reconnects(protocol: str):
    server = HttpServer()
    await server.start()
    settings = MCPSettings.model_validate(
        {
            "servers": [
                {
                    "name": "web",
                    "url": server.url,
                    "protocol": protocol,
                    "read": ["add"],
                    "write": ["write_note"],
                }
            ]
        }
    )
    connector = MCP(settings, ConnectorContext())
    await connector.start()
    try:
        assert await _call(connector, "web_add", a=1, b=2) == "3"
        await server.stop()
        with pytest.raises(ToolError, match="MCP server web is unavailable: ConnectError"):
            await _call(connector, "web_add", a=1, b=2)
        assert "web: disconnected (ConnectError" in (await connector.check()).detail

        server = HttpServer(server.port)
        await server.start()
        assert await _call(connector, "web_write_note", name="a", text="1") == "saved a"

        # Restarted between two calls: a legacy session is gone (HTTP 404), so the
        # server did not run the call, and even a write is sent again on a new session.
        await server.stop()
        server = HttpServer(server.port)
        await server.start()
        assert await _call(connector, "web_write_note", name="b", text="2") == "saved b"
        assert (await connector.check()).ok
    finally:
        await connector.aclose()
        await server.stop()


@module_loop
async def test_startup_failures_do_not_raise():
    settings = MCPSettings.model_validate(
        {
            "servers": [
                {"name": "nowhere", "url": f"http://127.0.0.1:{_free_port()}/mcp"},
                {"name": "gone", "command": "/nonexistent/server --flag"},
                # Starts, reads its stdin, never answers.
                {"name": "mute", "command": [sys.executable, "-c", "import sys; sys.stdin.read()"]},
            ],
            "startup_timeout_seconds": 0.5,
        }
    )
    connector = MCP(settings, ConnectorContext())
    await connector.start()
    assert connector.tools() == []
    status = await connector.check()
    assert not status.ok
    assert "nowhere: failed: ConnectError" in status.detail
    assert "gone: failed: FileNotFoundError" in status.detail
    assert "mute: failed: TimeoutError: no answer within 0.5 s" in status.detail
    await connector.aclose()


# -- settings, names, schemas, rendering -----------------------------------------------


def test_settings_shape():
    settings = MCPSettings.model_validate(
        {
            "servers": '[{"name": "gh", "url": "https://example.com/mcp",'
            ' "headers": {"Authorization": "Bearer x"}},'
            ' {"name": "fs", "command": "npx -y server-filesystem /tmp", "read": "a,b"}]'
        }
    )
    gh, fs = settings.servers
    assert gh.transport == "http" and gh.prefix == "gh"
    assert fs.transport == "stdio"
    assert fs.command == ["npx", "-y", "server-filesystem", "/tmp"]
    assert fs.read == ["a", "b"]
    assert gh.headers["Authorization"].get_secret_value() == "Bearer x"
    assert "Bearer x" not in repr(settings)

    bad = [
        {"name": "x", "transport": "stdio"},
        {"name": "x", "transport": "http", "url": "ftp://example.com"},
        {"name": "x", "command": ["srv"], "read": ["t"], "write": ["t"]},
        {"name": "x y", "command": ["srv"]},
        {"name": "x", "command": ["srv"], "unknown": 1},
    ]
    for server in bad:
        with pytest.raises(ValidationError):
            MCPSettings.model_validate({"servers": [server]})
    with pytest.raises(ValidationError, match="duplicate"):
        MCPSettings.model_validate(
            {"servers": [{"name": "x", "command": ["a"]}, {"name": "x", "command": ["b"]}]}
        )


def test_tool_names_are_sanitised_and_unique():
    taken: set[str] = set()
    assert tool_name("gh", "search.issues", taken) == "gh_search_issues"
    taken.add("gh_search_issues")
    clash = tool_name("gh", "search/issues", taken)
    assert clash != "gh_search_issues" and clash.startswith("gh_search_issues_")
    long = tool_name("server", "x" * 100, set())
    assert len(long) == 64
    assert long != tool_name("server", "x" * 99, set())
    assert tool_name("", "plain", set()) == "plain"
    for name in (clash, long, tool_name("p", "日本語 tool", set())):
        Tool(name, "d", {"type": "object"}, handler=_noop)  # the engine accepts it


async def _noop(**_: Any) -> str:
    return ""


def test_schemas_become_object_schemas_the_engine_compiles():
    assert tool_parameters({}) == {"type": "object", "properties": {}}
    pydantic_style = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"item": {"$ref": "#/$defs/Item"}},
        "$defs": {"Item": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    }
    schema = tool_parameters(pydantic_style)
    assert "$schema" not in schema
    tool = Tool("t", "d", schema, handler=_noop)
    assert tool.validate_arguments({"item": {"n": 1}}) == {"item": {"n": 1}}
    # Nothing may download: a remote $ref falls back to free-form arguments.
    remote = {"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}}
    assert tool_parameters(remote)["properties"] == {}
    assert tool_parameters({"type": "array"})["type"] == "object"
    assert tool_parameters(None)["type"] == "object"


def test_results_render_text_and_summarise_the_rest():
    result = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(type="text", text="hello"),
            mcp_types.AudioContent(type="audio", data="AAAA", mime_type="audio/wav"),
            mcp_types.EmbeddedResource(
                type="resource",
                resource=mcp_types.TextResourceContents(uri="file:///a.txt", text="inside"),
            ),
            mcp_types.EmbeddedResource(
                type="resource",
                resource=mcp_types.BlobResourceContents(
                    uri="file:///b.bin", blob="AAAAAA==", mime_type="application/zip"
                ),
            ),
            mcp_types.ResourceLink(
                type="resource_link",
                name="report",
                uri="https://example.com/r",
                mime_type="text/html",
            ),
        ]
    )
    assert render_result(result).splitlines() == [
        "hello",
        "[audio: audio/wav, 3 bytes]",
        "[resource <file:///a.txt>]",
        "inside",
        "[resource <file:///b.bin>: application/zip, 4 bytes]",
        "[resource link: report <https://example.com/r> (text/html)]",
    ]
    structured = mcp_types.CallToolResult(content=[], structured_content={"n": 1})
    assert render_result(structured) == '{"n": 1}'

"""The MCP connector against a real MCP server (the SDK's), over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import mcp.types as mcp_types
import pytest
import pytest_asyncio
import uvicorn
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.server.mcpserver import MCPServer
from pydantic import ValidationError

from bot.engine import ReActAgent, Tool, ToolError, ToolRegistry
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response
from connectors.base import ConnectorContext
from connectors.mcp import MCP, MCPSettings, render_result, tool_parameters
from connectors.mcp_names import builtin_tool_names, engine_tool_name, plan_names

from support.servers import free_port
from support.waiting import wait_until

FIXTURE = Path(__file__).with_name("mcp_server_fixture.py")
module_loop = pytest.mark.asyncio(loop_scope="module")


def _load_fixture() -> ModuleType:
    # By path: the test directories' package layout must not matter.
    spec = importlib.util.spec_from_file_location("larkgate_mcp_server_fixture", FIXTURE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stdio(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": [sys.executable, str(FIXTURE)], **extra}


class HttpServer:
    """An MCP server over streamable HTTP, in-process, on 127.0.0.1: the fixture server,
    or the one ``build`` makes."""

    def __init__(
        self, port: int | None = None, build: Callable[[HttpServer], MCPServer] | None = None
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._build = build
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.headers: list[dict[bytes, bytes]] = []  # of every HTTP request

    async def start(self) -> None:
        mcp_server = _load_fixture().build_server() if self._build is None else self._build(self)
        app = mcp_server.streamable_http_app()

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
        self._server = server = uvicorn.Server(config)
        self._task = task = asyncio.create_task(server.serve())

        def started() -> bool:
            if task.done():
                task.result()  # it failed to start: raise why
            return server.started

        await wait_until(started, 10.0, every=0.01)

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
    detail = ""

    async def disconnected() -> bool:
        nonlocal detail
        detail = (await connector.check()).detail
        return "disconnected" in detail

    await wait_until(
        disconnected,
        5.0,
        every=0.02,
        failure=lambda: f"server {pid} still looks connected: {detail}",
    )


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
    # The default start-up timeout (30 s): both fail at once with their own error, and
    # only a failure that hangs instead would reach it (and read TimeoutError here).
    settings = MCPSettings.model_validate(
        {
            "servers": [
                {"name": "nowhere", "url": f"http://127.0.0.1:{free_port()}/mcp"},
                {"name": "gone", "command": "/nonexistent/server --flag"},
            ],
        }
    )
    connector = MCP(settings, ConnectorContext())
    await connector.start()
    assert connector.tools() == []
    status = await connector.check()
    assert not status.ok
    assert "nowhere: failed: ConnectError" in status.detail
    assert "gone: failed: FileNotFoundError" in status.detail
    await connector.aclose()


@module_loop
async def test_a_server_that_never_answers_fails_at_the_startup_timeout():
    # Alone, so the short timeout races nothing: however slow the machine, this server
    # cannot answer in time (it starts, reads its stdin and never writes).
    settings = MCPSettings.model_validate(
        {
            "servers": [
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
    assert status.detail == (
        "mute: failed: TimeoutError: no answer within 0.5 s (startup_timeout_seconds)"
    )
    await connector.aclose()


# -- engine names and classification: never by listing order --------------------------


def _named_tools(names: list[str], ran: list[str]) -> Callable[[HttpServer], MCPServer]:
    """A server listing ``names`` in that order; each tool records that it ran. A tool
    called ``echo_key`` answers with the X-Api-Key header its request carried."""

    def build(http: HttpServer) -> MCPServer:
        server = MCPServer("larkgate-named-tools", log_level="WARNING")
        for name in names:
            server.add_tool(_recording_tool(name, ran, http), name=name, description=name)
        return server

    return build


def _recording_tool(name: str, ran: list[str], http: HttpServer) -> Callable[..., str]:
    def tool(text: str = "") -> str:
        ran.append(name)
        if name == "echo_key":
            key = http.headers[-1].get(b"x-api-key", b"").decode()
            return f"you sent {key}; escaped {json.dumps(key)}"
        return f"{name} ran"

    return tool


async def _serving(
    tools: list[str], servers: list[dict[str, Any]], ran: list[str] | None = None
) -> tuple[MCP, HttpServer]:
    """One in-process server listing ``tools``; MCP connector entries for it (url filled)."""
    http = HttpServer(build=_named_tools(tools, ran if ran is not None else []))
    await http.start()
    settings = MCPSettings.model_validate({"servers": [{"url": http.url, **s} for s in servers]})
    connector = MCP(settings, ConnectorContext())
    await connector.start()
    return connector, http


@module_loop
@pytest.mark.parametrize(
    "listing", [["docs.search", "docs_search"], ["docs_search", "docs.search"]]
)
async def test_a_destructive_tool_listed_first_cannot_take_a_read_name(listing, caplog):
    # Before: the first listed took kb_docs_search and, named by the engine name in read,
    # was classed read; docs.search (destructive) listed first became a read tool.
    ran: list[str] = []
    connector, http = await _serving(listing, [{"name": "kb", "read": ["kb_docs_search"]}], ran)
    try:
        assert _tools(connector) == {}
        status = await connector.check()
        assert not status.ok
        assert status.detail == (
            "kb: failed: tool name collision: kb's tool 'docs.search' and kb's tool"
            " 'docs_search' all become the engine tool kb_docs_search; leave all but one out"
            ' with exclude on server kb, e.g. exclude = ["docs.search"]'
        )
        assert "MCP server kb is off: tool name collision" in caplog.text
        assert ran == []
    finally:
        await connector.aclose()
        await http.stop()


@module_loop
async def test_lists_name_the_servers_own_tools_and_exclude_settles_a_clash(caplog):
    caplog.set_level(logging.WARNING, logger="connectors.mcp")
    ran: list[str] = []
    servers = [
        # An engine name in read does not make a tool read (it could name another tool).
        {"name": "kb", "read": ["kb_docs_search"], "exclude": ["docs.search"]},
        {"name": "kb2", "read": ["docs_search"], "exclude": ["docs.search"]},
    ]
    connector, http = await _serving(["docs.search", "docs_search"], servers, ran)
    try:
        tools = _tools(connector)
        assert {name: tool.side_effect for name, tool in tools.items()} == {
            "kb_docs_search": "write",
            "kb2_docs_search": "read",
        }
        assert await _call(connector, "kb2_docs_search") == "docs_search ran"
        assert ran == ["docs_search"]
        assert "has no tool named 'kb_docs_search'" in caplog.text
        assert "the lists take the server's own tool names, e.g. 'docs_search'" in caplog.text
    finally:
        await connector.aclose()
        await http.stop()


@module_loop
@pytest.mark.parametrize("order", [1, -1])
async def test_a_clash_across_servers_fails_both_whatever_their_order(order: int):
    servers = [
        {"name": "a", "read": ["b_x"]},
        {"name": "a_b", "read": ["x"]},
        {"name": "c", "read": ["x"]},
    ]
    one, other = HttpServer(build=_named_tools(["b_x"], [])), None
    await one.start()
    other = HttpServer(build=_named_tools(["x"], []))
    await other.start()
    settings = MCPSettings.model_validate(
        {
            "servers": [
                {**servers[0], "url": one.url},
                {**servers[1], "url": other.url},
                {**servers[2], "url": other.url},
            ][::order]
        }
    )
    connector = MCP(settings, ConnectorContext())
    await connector.start()
    try:
        assert set(_tools(connector)) == {"c_x"}
        detail = (await connector.check()).detail
        clash = (
            "tool name collision: a's tool 'b_x' and a_b's tool 'x' both become the engine"
            " tool a_b_x; give one of these servers another tool_prefix"
        )
        assert f"a: failed: {clash}" in detail and f"a_b: failed: {clash}" in detail
        assert "c: up, 1 tools" in detail
    finally:
        await connector.aclose()
        await one.stop()
        await other.stop()


@module_loop
async def test_a_tool_may_not_take_a_built_in_tools_name():
    servers = [
        {"name": "web", "tool_prefix": "http", "read": ["get"]},
        {"name": "calc", "tool_prefix": "", "read": ["calculator"]},
    ]
    http = HttpServer(build=_named_tools(["get", "calculator"], []))
    await http.start()
    settings = MCPSettings.model_validate({"servers": [{**s, "url": http.url} for s in servers]})
    connector = MCP(settings, ConnectorContext())
    await connector.start()
    try:
        assert _tools(connector) == {}
        detail = (await connector.check()).detail
        assert (
            "web's tool 'get' would be the engine tool http_get, the name of a built-in http"
            in (detail)
        )
        assert "calc's tool 'calculator' would be the engine tool calculator" in detail
        assert "set another tool_prefix on calc" in detail
    finally:
        await connector.aclose()
        await http.stop()


@module_loop
@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_a_tool_that_appears_at_a_reconnect_inherits_nothing(protocol: str):
    # At start the server lists a read tool; restarted, it lists a destructive tool with
    # the same engine name instead, and a new one.
    ran: list[str] = []
    server = {"name": "kb", "read": ["docs_search"], "protocol": protocol}
    connector, http = await _serving(["docs_search"], [server], ran)
    try:
        assert await _call(connector, "kb_docs_search") == "docs_search ran"
        await http.stop()
        http = HttpServer(http.port, build=_named_tools(["docs.search", "purge"], ran))
        await http.start()
        # A legacy session is gone, so the call reconnects and sees the new list; a
        # sessionless server is asked for the old tool by its own name and refuses.
        refusal = (
            "no longer lists the tool docs_search"
            if protocol == "legacy"
            else "Unknown tool: docs_search"
        )
        with pytest.raises(ToolError, match=refusal):
            await _call(connector, "kb_docs_search")
        assert ran == ["docs_search"]  # the destructive tool never ran
        assert set(_tools(connector)) == {"kb_docs_search"}  # and nothing new is offered
        assert _tools(connector)["kb_docs_search"].side_effect == "read"
    finally:
        await connector.aclose()
        await http.stop()


@module_loop
async def test_a_servers_secrets_are_masked_in_results():
    key = 'mcp-key-5f4e3d2c1b0a/"x'
    connector, http = await _serving(
        ["echo_key"], [{"name": "sec", "headers": {"X-Api-Key": key}, "read": ["echo_key"]}]
    )
    try:
        text = await _call(connector, "sec_echo_key")
        assert text == 'you sent ***; escaped "***"'
    finally:
        await connector.aclose()
        await http.stop()


def test_plan_names_unit():
    names, failures = plan_names(
        {"kb": ("kb", ["docs.search", "docs_search"]), "gh": ("gh", ["search.issues"])}, {}
    )
    assert names == {"gh": {"search.issues": "gh_search_issues"}}
    assert set(failures) == {"kb"}
    _, twice = plan_names({"kb": ("kb", ["a", "a"])}, {})
    assert twice["kb"].endswith(
        "lists the tool 'a' more than once; exclude = [\"a\"] leaves it out"
    )
    reserved = builtin_tool_names()
    assert {"http_get", "http_post", "calculator", "current_time"} <= set(reserved)
    assert reserved["http_get"] == "http"


def test_built_in_names_read_from_source_match_the_real_tools():
    # builtin_tool_names reads the @action declarations without importing the
    # connectors: it must agree with what the classes really declare.
    from connectors.base import _ACTION
    from connectors.hub import BUILTIN, load_connector_class

    declared: dict[str, str] = {}
    for connector in set(BUILTIN) - {"mcp"}:
        cls = load_connector_class(connector)
        for attribute in dir(cls):
            spec = getattr(getattr(cls, attribute, None), _ACTION, None)
            if spec is not None:
                declared[spec.name or attribute] = connector
    assert declared and dict(builtin_tool_names()) == declared


_remote_names = st.text(alphabet="ab._-/é", min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
@given(
    listings=st.dictionaries(
        st.sampled_from(["a", "a_b", "b"]),
        st.lists(_remote_names, max_size=5),
        min_size=1,
    ),
    data=st.data(),
)
def test_plan_names_does_not_depend_on_order(listings: dict[str, list[str]], data: Any):
    prefixed = {server: (server, tools) for server, tools in listings.items()}
    reserved = {"b_a": "http"}
    names, failures = plan_names(prefixed, reserved)
    shuffled_servers = data.draw(st.permutations(list(prefixed)))
    shuffled = {s: (s, data.draw(st.permutations(prefixed[s][1]))) for s in shuffled_servers}
    assert plan_names(shuffled, reserved) == (names, failures)
    # Every engine name offered means exactly one server tool, never a built-in's name.
    offered = [engine for tools in names.values() for engine in tools.values()]
    assert len(offered) == len(set(offered))
    assert not set(offered) & set(reserved)
    # A server fails exactly when one of its tools shares its engine name with another.
    for server, (prefix, tools) in prefixed.items():
        mine = [engine_tool_name(prefix, t) for t in tools]
        others = [
            engine_tool_name(p, t) for s, (p, ts) in prefixed.items() if s != server for t in ts
        ]
        clash = len(mine) != len(set(mine)) or bool(set(mine) & (set(others) | set(reserved)))
        assert (server in failures) == clash


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
        {"name": "x", "command": ["srv"], "read": ["t"], "exclude": ["t"]},
        {"name": "x", "command": ["srv"], "tool_prefix": "a.b"},
    ]
    for server in bad:
        with pytest.raises(ValidationError):
            MCPSettings.model_validate({"servers": [server]})
    with pytest.raises(ValidationError, match="duplicate"):
        MCPSettings.model_validate(
            {"servers": [{"name": "x", "command": ["a"]}, {"name": "x", "command": ["b"]}]}
        )


def test_engine_names_are_sanitised_from_the_tool_name_alone():
    assert engine_tool_name("gh", "search.issues") == "gh_search_issues"
    assert engine_tool_name("gh", "search/issues") == "gh_search_issues"  # a clash, not renamed
    long = engine_tool_name("server", "x" * 100)
    assert len(long) == 64
    assert long != engine_tool_name("server", "x" * 99)
    assert long == engine_tool_name("server", "x" * 100)
    assert engine_tool_name("", "plain") == "plain"
    for name in (long, engine_tool_name("p", "日本語 tool"), engine_tool_name("", "")):
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

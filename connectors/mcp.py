"""MCP servers as a connector: the tools each server lists at start become engine tools.

Each configured server (a stdio subprocess or a streamable-HTTP endpoint) is held by a
long-lived task of its own, which enters the SDK's context managers, waits, and exits
them itself (the SDK's anyio task groups must be left by the task that entered them).
Calls go through the session object from any task. A server whose connection died is
reconnected once, on the next call; one that fails to start is reported by ``check()``
while the others serve.

The hub, not the server, decides what is a write: a tool counts as ``read`` only when
its server's ``read`` list names it, by the name the server lists it under; everything
else is ``write`` (approval and read-only rules apply). Server-side annotations such as
``readOnlyHint`` are hints from a peer and are not trusted for this.

Engine tool names come from the server's tool name alone (``<tool_prefix>_<tool>``,
characters the engine does not allow made ``_``, a hash suffix past 64 characters), so
the order a server lists its tools in cannot change which tool a name means. Two tools
that end up with the same engine name (``docs.search`` and ``docs_search``; one server's
tool and another's; a tool and a built-in connector's) are never renamed to fit: every
server involved fails to start, with an error naming both tools and the fix
(``exclude`` or ``tool_prefix``), and the other servers serve.

A server whose tool list changes when it reconnects keeps the tools the bot started
with: a new tool is not offered (nor classified) until the bot restarts, and a call to a
tool the server no longer lists is refused without reaching it. The values of a
server's ``env`` and ``headers`` are masked (``***``) in every result and error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shlex
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, Literal, TextIO

import anyio
import httpx2
import mcp.types as mcp_types
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import BeforeValidator, Field, SecretStr, model_validator

from bot.engine import Tool, ToolError
from bot.network import Network

from .base import (
    DEFAULT_MAX_RESULT_CHARS,
    CommaList,
    Connector,
    ConnectorContext,
    ConnectorSettings,
    ConnectorStatus,
)
from .mcp_names import builtin_tool_names, plan_names
from .secret_masking import SecretMasker

logger = logging.getLogger(__name__)

SideEffect = Literal["read", "write"]

# Bounded: the SDK's own stdio shutdown gives up after about 6.5 s.
_CLOSE_TIMEOUT = 10.0
_MAX_LIST_PAGES = 100
_MAX_ERROR_CHARS = 2000
_SCHEMA_IN_DESCRIPTION_CHARS = 2000
# What servers answer (HTTP 404) for a session id they no longer know.
_SESSION_GONE = re.compile(r"session\b.*\b(not found|terminated|expired|unknown|invalid)", re.I)
_PERMISSIVE_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {},
    "additionalProperties": True,
}


def _split_command(value: object) -> object:
    return shlex.split(value) if isinstance(value, str) else value


def _parse_json_list(value: object) -> object:
    # MCP_CONNECTOR_SERVERS from the environment arrives as a JSON string.
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"servers must be a list of tables (or JSON): {exc}") from None
    return value


class MCPServerSettings(ConnectorSettings):
    """One MCP server: how to reach it, and which of its tools only read."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,40}$")
    transport: Literal["stdio", "http"] = "stdio"
    # stdio: the command line (a list, or one string split like a shell would).
    command: Annotated[list[str], BeforeValidator(_split_command)] = Field(default_factory=list)
    # stdio: variables added to a minimal inherited environment (HOME, PATH, ...),
    # so the bot's own secrets never reach the server. Values are kept out of logs.
    env: dict[str, SecretStr] | None = None
    cwd: str | None = None
    # http: the streamable-HTTP endpoint, e.g. https://example.com/mcp, and extra headers.
    url: str | None = None
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    # The server's own tool names (exactly as it lists them, e.g. "docs.search", not the
    # engine name "kb_docs_search") that only read, or that write. A tool in neither list
    # is treated as a write.
    read: CommaList = Field(default_factory=list)
    write: CommaList = Field(default_factory=list)
    # The server's tool names never offered to the model (e.g. to settle a name clash).
    exclude: CommaList = Field(default_factory=list)
    timeout_seconds: float = Field(default=30.0, gt=0)
    # "auto" probes for the 2026 protocol and falls back to the initialize handshake;
    # "legacy" goes straight to the handshake (for servers that mishandle the probe).
    protocol: Literal["auto", "legacy"] = "auto"
    # Engine tools are named <tool_prefix>_<tool>; default the server's name, "" for none.
    tool_prefix: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{0,40}$")
    max_result_chars: int = Field(default=DEFAULT_MAX_RESULT_CHARS, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _infer_transport(cls, data: Any) -> Any:
        if isinstance(data, dict) and "transport" not in data and data.get("url"):
            return {**data, "transport": "http"}
        return data

    @model_validator(mode="after")
    def _check_shape(self) -> MCPServerSettings:
        if self.transport == "stdio":
            if not self.command:
                raise ValueError(f"server {self.name}: a stdio server needs a command")
            if self.url:
                raise ValueError(f"server {self.name}: url is for transport = 'http'")
        else:
            if not self.url or not self.url.startswith(("http://", "https://")):
                raise ValueError(f"server {self.name}: an http server needs an http(s) url")
            if self.command:
                raise ValueError(f"server {self.name}: command is for transport = 'stdio'")
        both = sorted(set(self.read) & set(self.write))
        if both:
            raise ValueError(f"server {self.name}: {', '.join(both)} listed as both read and write")
        excluded = sorted(set(self.exclude) & (set(self.read) | set(self.write)))
        if excluded:
            raise ValueError(
                f"server {self.name}: {', '.join(excluded)} listed in exclude and in read/write"
            )
        return self

    @property
    def prefix(self) -> str:
        return self.name if self.tool_prefix is None else self.tool_prefix


class MCPSettings(ConnectorSettings):
    servers: Annotated[list[MCPServerSettings], BeforeValidator(_parse_json_list)] = Field(
        default_factory=list
    )
    # How long one server may take to start, initialise and list its tools.
    startup_timeout_seconds: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _unique_names(self) -> MCPSettings:
        names = [server.name for server in self.servers]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate MCP server names: {', '.join(duplicates)}")
        return self


class MCP(Connector):
    """Tools of the configured MCP servers."""

    name = "mcp"
    Settings = MCPSettings

    def __init__(self, settings: MCPSettings, context: ConnectorContext) -> None:
        super().__init__(settings, context)
        self._links = [
            _ServerLink(server, settings.startup_timeout_seconds, context.network or Network())
            for server in settings.servers
        ]
        self._tools: list[Tool] = []

    async def start(self) -> None:
        """Connect to every server at once; one failing leaves the others serving."""
        try:
            await asyncio.gather(*(link.start() for link in self._links))
        except BaseException:
            # Cancelled mid-start (the bot is stopping): leave no server running.
            await self.aclose()
            raise
        self._tools = await _build_tools(self._links, builtin_tool_names())
        up = [link.config.name for link in self._links if link.error is None]
        logger.info("MCP servers up: %s (%d tools)", ", ".join(up) or "none", len(self._tools))

    def tools(self) -> list[Tool]:
        return list(self._tools)

    async def check(self) -> ConnectorStatus:
        if not self._links:
            return ConnectorStatus(self.name, False, "no MCP servers configured")
        states = [link.describe() for link in self._links]
        ok = all(link.error is None for link in self._links)
        return ConnectorStatus(self.name, ok, "; ".join(states), len(self._tools))

    async def aclose(self) -> None:
        await asyncio.gather(*(link.aclose() for link in self._links))


class _ServerLink:
    """One server's connection: a task that owns it, and calls made through its session."""

    def __init__(self, config: MCPServerSettings, startup_timeout: float, network: Network) -> None:
        self.config = config
        self.network = network
        self.startup_timeout = startup_timeout
        self.tools: list[mcp_types.Tool] = []  # as listed at start: what the engine offers
        self.listed: frozenset[str] = frozenset()  # as listed by the current connection
        self.error: str | None = None  # why the server could not start
        self.masker = SecretMasker(
            [value.get_secret_value() for value in (config.env or {}).values()]
            + [value.get_secret_value() for value in config.headers.values()]
        )
        self.lost: str | None = None  # why the last connection ended, until reconnected
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        try:
            async with self._lock:
                self.tools = await self._connect()
        except Exception as exc:  # reported by check(); the other servers carry on
            self.error = _describe(exc)
            logger.error("MCP server %s failed to start: %s", self.config.name, self.error)
        else:
            logger.info("MCP server %s: %d tools", self.config.name, len(self.tools))

    async def aclose(self) -> None:
        self._closed = True
        async with self._lock:
            await self._disconnect()

    async def fail(self, reason: str) -> None:
        """Take a started server out of service (its tools cannot be offered safely)."""
        self.error = reason
        logger.error("MCP server %s is off: %s", self.config.name, reason)
        await self.aclose()

    def describe(self) -> str:
        name = self.config.name
        if self.error is not None:
            return f"{name}: failed: {self.error}"
        if self._closed:
            return f"{name}: closed"
        if self.lost is not None or not self._alive():
            return (
                f"{name}: disconnected ({self.lost or 'connection ended'}); reconnects on next call"
            )
        return f"{name}: up, {len(self.tools)} tools"

    async def _connect(self) -> list[mcp_types.Tool]:
        """Start the owning task, wait until it holds a session, and list the tools."""
        if self._closed:
            raise ToolError(f"MCP server {self.config.name} is closed")
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        owner = asyncio.create_task(self._hold(ready, stop), name=f"mcp:{self.config.name}")
        self._owner, self._stop, self._client = owner, stop, None
        try:
            async with asyncio.timeout(self.startup_timeout):
                client = await asyncio.shield(ready)
                tools = await _list_tools(client)
        except BaseException as exc:
            if not ready.done() or ready.cancelled() or ready.exception() is not None:
                # Stuck connecting (or failed): stop waiting for the handshake now.
                ready.cancel()
                owner.cancel()
            await self._disconnect()
            if isinstance(exc, TimeoutError):
                raise TimeoutError(
                    f"no answer within {self.startup_timeout:g} s (startup_timeout_seconds)"
                ) from None
            raise
        self._client, self.lost = client, None
        self.listed = frozenset(tool.name for tool in tools)
        return tools

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """The owning task: enter the SDK's context managers, wait for stop, exit them here."""
        try:
            async with self._open() as client:
                if not ready.done():
                    ready.set_result(client)
                await stop.wait()
        except Exception as exc:  # the transport died (process gone, HTTP unreachable, ...)
            if not ready.done():
                ready.set_exception(exc)
            else:
                # Also when a call already noticed and is reconnecting (stop is set then).
                level = logging.INFO if stop.is_set() else logging.WARNING
                self.lost = _describe(exc)
                logger.log(
                    level, "MCP server %s: connection ended: %s", self.config.name, self.lost
                )
        finally:
            if not ready.done():
                ready.cancel()

    @contextlib.asynccontextmanager
    async def _open(self) -> AsyncIterator[Client]:
        config = self.config
        info = mcp_types.Implementation(name="larkgate", version=_larkgate_version())
        async with contextlib.AsyncExitStack() as stack:
            if config.transport == "stdio":
                params = StdioServerParameters(
                    command=config.command[0],
                    args=config.command[1:],
                    env=_reveal(config.env) if config.env is not None else None,
                    cwd=config.cwd,
                )
                errlog = _server_stderr(stack)
                transport = stdio_client(params, errlog=errlog)
            else:
                assert config.url is not None
                # The proxy and CA the deployment sets, as for every outbound call.
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(
                        headers=_reveal(config.headers),
                        timeout=httpx2.Timeout(30.0, read=300.0),
                        **self.network.httpx_options(),
                    )
                )
                transport = streamable_http_client(config.url, http_client=http)
            client = Client(transport, mode=config.protocol, cache=None, client_info=info)
            yield await stack.enter_async_context(client)

    async def _disconnect(self) -> None:
        """Stop the owning task (it exits the SDK's context managers) and wait for it."""
        owner, stop = self._owner, self._stop
        self._owner = self._stop = self._client = None
        if owner is None or stop is None:
            return
        stop.set()
        _, pending = await asyncio.wait({owner}, timeout=_CLOSE_TIMEOUT)
        if pending:
            logger.warning("MCP server %s did not close in time; cancelling", self.config.name)
            owner.cancel()
            await asyncio.wait({owner}, timeout=_CLOSE_TIMEOUT)

    def _alive(self) -> bool:
        return (
            self._client is not None
            and self._owner is not None
            and not self._owner.done()
            and not _session_closed(self._client)
        )

    async def _reconnect(self, stale: Client | None) -> Client:
        """A live client: the current one if another call already reconnected, else a new one."""
        async with self._lock:
            if self._closed:
                raise ToolError(f"MCP server {self.config.name} is closed")
            if self._client is not None and self._client is not stale and self._alive():
                return self._client
            logger.warning(
                "MCP server %s: connection ended (%s); reconnecting",
                self.config.name,
                self.lost or "the server closed it",
            )
            await self._disconnect()
            try:
                tools = await self._connect()
            except Exception as exc:
                self.lost = _describe(exc)
                raise ToolError(
                    f"MCP server {self.config.name} is unavailable: {self.lost}"
                ) from None
            _warn_if_tools_changed(self.config.name, self.tools, tools)
            assert self._client is not None
            return self._client

    # -- calls -------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any], side_effect: SideEffect) -> str:
        """Call ``tool`` and render the result, the server's secrets masked (errors too)."""
        try:
            return await self._call(tool, arguments, side_effect)
        except ToolError as exc:
            raise ToolError(self.masker.mask(str(exc))) from exc

    def _still_listed(self, tool: str) -> None:
        # A tool the server dropped at a reconnect: its name may now mean something else
        # to the server, or nothing; either way the classification was made for the old one.
        if tool not in self.listed:
            raise ToolError(
                f"MCP server {self.config.name} no longer lists the tool {tool} (its tools"
                " changed when it reconnected); it did not run. Restarting the bot picks up"
                " the server's current tools."
            )

    async def _call(self, tool: str, arguments: dict[str, Any], side_effect: SideEffect) -> str:
        """Call ``tool``; reconnect once if the session is dead; render the result."""
        if self._closed:
            raise ToolError(f"MCP server {self.config.name} is closed")
        reconnected = False
        client = self._client if self._alive() else None
        if client is None:
            client = await self._reconnect(stale=self._client)
            reconnected = True
        self._still_listed(tool)
        try:
            result = await self._call_once(client, tool, arguments)
        except _ConnectionLost as lost:
            self.lost = lost.reason
            # A call that may have reached the server is sent again only if it reads:
            # a write is never repeated blindly.
            if reconnected or not (lost.unsent or side_effect == "read"):
                raise ToolError(self._lost_message(tool, lost)) from None
            client = await self._reconnect(stale=client)
            self._still_listed(tool)
            try:
                result = await self._call_once(client, tool, arguments)
            except _ConnectionLost as again:
                self.lost = again.reason
                raise ToolError(self._lost_message(tool, again)) from None
        # Masked before it is cut, so no cut leaves the start of a secret in view.
        text = self.masker.mask(render_result(result))
        if result.is_error:
            raise ToolError(_cut(text, _MAX_ERROR_CHARS) or f"{tool} failed without a message")
        return _cut(text, self.config.max_result_chars) or f"({tool} returned nothing)"

    def _lost_message(self, tool: str, lost: _ConnectionLost) -> str:
        name = self.config.name
        if lost.unsent:
            return f"MCP server {name} refused {tool} ({lost.reason}); it did not run."
        return (
            f"the connection to MCP server {name} broke during {tool} ({lost.reason}); "
            "it may or may not have run. The server is reconnected on the next call."
        )

    async def _call_once(
        self, client: Client, tool: str, arguments: dict[str, Any]
    ) -> mcp_types.CallToolResult:
        name, timeout = self.config.name, self.config.timeout_seconds
        try:
            return await client.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except MCPError as exc:
            if self.config.transport == "http" and _SESSION_GONE.search(exc.message or ""):
                # HTTP 404 for our session id: the server restarted or expired the session
                # and did not run the call; the spec says to start a new session.
                raise _ConnectionLost(exc.message, unsent=True) from None
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                raise ToolError(
                    f"{tool} on MCP server {name} timed out after {timeout:g} s"
                ) from None
            if exc.code == mcp_types.CONNECTION_CLOSED:
                raise _ConnectionLost(exc.message or "connection closed") from None
            raise ToolError(f"MCP server {name} refused {tool}: {exc.message}") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError) as exc:
            raise _ConnectionLost(_describe(exc)) from None
        except RuntimeError as exc:
            # The client left its context under us (the owning task ended mid-call).
            raise _ConnectionLost(_describe(exc)) from None
        except Exception as exc:  # e.g. a result that does not match the protocol
            raise ToolError(
                f"calling {tool} on MCP server {name} failed: {_describe(exc)}"
            ) from None


class _ConnectionLost(Exception):
    """The session ended; ``unsent`` when the server certainly did not run the call."""

    def __init__(self, reason: str, *, unsent: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.unsent = unsent


def _session_closed(client: Client) -> bool:
    """Whether the session already saw its connection end.

    The SDK (2.x) has no public flag for this; its dispatcher's is read defensively.
    Knowing it lets a call reconnect *before* sending, which is safe for writes too.
    """
    try:
        session = client.session
    except RuntimeError:
        return True
    dispatcher = getattr(session, "_dispatcher", None)
    return getattr(dispatcher, "_closed", False) is True


async def _list_tools(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _warn_if_tools_changed(
    server: str, before: Iterable[mcp_types.Tool], after: Iterable[mcp_types.Tool]
) -> None:
    old, new = {t.name for t in before}, {t.name for t in after}
    if old != new:
        logger.warning(
            "MCP server %s lists different tools after reconnecting (added %s, removed %s); "
            "the bot keeps the tools it started with until it restarts: added ones are not "
            "offered, removed ones are refused",
            server,
            sorted(new - old) or "none",
            sorted(old - new) or "none",
        )


# -- engine tools ----------------------------------------------------------------


async def _build_tools(links: Iterable[_ServerLink], reserved: Mapping[str, str]) -> list[Tool]:
    """The engine tools of the servers that started; a server in a name clash is stopped."""
    up = [link for link in links if link.error is None]
    listings = {
        link.config.name: (
            link.config.prefix,
            [t.name for t in link.tools if t.name not in link.config.exclude],
        )
        for link in up
    }
    names, failures = plan_names(listings, reserved)
    for link in up:
        if link.config.name in failures:
            await link.fail(failures[link.config.name])
    tools: list[Tool] = []
    for link in up:
        if link.error is not None:
            continue
        config, engine_names = link.config, names[link.config.name]
        _warn_about_lists(config, {t.name for t in link.tools}, engine_names)
        for remote in link.tools:
            if remote.name in engine_names:
                side_effect = classify(config, remote.name) or "write"
                tools.append(_engine_tool(link, remote, engine_names[remote.name], side_effect))
    return tools


def _warn_about_lists(
    config: MCPServerSettings, listed: set[str], engine_names: Mapping[str, str]
) -> None:
    """Name list entries that match no tool (with a hint for engine names) and tools in
    no list, so an operator sees why a tool counts as a write."""
    by_engine_name = {engine: remote for remote, engine in engine_names.items()}
    for entry in sorted((set(config.read) | set(config.write) | set(config.exclude)) - listed):
        remote = by_engine_name.get(entry)
        hint = (
            f"; {entry} is the engine name of {remote!r}: the lists take the server's own"
            f" tool names, e.g. {remote!r}"
            if remote is not None
            else ""
        )
        logger.warning(
            "MCP server %s has no tool named %r (read/write/exclude)%s", config.name, entry, hint
        )
    unclassified = [remote for remote in engine_names if classify(config, remote) is None]
    if unclassified:
        logger.warning(
            "MCP server %s: %s not listed in read or write; treated as write",
            config.name,
            ", ".join(unclassified),
        )


def classify(config: MCPServerSettings, remote: str) -> SideEffect | None:
    """``read``/``write`` when the server's lists name the tool (by the server's own name
    for it, never the engine name, which could belong to another tool), else None."""
    if remote in config.read:
        return "read"
    if remote in config.write:
        return "write"
    return None


def _engine_tool(
    link: _ServerLink, remote: mcp_types.Tool, name: str, side_effect: SideEffect
) -> Tool:
    description = (remote.description or remote.title or remote.name).strip()
    timeout = link.config.timeout_seconds + link.startup_timeout + 1.0
    handler = _handler(link, remote.name, side_effect)
    try:
        return Tool(
            name=name,
            description=description,
            parameters=tool_parameters(remote.input_schema),
            handler=handler,
            side_effect=side_effect,
            timeout=timeout,
        )
    except ValueError as exc:
        logger.warning(
            "MCP server %s: tool %s has a schema the engine cannot use (%s); "
            "offering it with free-form arguments",
            link.config.name,
            remote.name,
            exc,
        )
    schema = json.dumps(remote.input_schema, ensure_ascii=False)
    return Tool(
        name=name,
        description=f"{description}\n\nArguments (JSON schema): "
        + _cut(schema, _SCHEMA_IN_DESCRIPTION_CHARS),
        parameters=dict(_PERMISSIVE_SCHEMA),
        handler=handler,
        side_effect=side_effect,
        timeout=timeout,
    )


def _handler(link: _ServerLink, remote: str, side_effect: SideEffect) -> Callable[..., Any]:
    async def handler(**arguments: Any) -> str:
        return await link.call(remote, arguments, side_effect)

    return handler


def tool_parameters(schema: Any) -> dict[str, Any]:
    """An MCP input schema as engine parameters: an object schema with only local $refs."""
    if not isinstance(schema, dict):
        return dict(_PERMISSIVE_SCHEMA)
    result = {key: value for key, value in schema.items() if key != "$schema"}
    if result.get("type", "object") != "object":
        # Function-call arguments are an object; a server asking for anything else
        # (allowed from MCP 2026-07-28) gets free-form arguments and its own validation.
        return dict(_PERMISSIVE_SCHEMA)
    result["type"] = "object"
    if not isinstance(result.get("properties"), dict):
        result["properties"] = {}
    if _has_remote_ref(result):
        # The schema compiler would fetch it over the network; nothing may download.
        return dict(_PERMISSIVE_SCHEMA)
    return result


def _has_remote_ref(node: Any) -> bool:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            return True
        return any(_has_remote_ref(value) for value in node.values())
    if isinstance(node, list):
        return any(_has_remote_ref(value) for value in node)
    return False


# -- results ---------------------------------------------------------------------


def render_result(result: mcp_types.CallToolResult) -> str:
    """Text items joined; images, audio and binary resources summarised in a line."""
    parts = [_render_block(block) for block in result.content]
    text = "\n".join(part for part in parts if part)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    return text


def _render_block(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        return f"[{kind}: {block.mime_type}, {_b64_size(block.data)} bytes]"
    if kind == "resource_link":
        label = block.title or block.name
        line = f"[resource link: {label} <{block.uri}>"
        line += f" ({block.mime_type})]" if block.mime_type else "]"
        return f"{line} {block.description}" if block.description else line
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if text is not None:
            return f"[resource <{resource.uri}>]\n{text}"
        mime = resource.mime_type or "binary"
        return f"[resource <{resource.uri}>: {mime}, {_b64_size(resource.blob)} bytes]"
    return f"[{kind or 'unknown'} content]"


def _b64_size(data: str) -> int:
    return len(data) * 3 // 4 - data[-2:].count("=") if data else 0


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters not shown]"


def _describe(exc: BaseException) -> str:
    """One line naming the first real error, looking inside exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc)
    detail = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return detail[:300]


def _server_stderr(stack: contextlib.ExitStack | contextlib.AsyncExitStack) -> TextIO:
    """Where a stdio server's stderr goes: ours when it is a real file, else nowhere."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return stack.enter_context(open(os.devnull, "w"))
    return sys.stderr


def _reveal(values: Mapping[str, SecretStr]) -> dict[str, str]:
    return {key: value.get_secret_value() for key, value in values.items()}


def _larkgate_version() -> str:
    try:
        return version("larkgate")
    except PackageNotFoundError:
        return "0"


__all__ = [
    "MCP",
    "MCPServerSettings",
    "MCPSettings",
    "classify",
    "render_result",
    "tool_parameters",
]

"""A local aiohttp server and helpers for the HTTP connector's tests (127.0.0.1 only;
other host names go through a fake resolver, so nothing touches the network or DNS).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gzip
import html
import json
import urllib.parse
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from bot.engine import Tool, ToolError
from connectors.base import ConnectorContext
from connectors.http import HTTP

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


@functools.cache
def bomb_body() -> bytes:
    """20 MB of text gzipped to ≈ 20 KB on the wire; made on first use (0.15 s of CPU that
    every test process paid at import)."""
    return gzip.compress(b"a" * 20_000_000, compresslevel=9)


# A configured API key, with characters that encode differently in URLs, JSON and HTML.
API_KEY = 'sk-test/9f8e+7d6c=5b4a"<x>'


class Server:
    """A local HTTP server that records the paths it served."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> Server:
        app = web.Application(middlewares=[self._record])
        routes = [
            web.get("/json", self.json_body),
            web.get("/big-json", self.big_json),
            web.get("/text", self.text),
            web.get("/html", self.html),
            web.get("/binary", self.binary),
            web.get("/status/{code}", self.status),
            web.get("/redirect", self.redirect),
            web.post("/redirect", self.redirect),
            web.get("/slow", self.slow),
            web.get("/drip", self.drip),
            web.get("/endless", self.endless),
            web.get("/headers", self.headers),
            web.get("/set-cookie", self.set_cookie),
            web.post("/echo", self.echo),
            web.get("/empty", self.empty),
            web.get("/gzip", self.gzipped),
            web.get("/deflate", self.deflated),
            web.get("/bomb", self.bomb),
            web.get("/echo-key/{mode}", self.echo_key),
        ]
        app.add_routes(routes)
        self._runner = web.AppRunner(
            app, access_log=None, shutdown_timeout=0.5, handler_cancellation=True
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @web.middleware
    async def _record(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        self.hits.append(request.path)
        self.requests.append({"path": request.path, "headers": dict(request.headers)})
        return await handler(request)

    async def json_body(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"hello": "world", "items": [1, 2, 3], "query": dict(request.query)}
        )

    async def big_json(self, request: web.Request) -> web.Response:
        return web.json_response({"rows": [{"id": i, "name": f"row {i}"} for i in range(2000)]})

    async def text(self, request: web.Request) -> web.Response:
        return web.Response(text="plain text body\nsecond line")

    async def html(self, request: web.Request) -> web.Response:
        page = (
            "<html><head><title>Shop</title><style>body{color:red}</style></head>"
            "<body><h1>Welcome</h1><script>alert('x')</script><p>Prices &amp; offers</p>"
            "</body></html>"
        )
        return web.Response(text=page, content_type="text/html")

    async def binary(self, request: web.Request) -> web.Response:
        return web.Response(body=PNG, content_type="image/png")

    async def status(self, request: web.Request) -> web.Response:
        code = int(request.match_info["code"])
        return web.Response(status=code, text=f"details for status {code}: something went wrong")

    async def redirect(self, request: web.Request) -> web.Response:
        code = int(request.query.get("code", "302"))
        return web.Response(status=code, headers={"Location": request.query["to"]})

    async def slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(text="too late")

    async def drip(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        for _ in range(100):
            await response.write(b"x")
            await asyncio.sleep(0.1)
        return response

    async def endless(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        chunk = b"y" * 65536
        try:
            for _ in range(100_000):  # ≈ 6.5 GB: only a cap stops this in time
                await response.write(chunk)
        except (ConnectionError, RuntimeError):
            pass
        return response

    async def headers(self, request: web.Request) -> web.Response:
        return web.json_response(dict(request.headers))

    async def set_cookie(self, request: web.Request) -> web.Response:
        response = web.Response(text="cookie set")
        response.set_cookie("session", "secret-session")
        return response

    async def echo(self, request: web.Request) -> web.Response:
        body = await request.text()
        return web.json_response(
            {"content_type": request.headers.get("Content-Type"), "body": body},
            status=201,
        )

    async def empty(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def gzipped(self, request: web.Request) -> web.Response:
        body = gzip.compress(json.dumps({"compressed": True}).encode())
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        return web.Response(body=body, headers=headers)

    async def deflated(self, request: web.Request) -> web.Response:
        headers = {"Content-Encoding": "deflate", "Content-Type": "text/plain"}
        return web.Response(body=zlib.compress(b"deflated text"), headers=headers)

    async def bomb(self, request: web.Request) -> web.Response:
        headers = {"Content-Encoding": "gzip", "Content-Type": "text/plain"}
        return web.Response(body=bomb_body(), headers=headers)

    async def echo_key(self, request: web.Request) -> web.Response:
        """Echoes the X-Api-Key it was sent, the way careless or hostile servers do."""
        key = request.headers.get("X-Api-Key", "")
        quoted = urllib.parse.quote(key, safe="")
        mode = request.match_info["mode"]
        if mode == "json":
            return web.json_response(
                {"key": key, "next": f"https://x.test/?k={quoted}", "as_text": json.dumps(key)}
            )
        if mode == "text":  # JSON-escaped and URL-encoded, not parsed as JSON
            text = f"raw={key} json={json.dumps(key)} url={quoted} form="
            return web.Response(text=text + urllib.parse.quote_plus(key))
        if mode == "html":
            entities = "".join(f"&#{ord(char)};" for char in key)
            split = f"<b>{html.escape(key[:4])}</b>{html.escape(key[4:])}"
            page = f"<html><body><p>key: {entities}</p><p>again {split}</p>"
            return web.Response(text=page + "</body></html>", content_type="text/html")
        if mode == "header":
            return web.Response(text="ok", headers={"Content-Type": f"text/plain; key={quoted}"})
        if mode == "redirect":
            return web.Response(status=302, headers={"Location": f"/json?key={quoted}"})
        if mode == "error":
            return web.Response(status=403, text=f"key {key} is not valid here")
        if mode == "padded":  # the key right where max_response_bytes cuts the body
            pad = int(request.query["pad"])
            return web.Response(text="." * pad + key + " and more")
        raise web.HTTPNotFound()


class FakeResolver:
    """Answers from a table; records what was asked."""

    def __init__(self, table: dict[str, list[list[str]] | list[str]]) -> None:
        self.table = table
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        answer = self.table.get(host)
        if answer is None:
            raise OSError(f"fake resolver: unknown host {host}")
        if answer and isinstance(answer[0], list):  # successive answers
            index = min(self.calls.count(host) - 1, len(answer) - 1)
            return list(answer[index])
        return list(answer)  # type: ignore[arg-type]


Factory = Callable[..., Awaitable[HTTP]]


Factory = Callable[..., Awaitable[HTTP]]


@contextlib.asynccontextmanager
async def connectors() -> AsyncIterator[Factory]:
    """Builds started HTTP connectors (optionally with a fake resolver), closed on exit."""
    made: list[HTTP] = []

    async def build(allowed: list[str] | str, resolver: Any = None, **settings: Any) -> HTTP:
        connector = HTTP(HTTP.Settings(allowed_hosts=allowed, **settings), ConnectorContext())
        if resolver is not None:
            connector.policy.resolver = resolver
        await connector.start()
        made.append(connector)
        return connector

    try:
        yield build
    finally:
        for connector in made:
            await connector.aclose()


@functools.cache
def tools_of(connector: HTTP) -> dict[str, Tool]:
    return {tool.name: tool for tool in connector.tools()}


async def get(connector: HTTP, url: str, **arguments: Any) -> str:
    result = await tools_of(connector)["http_get"].handler(url=url, **arguments)
    assert isinstance(result, str)
    return result


async def post(connector: HTTP, url: str, **arguments: Any) -> str:
    result = await tools_of(connector)["http_post"].handler(url=url, **arguments)
    assert isinstance(result, str)
    return result


async def refused_get(connector: HTTP, url: str, **arguments: Any) -> str:
    with pytest.raises(ToolError) as caught:
        await get(connector, url, **arguments)
    return str(caught.value)


def exact(server: Server) -> list[str]:
    return [f"127.0.0.1:{server.port}"]

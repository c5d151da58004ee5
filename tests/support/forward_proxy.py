"""A forward HTTP proxy on 127.0.0.1, as a company's egress proxy behaves, and TLS fakes.

``ForwardProxy`` speaks the two forms RFC 9110/9112 give a client of a proxy:

- ``CONNECT host:port``: answered ``200 Connection established``, then bytes are piped
  both ways (the client's TLS runs inside, end to end with the target);
- absolute form, ``GET http://host:port/path HTTP/1.1``: the request is sent on to the
  target in origin form with ``Connection: close``, and the answer piped back (so a
  proxied plain-HTTP connection carries one exchange; clients see ``Connection: close``
  and do not reuse it).

Names are resolved only here (``hosts``: a name to the address it stands for, the port
kept), so a client that bypassed the proxy would fail to resolve them: the ``.test``
names never resolve anywhere else. ``credentials`` (``user:password``) makes the proxy
answer 407 to any request without matching ``Proxy-Authorization: Basic``. A name it does
not know is answered 502, as a proxy whose DNS fails answers.

``seen`` records what each client asked: ``("CONNECT", "host:port")`` or
``("POST", "http://host:port/path")``.

``TestAuthority`` (trustme) signs certificates for names; ``serve_tls`` serves an aiohttp
app over TLS with one of them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import trustme
from aiohttp import web

HEAD_LIMIT = 64 * 1024


@dataclass
class ForwardProxy:
    hosts: Mapping[str, str]
    credentials: str | None = None
    seen: list[tuple[str, str]] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url_with(self, credentials: str) -> str:
        return f"http://{credentials}@127.0.0.1:{self.port}"

    async def __aenter__(self) -> ForwardProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def connects(self) -> list[str]:
        return [target for method, target in self.seen if method == "CONNECT"]

    def forwarded(self) -> list[str]:
        return [target for method, target in self.seen if method != "CONNECT"]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._one(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            # Stopped by __aexit__ with a tunnel still open: end quietly (Python 3.11's
            # stream callback would log a CancelledError raised out of here).
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")[:-2]
        method, target, _version = lines[0].split(" ", 2)
        headers = [line.split(":", 1) for line in lines[1:]]
        named = {name.strip().lower(): value.strip() for name, value in headers}
        self.seen.append((method, target))
        if self.credentials is not None and not self._authorised(named):
            self.refused.append(407)
            await _answer(
                writer,
                "407 Proxy Authentication Required",
                'Proxy-Authenticate: Basic realm="corp"',
            )
            return
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            upstream = await self._upstream(host, int(port), writer)
            if upstream is None:
                return
            upstream_reader, upstream_writer = upstream
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await _pipe_both(reader, writer, upstream_reader, upstream_writer)
            return
        await self._forward(method, target, headers, reader, writer)

    async def _upstream(
        self, host: str, port: int, writer: asyncio.StreamWriter
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to ``host``, or None once the client was told 502 (a name this
        proxy cannot resolve, or nothing listening there, as a real proxy answers)."""
        address = self.hosts.get(host)
        upstream = None if address is None else await _open(address, port)
        if upstream is None:
            self.refused.append(502)
            await _answer(writer, "502 Bad Gateway")
        return upstream

    def _authorised(self, headers: Mapping[str, str]) -> bool:
        assert self.credentials is not None
        expected = "Basic " + base64.b64encode(self.credentials.encode()).decode()
        return headers.get("proxy-authorization") == expected

    async def _forward(
        self,
        method: str,
        target: str,
        headers: list[list[str]],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        if not target.startswith("http://"):
            self.refused.append(400)
            await _answer(writer, "400 Bad Request")  # origin form: not a proxy request
            return
        authority, _, path = target.removeprefix("http://").partition("/")
        host, _, port = authority.rpartition(":") if ":" in authority else (authority, "", "80")
        upstream = await self._upstream(host, int(port), writer)
        if upstream is None:
            return
        upstream_reader, upstream_writer = upstream
        kept = [
            f"{name}:{value}"
            for name, value in headers
            if name.strip().lower() not in ("proxy-authorization", "proxy-connection", "connection")
        ]
        upstream_writer.write(
            "\r\n".join([f"{method} /{path} HTTP/1.1", *kept, "Connection: close", "", ""]).encode(
                "latin-1"
            )
        )
        await _pipe_both(reader, writer, upstream_reader, upstream_writer)


async def _open(
    address: str, port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    try:
        return await asyncio.open_connection(address, port)
    except OSError:
        return None


async def _answer(writer: asyncio.StreamWriter, status: str, *extra: str) -> None:
    head = [f"HTTP/1.1 {status}", "Content-Length: 0", "Connection: close", *extra, "", ""]
    writer.write("\r\n".join(head).encode())
    await writer.drain()


async def _pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream_writer: asyncio.StreamWriter,
) -> None:
    try:
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
    finally:
        upstream_writer.close()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()
    except ConnectionError:
        pass
    finally:
        # The other side ends when this one does (a half-close would keep TLS sessions up).
        with contextlib.suppress(Exception):
            sink.close()


class TestAuthority:
    """A test CA (trustme) and the PEM file a client is told to trust."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    def __init__(self, folder: Path) -> None:
        self.ca = trustme.CA()
        self.pem = folder / "company-ca.pem"
        self.ca.cert_pem.write_to_path(str(self.pem))

    def server_context(self, *names: str) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert(*names).configure_cert(context)
        return context


@dataclass
class TlsSite:
    runner: web.AppRunner
    port: int

    async def stop(self) -> None:
        await self.runner.cleanup()


async def serve_tls(app: web.Application, context: ssl.SSLContext) -> TlsSite:
    """``app`` over TLS on 127.0.0.1 at a free port."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    return TlsSite(runner, port)

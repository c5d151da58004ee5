"""aiohttp apps served on 127.0.0.1 at a free port: test servers, and the fakes' base."""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Self

from aiohttp import web

from bot.serving import start_site

HOST = "127.0.0.1"


def free_port() -> int:
    """A port nothing listens on right now (for servers that must be told one)."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class Served:
    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def stop(self) -> None:
        await self.runner.cleanup()


async def serve(app: web.Application, **runner_options: Any) -> Served:
    """Start ``app`` on 127.0.0.1 at a free port; ``runner_options`` go to its AppRunner.

    As ``larkgate serve`` serves it (``bot.serving``)."""
    runner = web.AppRunner(app, **runner_options)
    await runner.setup()
    await start_site(runner, HOST, 0)
    host, port = runner.addresses[0][:2]
    return Served(runner, host, port)


@asynccontextmanager
async def serving(app: web.Application, **runner_options: Any) -> AsyncIterator[Served]:
    """``serve(app)`` for the block, cleaned up after it."""
    served = await serve(app, **runner_options)
    try:
        yield served
    finally:
        await served.stop()


class AppServer:
    """A fake that serves its own aiohttp app: ``start``/``stop`` or ``async with``.

    Subclasses build the app in ``make_app``; ``url`` is its address (``port`` is None
    until started, and kept after a stop, as a client may still hold it).
    """

    _served: Served | None = None
    port: int | None = None
    # Why there is no address yet, for the error before a start.
    not_started = "is not started"
    # Served over TLS with this server context, under this name in ``url`` (a name only
    # a proxy resolves: tests/support/forward_proxy.py); set before ``start``.
    tls: ssl.SSLContext | None = None
    name: str = HOST

    def make_app(self) -> web.Application:
        raise NotImplementedError

    async def start(self) -> Self:
        if self.tls is None:
            self._served = await serve(self.make_app(), access_log=None, shutdown_timeout=1.0)
        else:
            runner = web.AppRunner(self.make_app(), access_log=None, shutdown_timeout=1.0)
            await runner.setup()
            await web.TCPSite(runner, HOST, 0, ssl_context=self.tls).start()
            self._served = Served(runner, HOST, runner.addresses[0][1])
        self.port = self._served.port
        return self

    async def stop(self) -> None:
        if self._served is not None:
            await self._served.stop()
            self._served = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``; RuntimeError before the fake was started."""
        if self.port is None:
            raise RuntimeError(f"{type(self).__name__} {self.not_started}")
        return f"{'https' if self.tls else 'http'}://{self.name}:{self.port}"

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

"""Serving the app on aiohttp's runner, on the event loop ``larkgate serve`` chose.

``serve`` is ``web.run_app`` on a given loop: the same signals stop it (SIGINT,
SIGTERM), the same graceful shutdown (the sites stop, the app's shutdown and cleanup
run within ``shutdown_timeout``), the same cancellation of what is left. ``start_site``
is the site for a runner that is set up, for whoever runs its own loop (``larkgate
dev``, the tests).
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from aiohttp import web


async def start_site(
    runner: web.AppRunner,
    host: str | None = None,
    port: int = 0,
    *,
    sock: socket.socket | None = None,
) -> web.BaseSite:
    """A started site for `runner` on `host` and `port`, or on the bound `sock`."""
    site: web.BaseSite = (
        web.SockSite(runner, sock) if sock is not None else web.TCPSite(runner, host, port)
    )
    await site.start()
    return site


def serve(
    app: web.Application,
    *,
    host: str,
    port: int,
    shutdown_timeout: float,
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Serve `app` on `loop` until SIGINT or SIGTERM, then shut down gracefully."""
    asyncio.set_event_loop(loop)
    main = loop.create_task(_serve(app, host, port, shutdown_timeout))
    try:
        loop.run_until_complete(main)
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    finally:
        try:
            _cancel(loop, {main})  # its cleanup runs the app's shutdown
            _cancel(loop, asyncio.all_tasks(loop))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


async def _serve(app: web.Application, host: str, port: int, shutdown_timeout: float) -> None:
    runner = web.AppRunner(
        app, access_log=None, handle_signals=True, shutdown_timeout=shutdown_timeout
    )
    await runner.setup()
    try:
        await start_site(runner, host, port)
        await asyncio.Event().wait()  # until a signal ends the loop's run
    finally:
        await runner.cleanup()


def _cancel(loop: asyncio.AbstractEventLoop, tasks: set[asyncio.Task[Any]]) -> None:
    pending = {task for task in tasks if not task.done()}
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    for task in pending:
        if task.cancelled():
            continue
        error = task.exception()
        if error is not None and not isinstance(error, web.GracefulExit):
            loop.call_exception_handler(
                {"message": "unhandled exception during shutdown", "exception": error, "task": task}
            )

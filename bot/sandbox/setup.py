"""The "Connect a real Feishu app" panel of ``larkgate dev``'s page: ``larkgate setup``'s
one scan run in the background of the dev server, its state for the page to poll.

It is :func:`bot.onboarding.onboard`, the path the terminal command takes (register →
check → write), with this panel as its display: the accounts hosts from
``FEISHU_ACCOUNTS_URL`` / ``LARK_ACCOUNTS_URL``, the same checks, the same env file
written the same way (the long connection, ``FEISHU_EVENT_MODE=ws``), the same messages
when it fails. One registration at a time: starting while one runs gives the running one.

The states, as JSON (``GET /api/setup``)::

    {"state": "idle"}
    {"state": "starting", "lark"}                 asking the accounts host for a link
    {"state": "waiting", "url", "qr_svg", "expires_in", "lark", "note"}
    {"state": "checking", "app_id"}               confirmed; its credentials are checked
    {"state": "done", "app_id", "bot_name", "env_file", "written", "admin", "next",
     "message"}
    {"state": "failed", "message"}

``url`` carries the one-time code: it is in these answers only, never logged; the app
secret and the device code are in neither (``written`` names the keys, not their values).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bot.onboarding import NewApp, Options, SetupFailed, onboard

logger = logging.getLogger(__name__)

RESTART = (
    "Stop larkgate dev (Ctrl+C) and restart with larkgate serve: the bot then runs as this "
    "app in Feishu."
)


class SetupPanel:
    """``larkgate setup`` for the page: ``start`` it, read ``state()``, ``close`` at the end.

    ``environ`` is where the accounts hosts and the other settings are read, as setup reads
    them (by default the process environment at each start); ``env_file`` is written.
    """

    def __init__(self, env_file: Path, environ: Mapping[str, str] | None = None) -> None:
        self.env_file = env_file
        self._environ = environ
        self._state: dict[str, Any] = {"state": "idle"}
        self._expires_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()  # set, then replaced, at each change of state

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def state(self) -> dict[str, Any]:
        state = dict(self._state)
        if state["state"] == "waiting":
            state["expires_in"] = max(0, round(self._expires_at - time.monotonic()))
        return state

    def start(self, *, lark: bool = False) -> bool:
        """Start a registration, unless one runs (False then: the running one goes on)."""
        if self.running:
            return False
        environ = dict(os.environ if self._environ is None else self._environ)
        options = Options(self.env_file, webhook=None, lark=lark)
        self._set({"state": "starting", "lark": lark})
        self._task = asyncio.create_task(self._run(options, environ), name="larkgate-setup")
        logger.info("setup: a one-scan registration started from the page")
        return True

    async def settled(self, within: float) -> dict[str, Any]:
        """The state once past ``starting`` (the link is there, or it failed), or after
        ``within`` seconds whatever it is."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                while self._state["state"] == "starting":
                    await self._changed.wait()
        return self.state()

    async def close(self) -> None:
        """Stop a running registration (the dev server stops): nothing is written."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- the display of onboard ---------------------------------------------------------

    def link(self, url: str, expire_in: int, *, lark: bool) -> None:
        svg = qr_svg(url)
        self._expires_at = time.monotonic() + expire_in
        self._set(
            {
                "state": "waiting",
                "url": url,
                "qr_svg": svg,
                "expires_in": expire_in,
                "lark": lark,
                "note": None,
            }
        )
        # The link carries the one-time code: on the page only.
        logger.info("setup: the registration link is on the page (for %d s)", expire_in)

    def say(self, text: str) -> None:
        if self._state["state"] == "waiting":
            self._set({**self._state, "note": text})

    def created(self, app: NewApp) -> None:
        self._set({"state": "checking", "app_id": app.app_id})

    # -----------------------------------------------------------------------------------

    async def _run(self, options: Options, environ: Mapping[str, str]) -> None:
        try:
            outcome = await onboard(options, environ, self)
        except SetupFailed as exc:
            logger.warning("setup: %s", exc)
            self._set({"state": "failed", "message": str(exc)})
            return
        except Exception as exc:  # a bug: said on the page, not left as "waiting" forever
            logger.exception("setup: the registration stopped")
            message = f"setup stopped unexpectedly ({type(exc).__name__}); nothing was written"
            self._set({"state": "failed", "message": message})
            return
        env_file = str(outcome.env_file)
        logger.info("setup: app %s written to %s", outcome.app.app_id, env_file)
        self._set(
            {
                "state": "done",
                "app_id": outcome.app.app_id,
                "bot_name": outcome.bot.app_name,
                "env_file": env_file,
                "written": list(outcome.values),  # the keys only
                "admin": outcome.values.get("LARKGATE_ADMINS"),
                "next": list(outcome.next_steps),
                "message": RESTART,
            }
        )

    def _set(self, state: dict[str, Any]) -> None:
        self._state = state
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


def qr_svg(url: str) -> str:
    """``url`` as a QR code in inline SVG, as the terminal's is made (the lowest error
    level: the link is long), black on white whatever the page's colours, and a viewBox
    in place of a size: the page sizes it."""
    import segno

    return segno.make(url, error="l", boost_error=False).svg_inline(
        omitsize=True,
        border=4,
        dark="#000",
        light="#fff",
        title="QR code of the registration link",
        svgclass="qr",
        lineclass=None,
    )

"""The OAuth callback route's wire side: read the query, answer a small HTML page.

``GET /feishu/oauth/callback?code=&state=`` (or ``?error=access_denied&state=``) is where
Feishu's consent page sends the person's browser. What to do with it is the caller's
(``complete``, in governance); this only bounds what it reads and renders the answer. The
page holds no link and no script, is never cached, and sends no referrer (the URL it was
opened with carries a code).
"""

from __future__ import annotations

import html
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

logger = logging.getLogger(__name__)

# Feishu's codes and our states are far shorter; anything longer is not theirs.
MAX_CODE_CHARS = 512
MAX_STATE_CHARS = 1024
MAX_ERROR_CHARS = 100

_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
}


@dataclass(frozen=True, slots=True)
class CallbackQuery:
    code: str
    state: str
    error: str = ""


@dataclass(frozen=True, slots=True)
class CallbackPage:
    status: int
    title: str
    message: str


Complete = Callable[[CallbackQuery], Awaitable[CallbackPage]]

TOO_LONG = CallbackPage(400, "This link is not valid", "It is not a link this bot made.")
BROKEN = CallbackPage(
    500, "Something went wrong", "Nothing was stored. Ask again in Feishu in a minute."
)


def oauth_callback_handler(complete: Complete) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        query = request.query
        code, state = query.get("code", ""), query.get("state", "")
        error = query.get("error", "")
        if (
            len(code) > MAX_CODE_CHARS
            or len(state) > MAX_STATE_CHARS
            or len(error) > MAX_ERROR_CHARS
        ):
            return render(TOO_LONG)
        try:
            page = await complete(CallbackQuery(code=code, state=state, error=error))
        except Exception:
            logger.exception("the OAuth callback failed")
            page = BROKEN
        return render(page)

    return handle


def render(page: CallbackPage) -> web.Response:
    title, message = html.escape(page.title), html.escape(page.message)
    body = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width">'
        f"<title>{title}</title><style>body{{font:16px/1.5 system-ui,sans-serif;"
        "max-width:32em;margin:4em auto;padding:0 1em}</style></head>"
        f"<body><h1>{title}</h1><p>{message}</p></body></html>"
    )
    return web.Response(text=body, status=page.status, content_type="text/html", headers=_HEADERS)

"""Per-user authorisation in tests: a connector that acts as the asker, a model that calls
it, and a browser that follows an authorisation card's link through the emulator's OAuth."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any, ClassVar

import aiohttp
from cryptography.fernet import Fernet
from lark_oapi.api.authen.v1 import GetUserInfoRequest

from connectors.base import Connector, ToolError, action

from fakes.openai_server import Reply
from support.cards import nodes
from support.model_calls import is_synthesis

TOKEN_KEY = Fernet.generate_key().decode()
PUBLIC_URL = "https://bot.example.com"
WHO_SCOPES = ("contact:user.base:readonly",)
NOTE_SCOPES = ("task:task:write",)


class AsMe(Connector):
    """Two actions that call Feishu as the asker: ``my_name`` reads their own profile
    (``authen/v1/user_info``, which takes only a user token), ``note_as_me`` stands in for
    a write (it reads the profile too, and says what it would write as whom)."""

    name = "asme"
    calls: ClassVar[list[str]] = []  # the access tokens each call was given (to prove whose)

    @action(side_effect="read", acts_as="user", scopes=WHO_SCOPES)
    async def my_name(self) -> str:
        """Tell the asking person's own Feishu name."""
        return await self._as_user(WHO_SCOPES, "tell you your own Feishu name")

    @action(side_effect="write", acts_as="user", scopes=NOTE_SCOPES)
    async def note_as_me(self, text: str) -> str:
        """Write a note in the asking person's name."""
        name = await self._as_user(NOTE_SCOPES, "write a note as you")
        return f"noted {text!r} as {name}"

    async def _as_user(self, scopes: tuple[str, ...], purpose: str) -> str:
        feishu, source = self.context.feishu, self.context.user_tokens
        if feishu is None or source is None:
            raise ToolError("per-user authorisation is off")

        async def call(access_token: str) -> str:
            AsMe.calls.append(access_token)
            request = GetUserInfoRequest.builder().build()
            body = await feishu.call_as_user("authen.user_info", request, access_token)
            return str(body["data"]["name"])

        return await source.as_user(scopes, purpose, call)


def calling(tool: str, arguments: dict[str, Any] | None = None, times: int = 1) -> Callable:
    """A model that calls ``tool`` ``times`` times, then answers with what it saw."""

    def handler(body: dict[str, Any]) -> Reply:
        observations = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if is_synthesis(body):
            return Reply(content="Result: " + body["messages"][-1]["content"][-600:])
        if len(observations) < times:
            return Reply(tool_calls=[(f"c{len(observations)}", tool, arguments or {})])
        return Reply(content="done: " + " | ".join(observations))

    return handler


def card_link(card: dict[str, Any]) -> str:
    """The URL an authorisation card's button opens."""
    (url,) = [
        behavior["default_url"]
        for node in nodes(card)
        for behavior in node.get("behaviors") or []
        if behavior.get("type") == "open_url"
    ]
    return str(url)


async def follow(link: str, bot_url: str, *, as_user: str | None = None) -> tuple[int, str, str]:
    """Open ``link`` as a browser signed in to Feishu as ``as_user`` would: Feishu's consent
    page redirects to the public callback, which reaches the bot at ``bot_url``. Returns the
    bot's status, page text and the callback URL it was sent to."""
    if as_user:
        link += "&" + urllib.parse.urlencode({"as_user": as_user})
    async with aiohttp.ClientSession() as session:
        async with session.get(link, allow_redirects=False) as consent:
            assert consent.status == 302, await consent.text()
            back = consent.headers["Location"]
        assert back.startswith(PUBLIC_URL + "/feishu/oauth/callback?")
        async with session.get(bot_url + back[len(PUBLIC_URL) :]) as page:
            return page.status, await page.text(), back


async def open_page(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as page:
        return page.status, await page.text()

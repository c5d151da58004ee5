"""The chat page and the small JSON API it uses.

GET  /                 the page (one HTML file, inline CSS and JS)
GET  /api/config       the people, the chats and the bot
GET  /api/transcript?chat=<dm|group>&user=<key>&after=<revision>
                       the chat's messages; waits (long poll, up to 20 s) until the
                       emulator's revision differs from ``after``
POST /api/messages     ``{user, chat, text, mention}``: pushes a signed, encrypted
                       ``im.message.receive_v1`` to the bot's ``/feishu/events``
POST /api/attachments  multipart ``user``, ``chat``, ``mention``, ``text`` (a caption) and
                       ``file`` (up to ``upload_limit``, else 413): seeds the image, post or
                       file message (:mod:`.attachments`) with its bytes in the emulator,
                       then pushes it like a text message
GET  /api/resource/<message_id>/<key>
                       a file of a message, a person's or the bot's (:mod:`.files`): an
                       image as its type, anything else as an attachment
POST /api/click        ``{user, message_id, value}``: pushes a signed
                       ``card.action.trigger`` to ``/feishu/card``, applies the card it
                       answers and returns the toast. ``{user, message_id, form_value,
                       button}`` submits the message's card's form instead, as Feishu's
                       client does (:mod:`.emulator.clicks`): the submit button (the one
                       labelled ``button``, else the only one) sends its value and name and
                       every input by name; what Feishu's client would not send (an unknown
                       input, a required one empty, one too long) is a 400 saying why
POST /api/open         ``{user, url}``: opens a card's link (an emulator page only) as that
                       person's browser signed in to Feishu would: the emulator's consent
                       or verification page, then wherever it redirects (the bot's OAuth
                       callback); returns the status and the page's title
POST /api/setup        ``{lark}`` (optional): the "Connect a real Feishu app" panel starts
                       ``larkgate setup``'s one scan in the background (:mod:`.setup`; one
                       at a time: while one runs, its state is the answer), waits a moment
                       for the link, and answers the state; refused (403) from another
                       page's origin
GET  /api/setup        the registration's state: idle, starting, waiting (the link, its
                       QR code as SVG, the seconds left), checking, done (the app, the env
                       file written, what is left to do) or failed (why)

The page server listens on 127.0.0.1 unless ``--host`` says otherwise, and that is what
keeps other machines out; no route asks for a token. On loopback it answers only requests
addressed to loopback (``Host``), so a web page whose name was rebound to 127.0.0.1 gets
nothing. ``POST /api/setup``, which writes
an app's secret into the env file, also refuses a browser's request from another origin
(a page elsewhere posting to localhost).
"""

from __future__ import annotations

import html
import json
import re
import uuid
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp import web
from yarl import URL

from .attachments import UPLOAD_LIMIT, Outgoing, attachment_messages, read_upload, text_message
from .emulator import FakeFeishu
from .emulator.clicks import ClickRefused, form_submission, shown_card
from .files import file_response, stored_file
from .people import BOT_NAME, BOT_OPEN_ID, GROUP_CHAT_ID, PEOPLE, Person, chat_of
from .push import card_action_event, message_event, signed_request
from .setup import SetupPanel
from .transcript import transcript

LONG_POLL_SECONDS = 20.0
SETUP_LINK_WAIT_SECONDS = 10.0  # POST /api/setup waits this long for the link
# The heading (or first paragraph) of a page the bot or the emulator answers a link with.
_TITLE = re.compile(r"<(?:h1|p)>(.*?)</(?:h1|p)>", re.S)
GROUP_FILE_NOTE = "In the group the bot reads the file with your next message that mentions it."


@dataclass
class BotEndpoint:
    """Where the bot listens and the secrets Feishu shares with it."""

    url: str
    verification_token: str
    encrypt_key: str


class ChatPage:
    def __init__(
        self, emulator: FakeFeishu, bot: BotEndpoint, model: str, *, env_file: Path
    ) -> None:
        self._emulator = emulator
        self._bot = bot
        self._model = model
        self._session: aiohttp.ClientSession | None = None
        self._setup = SetupPanel(env_file)

    def app(self, *, host: str = "127.0.0.1") -> web.Application:
        """The page's routes; served on ``host`` (a loopback address: only requests that
        name one in their Host header are answered, see :func:`_loopback_only`)."""
        app = web.Application(middlewares=[_loopback_only] if _is_loopback(host) else [])
        app.router.add_get("/", self._index)
        app.router.add_get("/api/config", self._config)
        app.router.add_get("/api/transcript", self._transcript)
        app.router.add_post("/api/messages", self._send)
        app.router.add_post("/api/click", self._click)
        app.router.add_post("/api/open", self._open)
        app.router.add_post("/api/attachments", self._attach)
        app.router.add_get("/api/resource/{message_id}/{key}", self._resource)
        app.router.add_get("/api/setup", self._setup_state)
        app.router.add_post("/api/setup", self._setup_start)
        app.cleanup_ctx.append(self._http)
        return app

    async def _http(self, app: web.Application):
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            self._session = session
            try:
                yield
            finally:
                await self._setup.close()  # a registration still waiting writes nothing
        self._session = None

    # -- routes -------------------------------------------------------------------

    async def _index(self, request: web.Request) -> web.Response:
        html = resources.files(__package__).joinpath("static/index.html").read_text("utf-8")
        return web.Response(text=html, content_type="text/html", charset="utf-8")

    async def _config(self, request: web.Request) -> web.Response:
        people = [
            {"key": p.key, "name": p.name, "open_id": p.open_id, "admin": p.admin}
            for p in PEOPLE.values()
        ]
        return web.json_response(
            {
                "bot": {"name": BOT_NAME, "open_id": BOT_OPEN_ID, "model": self._model},
                "people": people,
                "upload_limit": UPLOAD_LIMIT,
                "chats": [
                    {"key": "dm", "name": "Direct message with the bot"},
                    {"key": "group", "name": "Group chat", "chat_id": GROUP_CHAT_ID},
                ],
            }
        )

    async def _transcript(self, request: web.Request) -> web.Response:
        person = _person(request.query.get("user"))
        chat_id, _ = chat_of(person, request.query.get("chat", "dm"))
        try:
            after = int(request.query.get("after", "-1"))
        except ValueError:
            raise web.HTTPBadRequest(text="after must be a whole number") from None
        revision = self._emulator.revision
        if after == revision:
            revision = await self._emulator.wait_for_change(after, LONG_POLL_SECONDS)
        return web.json_response(
            {
                "revision": revision,
                "chat_id": chat_id,
                "messages": transcript(self._emulator, chat_id),
            }
        )

    async def _send(self, request: web.Request) -> web.Response:
        body = await _json(request)
        person = _person(body.get("user"))
        text = str(body.get("text") or "").strip()
        if not text:
            raise web.HTTPBadRequest(text="text is empty")
        chat_id, chat_type = chat_of(person, str(body.get("chat") or "dm"))
        mention = chat_type == "group" and bool(body.get("mention", True))
        message_id, status, answer = await self._deliver(
            person, chat_id, chat_type, text_message(text, mention=mention)
        )
        return web.json_response(
            {"message_id": message_id, "chat_id": chat_id, "status": status, "answer": answer}
        )

    async def _attach(self, request: web.Request) -> web.Response:
        upload = await read_upload(request)
        person = _person(upload.fields.get("user"))
        chat_id, chat_type = chat_of(person, upload.fields.get("chat") or "dm")
        mention = chat_type == "group" and upload.fields.get("mention", "true") == "true"
        caption = upload.fields.get("text", "").strip()
        sent = attachment_messages(upload, caption=caption, mention=mention)
        delivered = [await self._deliver(person, chat_id, chat_type, one) for one in sent]
        refused = [(status, answer) for _, status, answer in delivered if status != 200]
        status, answer = refused[0] if refused else delivered[-1][1:]
        waits = chat_type == "group" and sent[0].message_type == "file" and not caption
        return web.json_response(
            {
                "message_ids": [message_id for message_id, _, _ in delivered],
                "message_types": [one.message_type for one in sent],
                "chat_id": chat_id,
                "status": status,
                "answer": answer,
                "note": GROUP_FILE_NOTE if waits else None,
            }
        )

    async def _resource(self, request: web.Request) -> web.Response:
        message_id, key = request.match_info["message_id"], request.match_info["key"]
        stored = stored_file(self._emulator, message_id, key)
        if stored is None:
            raise web.HTTPNotFound(text=f"message {message_id} carries no file {key}")
        return file_response(stored)

    async def _click(self, request: web.Request) -> web.Response:
        body = await _json(request)
        person = _person(body.get("user"))
        message = self._emulator.message_by_id.get(str(body.get("message_id") or ""))
        value = body.get("value")
        form_value = body.get("form_value")
        name = None
        if message is not None and isinstance(form_value, dict):
            card = shown_card(self._emulator, message.message_id)
            button = body.get("button")
            try:
                if card is None:
                    raise ClickRefused("the message is not a card")
                submitted = form_submission(
                    card, form_value, button=button if isinstance(button, str) else None
                )
            except ClickRefused as refused:
                raise web.HTTPBadRequest(text=f"Feishu would not send this: {refused}") from None
            value, name, form_value = submitted.value, submitted.name, submitted.form_value
        elif message is None or not isinstance(value, dict) or form_value is not None:
            raise web.HTTPBadRequest(
                text="an existing message_id and a value object (or a form_value object) are needed"
            )
        envelope = card_action_event(
            verification_token=self._bot.verification_token,
            value=value,
            operator_open_id=person.open_id,
            open_message_id=message.message_id,
            open_chat_id=message.chat_id,
            app_id=self._emulator.app_id,
            name=name,
            form_value=form_value,
        )
        status, answer = await self._push("/feishu/card", envelope)
        card = answer.get("card") if isinstance(answer, dict) else None
        if isinstance(card, dict) and card.get("type") == "raw" and isinstance(card["data"], dict):
            # Feishu shows the card a callback answers with in place of the clicked one.
            entity = self._emulator.cards.get(message.card_id) if message.card_id else None
            if entity is not None:
                entity.card = card["data"]
            else:
                message.history.append(message.content)
                message.content = card["data"]
            self._emulator.touch()
        toast = answer.get("toast") if isinstance(answer, dict) else None
        return web.json_response({"status": status, "toast": toast})

    async def _open(self, request: web.Request) -> web.Response:
        body = await _json(request)
        person = _person(body.get("user"))
        url = str(body.get("url") or "")
        if not url.startswith(self._emulator.domain + "/"):
            # Only the emulator's pages: the page server is no proxy to anywhere else.
            raise web.HTTPBadRequest(text="the sandbox opens only the emulator's pages")
        link = f"{url}{'&' if '?' in url else '?'}{urlencode({'as_user': person.open_id})}"
        assert self._session is not None
        async with self._session.get(link, max_redirects=3) as page:
            text = await page.text()
            status = page.status
        found = _TITLE.search(text)
        title = html.unescape(found.group(1)) if found else text[:200]
        return web.json_response({"status": status, "title": title})

    async def _setup_state(self, request: web.Request) -> web.Response:
        return web.json_response(self._setup.state())

    async def _setup_start(self, request: web.Request) -> web.Response:
        _same_origin(request)
        body = await _json(request) if await request.read() else {}
        self._setup.start(lark=body.get("lark") is True)
        return web.json_response(await self._setup.settled(SETUP_LINK_WAIT_SECONDS))

    async def _deliver(
        self, person: Person, chat_id: str, chat_type: str, outgoing: Outgoing
    ) -> tuple[str, int, Any]:
        """Seed the message (and its files) as the person's, then push it to the bot."""
        message_id = f"om_sandbox_{uuid.uuid4().hex[:20]}"
        envelope = message_event(
            message_id=message_id,
            chat_id=chat_id,
            chat_type=chat_type,
            content=outgoing.content,
            message_type=outgoing.message_type,
            sender_open_id=person.open_id,
            mentions=outgoing.mentions,
            verification_token=self._bot.verification_token,
            app_id=self._emulator.app_id,
        )
        seeded = self._emulator.add_event_message(envelope)
        seeded.mentions = envelope["event"]["message"].get("mentions", [])
        for file in outgoing.files:  # there before the push: the bot downloads them at once
            self._emulator.add_resource(
                message_id,
                file.key,
                file.data,
                kind=file.kind,
                content_type=file.content_type,
                file_name=file.file_name,
            )
        self._emulator.touch()
        status, answer = await self._push("/feishu/events", envelope)
        return message_id, status, answer

    async def _push(self, path: str, envelope: dict[str, Any]) -> tuple[int, Any]:
        assert self._session is not None
        body, headers = signed_request(envelope, encrypt_key=self._bot.encrypt_key)
        async with self._session.post(self._bot.url + path, data=body, headers=headers) as resp:
            text = await resp.text()
        try:
            return resp.status, json.loads(text) if text else {}
        except ValueError:
            return resp.status, {"raw": text}


def _person(key: object) -> Person:
    person = PEOPLE.get(str(key or "user"))
    if person is None:
        raise web.HTTPBadRequest(text=f"unknown user {key!r}; one of {', '.join(PEOPLE)}")
    return person


_LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


def _is_loopback(host: str) -> bool:
    return host.strip("[]").lower() in _LOOPBACK_NAMES or host.startswith("127.")


@web.middleware
async def _loopback_only(request: web.Request, handler: Any) -> web.StreamResponse:
    """DNS rebinding: a page elsewhere whose name now points at 127.0.0.1 reaches this
    server as the same origin as itself, so the Origin check cannot tell it apart; the Host
    header it sends still names its own domain. A page served on loopback answers only
    requests addressed to loopback."""
    try:
        name = URL(f"http://{request.host}").host or ""
    except ValueError:  # not a host at all
        name = ""
    if not _is_loopback(name):
        raise web.HTTPMisdirectedRequest(text="this sandbox answers only on 127.0.0.1 / localhost")
    return await handler(request)


def _same_origin(request: web.Request) -> None:
    """A browser says where a POST comes from: only this page's own origin may start a
    registration (a request without Origin is no browser's cross-site one)."""
    origin = request.headers.get("Origin")
    if origin is not None and origin != f"{request.scheme}://{request.host}":
        raise web.HTTPForbidden(text="only the sandbox's own page may do this")


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise web.HTTPBadRequest(text="the body must be JSON") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="the body must be a JSON object")
    return body

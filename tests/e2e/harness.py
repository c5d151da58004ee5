"""Run the real app against the fake Feishu and the fake OpenAI server, over real HTTP.

``running_bot`` starts ``create_app(settings)`` on 127.0.0.1 with settings pointing at
the fakes; ``Bot`` posts signed, encrypted events to it the way Feishu does and reads
what the fake Feishu received.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bot.app import SERVICES, Services, create_app
from bot.config import Settings, load_settings
from bot.engine import LLM, Tool
from bot.media.limits import ReaderLimits
from bot.sandbox.emulator.clicks import Press, button_press, form_submission, shown_card
from connectors.base import Connector
from connectors.config import ConnectorsConfig

from fakes.feishu_push import card_action_event, message_event, plain_request, signed_request
from fakes.feishu_server import FakeFeishu, FakeMessage
from fakes.openai_server import FakeOpenAIServer, Reply
from support.model_calls import is_synthesis, user_text
from support.servers import serving
from support.waiting import wait_until

# Set per test by the e2e conftest when the suite runs on PostgreSQL
# (LARKGATE_TEST_E2E_DATABASE=postgresql); otherwise each test gets a SQLite file.
DATABASE_URL: str | None = None

VERIFICATION_TOKEN = "vt-e2e"
ENCRYPT_KEY = "ek-e2e"
BOT_OPEN_ID = "ou_bot"


def settings_for(
    tmp_path: Path, feishu: FakeFeishu, llm_server: FakeOpenAIServer, **overrides: Any
) -> Settings:
    values: dict[str, Any] = {
        "feishu_app_id": feishu.app_id,
        "feishu_app_secret": feishu.app_secret,
        "feishu_verification_token": VERIFICATION_TOKEN,
        "feishu_encrypt_key": ENCRYPT_KEY,
        "feishu_domain": feishu.domain,
        "llm_base_url": llm_server.base_url,
        "llm_api_key": "sk-e2e-not-secret",
        "llm_model": "fake-model",
        "database_url": DATABASE_URL or f"sqlite+aiosqlite:///{tmp_path}/bot.db",
        "larkgate_claim_lease_seconds": 2.0,
        "larkgate_shutdown_grace_seconds": 2.0,
    }
    values.update(overrides)
    return load_settings(**values)


def answering(body: Mapping[str, Any]) -> Reply:
    """A model that answers the question it is given: the loop's streamed call (its final
    reply is the answer) and synthesis both say "Answer to: <question>"; a loop call made
    without streaming (``LARKGATE_SYNTHESIS=always``) drafts from the last user message."""
    messages = body["messages"]
    if is_synthesis(body):
        question = messages[-1]["content"].split("\n\n")[0].removeprefix("Question: ")
        return Reply(content=f"Answer to: {question}", usage={"prompt_tokens": 9})
    last_user = user_text([m for m in messages if m["role"] == "user"][-1])
    if body.get("stream"):
        return Reply(content=f"Answer to: {last_user}", usage={"prompt_tokens": 9})
    return Reply(content=f"draft for {last_user}", usage={"prompt_tokens": 11})


@dataclass
class Bot:
    url: str
    app: web.Application
    feishu: FakeFeishu
    llm_server: FakeOpenAIServer
    session: aiohttp.ClientSession

    @property
    def services(self) -> Services:
        return self.app[SERVICES]

    async def post(
        self, path: str, body: bytes, headers: Mapping[str, str]
    ) -> tuple[int, dict[str, Any]]:
        async with self.session.post(self.url + path, data=body, headers=dict(headers)) as resp:
            text = await resp.text()
            return resp.status, (json.loads(text) if text.startswith("{") else {"raw": text})

    async def push(self, envelope: Mapping[str, Any], *, encrypted: bool = True) -> int:
        if encrypted:
            body, headers = signed_request(dict(envelope), encrypt_key=ENCRYPT_KEY)
        else:
            body, headers = plain_request(dict(envelope))
        status, _ = await self.post("/feishu/events", body, headers)
        return status

    async def say(self, message_id: str, text: str, **fields: Any) -> int:
        fields.setdefault("chat_id", "oc_dm")
        envelope = message_event(
            message_id=message_id, text=text, verification_token=VERIFICATION_TOKEN, **fields
        )
        return await self.push(envelope)

    async def click(
        self,
        value: Mapping[str, Any],
        *,
        by: str,
        card_message_id: str = "om_card",
        chat_id: str = "oc_dm",
        event_id: str | None = None,
        form_value: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> dict[str, Any]:
        """Press a card button the way Feishu reports it; returns the callback's answer.
        A form's submit button also sends its ``name`` and the form's ``form_value``."""
        envelope = card_action_event(
            verification_token=VERIFICATION_TOKEN,
            value=value,
            operator_open_id=by,
            open_message_id=card_message_id,
            open_chat_id=chat_id,
            event_id=event_id,
            name=name,
            form_value=form_value,
        )
        body, headers = signed_request(envelope, encrypt_key=ENCRYPT_KEY)
        status, answer = await self.post("/feishu/card", body, headers)
        assert status == 200, answer
        return answer

    async def press(self, card_message_id: str, label: str, *, by: str) -> dict[str, Any]:
        """Press the button labelled ``label`` on the card the message shows now (a
        question's option, say), in the message's chat; returns the callback's answer."""
        return await self._send_press(
            card_message_id, button_press(self._card(card_message_id), label), by
        )

    async def submit_form(
        self,
        card_message_id: str,
        inputs: Mapping[str, Any],
        *,
        by: str,
        button: str | None = None,
    ) -> dict[str, Any]:
        """Type ``inputs`` (an input's name -> text) into the form of the card the message
        shows now and press its submit button (the one labelled ``button``, else the only
        one), as Feishu's client does; returns the callback's answer. What Feishu's client
        would not send raises ``ClickRefused``."""
        submitted = form_submission(self._card(card_message_id), inputs, button=button)
        return await self._send_press(card_message_id, submitted, by)

    def _card(self, card_message_id: str) -> dict[str, Any]:
        card = shown_card(self.feishu, card_message_id)
        assert card is not None, f"{card_message_id} shows no card"
        return card

    async def _send_press(self, card_message_id: str, press: Press, by: str) -> dict[str, Any]:
        chat_id = self.feishu.message_by_id[card_message_id].chat_id
        return await self.click(
            press.value,
            by=by,
            card_message_id=card_message_id,
            chat_id=chat_id,
            form_value=press.form_value,
            name=press.name,
        )

    def replies_to(self, message_id: str) -> list[FakeMessage]:
        return [m for m in self.feishu.sent if m.reply_to == message_id]

    async def wait_for(
        self, condition: Callable[[], object | Awaitable[object]], within: float = 10.0
    ) -> None:
        """Poll ``condition`` (a function, or a coroutine function) until it holds."""
        await wait_until(condition, within, every=0.01)

    async def reply(self, message_id: str, within: float = 10.0) -> str:
        """The reply's text once it is finished: ``within`` seconds for it to appear and
        what is left of them, 10 s at least, to finish (the live card goes up at once, so
        a long wait is mostly for it to finish)."""
        began = time.monotonic()
        await self.wait_for(lambda: bool(self.replies_to(message_id)), within)
        await self.settle_reply(message_id, max(10.0, within - (time.monotonic() - began)))
        return text_of(self.replies_to(message_id)[0], self.feishu)

    async def settle_reply(self, message_id: str, within: float = 10.0) -> None:
        """Wait until the live card for ``message_id`` has stopped streaming."""

        def done() -> bool:
            for message in self.replies_to(message_id):
                card = self.feishu.cards.get(message.card_id) if message.card_id else None
                if card is not None and card.streaming_mode:
                    return False
            return True

        await self.wait_for(done, within)

    async def settle(self, within: float = 10.0) -> None:
        """Wait until nothing is in flight (every claimed message is finished)."""
        await self.wait_for(
            lambda: not len(self.services.in_flight) and not self.services.workers.active_runs,
            within,
        )


def text_of(message: FakeMessage, feishu: FakeFeishu | None = None) -> str:
    """The visible text of a reply: a CardKit card entity's elements (read from the fake),
    an inline card's markdown elements, or a text message."""
    content = message.content
    if message.card_id and feishu is not None:
        content = feishu.cards[message.card_id].card
    if message.msg_type == "interactive" and "body" in content:
        return "\n".join(e.get("content", "") for e in content["body"]["elements"])
    return str(content.get("text", content))


def answer_of(message: FakeMessage, feishu: FakeFeishu) -> str:
    """Only the answer text of a live card (no steps, no footer)."""
    card = feishu.cards[message.card_id].card if message.card_id else message.content
    return "".join(
        e["content"]
        for e in card["body"]["elements"]
        if e["element_id"] == "answer" or e["element_id"].startswith("part_")
    )


@asynccontextmanager
async def running_bot(
    settings: Settings,
    feishu: FakeFeishu,
    llm_server: FakeOpenAIServer,
    *,
    llm: LLM | None = None,
    owner: str | None = None,
    tools: Sequence[Tool] = (),
    connectors: ConnectorsConfig | None = None,
    clock: Callable[[], float] = time.time,
    connector_classes: Mapping[str, type[Connector]] | None = None,
    reader_limits: ReaderLimits | None = None,
) -> AsyncIterator[Bot]:
    # No connectors unless a test asks: their tools would change what the model is sent.
    app = create_app(
        settings,
        llm=llm,
        owner=owner,
        tools=tools,
        connectors=connectors or ConnectorsConfig(explicit=True),
        clock=clock,
        connector_classes=connector_classes,
        reader_limits=reader_limits,
    )
    # The server is cleaned up before the session is closed.
    async with (
        aiohttp.ClientSession() as session,
        serving(app, access_log=None, shutdown_timeout=5) as served,
    ):
        yield Bot(served.url, app, feishu, llm_server, session)

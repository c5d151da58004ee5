"""``larkgate dev``'s sandbox (the real bot, the Feishu emulator, the chat page) started on
the fake model, with the deploy tool of ``support.deploy``; the page's API as the browser
calls it (:class:`Page`) and readers of its transcript."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from bot.config import load_settings
from bot.sandbox.runner import Sandbox
from connectors.config import ConnectorsConfig

from fakes.openai_server import FakeOpenAIServer, Reply
from support.cards import texts
from support.deploy import Deployer
from support.model_calls import is_synthesis

Transcript = dict[str, Any]


def model(body: dict[str, Any]) -> Reply:
    """Deploys when asked to (once), answers everything else; streams its answers slowly."""
    messages = body["messages"]
    if is_synthesis(body):
        trace = messages[-1]["content"]
        outcome = "web deployed" if "web deployed" in trace else "nothing to do"
        return Reply(content=f"All done here: {outcome}.", chunk_size=3, chunk_interval=0.08)
    last_user = [m["content"] for m in messages if m["role"] == "user"][-1]
    results = [m["content"] for m in messages if m["role"] == "tool"]
    if "deploy" in last_user and not results:
        return Reply(tool_calls=[("c1", "deploy", {"service": "web"})])
    # The final reply is the answer, streamed as it is written.
    outcome = "web deployed" if any("web deployed" in r for r in results) else "nothing to do"
    return Reply(content=f"All done here: {outcome}.", chunk_size=3, chunk_interval=0.08)


@asynccontextmanager
async def running_sandbox(
    tmp_path: Path, llm_server: FakeOpenAIServer, deployer: Deployer
) -> AsyncIterator[Sandbox]:
    """A started Sandbox on a free port, its database in ``tmp_path``, no connectors."""
    settings = load_settings(
        llm_base_url=llm_server.base_url,
        llm_api_key="sk-sandbox-not-secret",
        llm_model="fake-model",
        database_url=f"sqlite+aiosqlite:///{tmp_path}/dev.db",
        larkgate_claim_lease_seconds=2.0,
        larkgate_shutdown_grace_seconds=2.0,
    )
    tools = [deployer.tool()]
    connectors = ConnectorsConfig(explicit=True)
    async with Sandbox(settings, port=0, tools=tools, connectors=connectors) as running:
        yield running


class Page:
    """The chat page's API, as the browser calls it."""

    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url = url
        self.session = session

    async def transcript(self, user: str, chat: str, after: int = -1) -> Transcript:
        query = {"user": user, "chat": chat, "after": str(after)}
        async with self.session.get(self.url + "/api/transcript", params=query) as resp:
            assert resp.status == 200, await resp.text()
            return await resp.json()

    async def send(self, user: str, chat: str, text: str, mention: bool = True) -> dict[str, Any]:
        body = {"user": user, "chat": chat, "text": text, "mention": mention}
        async with self.session.post(self.url + "/api/messages", json=body) as resp:
            assert resp.status == 200, await resp.text()
            answer = await resp.json()
        assert answer["status"] == 200, answer
        return answer

    async def click(self, user: str, message_id: str, value: dict[str, Any]) -> dict[str, Any]:
        body = {"user": user, "message_id": message_id, "value": value}
        async with self.session.post(self.url + "/api/click", json=body) as resp:
            assert resp.status == 200, await resp.text()
            return await resp.json()

    async def submit_form(
        self, user: str, message_id: str, form_value: dict[str, Any], button: str | None = None
    ) -> dict[str, Any]:
        """Type ``form_value`` (an input's name -> text) into the message's card's form and
        press its submit button (the one labelled ``button``, else the only one), as the
        page does."""
        body: dict[str, Any] = {"user": user, "message_id": message_id, "form_value": form_value}
        if button is not None:
            body["button"] = button
        async with self.session.post(self.url + "/api/click", json=body) as resp:
            assert resp.status == 200, await resp.text()
            return await resp.json()

    async def until(
        self,
        user: str,
        chat: str,
        condition: Callable[[list[dict[str, Any]]], Any],
        seen: list[list[dict[str, Any]]] | None = None,
        within: float = 60.0,
    ) -> list[dict[str, Any]]:
        """Long-poll the transcript, as the page does, until ``condition`` holds (within
        ``within`` seconds: a transcript that stops changing must fail the test, not hang
        it)."""
        revision = -1
        data: dict[str, Any] = {"messages": []}
        try:
            async with asyncio.timeout(within):
                for _ in range(500):
                    data = await self.transcript(user, chat, after=revision)
                    if seen is not None:
                        seen.append(data["messages"])
                    if condition(data["messages"]):
                        return list(data["messages"])
                    revision = data["revision"]
        except TimeoutError:
            pass
        raise AssertionError(f"never seen; last transcript: {data['messages']}")

    async def attach(
        self,
        user: str,
        chat: str,
        data: bytes,
        name: str,
        *,
        content_type: str = "application/octet-stream",
        text: str = "",
        mention: bool = True,
    ) -> aiohttp.ClientResponse:
        """POST /api/attachments as the page's form does; the response, read."""
        form = aiohttp.FormData()
        for field, value in (("user", user), ("chat", chat), ("text", text)):
            form.add_field(field, value)
        form.add_field("mention", "true" if mention else "false")
        form.add_field("file", data, filename=name, content_type=content_type)
        async with self.session.post(self.url + "/api/attachments", data=form) as resp:
            await resp.read()
            return resp


def cards(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["from_bot"] and m["kind"] == "card"]


def card_text(message: dict[str, Any]) -> str:
    card = message["card"]
    return "\n".join(texts(card.get("header")) + texts(card.get("body") or card.get("elements")))


def answered(messages: list[dict[str, Any]], text: str) -> bool:
    return any(text in card_text(m) and not m["streaming"] for m in cards(messages))

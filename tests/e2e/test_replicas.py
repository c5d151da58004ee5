"""Two `larkgate serve` processes on one PostgreSQL database, as replicas behind a balancer.

Events and card callbacks go to either process at random, often twice (Feishu's
redeliveries may hit any replica). Every message must get exactly one reply, the turns of
each conversation must run in order and see each other's history, and an approval card
posted by one process must be decidable through the other.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from fakes.feishu_push import card_action_event, message_event, signed_request
from fakes.feishu_server import FakeFeishu
from fakes.openai_server import FakeOpenAIServer, Reply
from support.model_calls import is_synthesis
from support.postgres import scratch_database_async, url_text
from support.processes import serve_env, start_serve, stop_all, wait_healthy
from support.servers import free_port
from support.waiting import wait_until

POSTGRES_URL = os.environ.get("LARKGATE_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not POSTGRES_URL, reason="needs LARKGATE_TEST_POSTGRES_URL")

TOKEN, KEY = "vt-replicas", "ek-replicas"
ADMIN = "ou_admin"
CONVERSATIONS, TURNS = 6, 4


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with scratch_database_async("larkgate_r_") as url:
        yield url_text(url)


class Model:
    """Answers every question, noting how many earlier turns each loop call could see;
    asks for sql_execute when told to write."""

    def __init__(self) -> None:
        self.seen: dict[str, list[int]] = {}

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        assert not is_synthesis(body)  # the loop's final reply is the answer
        users = [m["content"] for m in messages if m["role"] == "user"]
        question = users[-1]
        offered = [t["function"]["name"] for t in body.get("tools") or ()]
        if offered == ["select_tools"] and question.startswith("write "):
            # The menu in the first call: this one needs a tool.
            return Reply(tool_calls=[("s", "select_tools", {"tools": ["sql_execute"]})])
        if question.startswith("write "):
            if not any(m["role"] == "tool" for m in messages):
                statement = "INSERT INTO notes (body) VALUES ('from a replica')"
                return Reply(tool_calls=[("w1", "sql_execute", {"sql": statement})])
            return Reply(content="written")
        chat = question.partition(" turn ")[0]
        earlier = sum(1 for text in users[:-1] if text.startswith(f"{chat} turn "))
        self.seen.setdefault(chat, []).append(earlier)
        return Reply(content=f"Answer to: {question}")


@pytest.fixture
def replicas(database, notes_db, tmp_path) -> Iterator[Any]:
    """Starts the processes once the fakes are up (their addresses go in the environment)."""
    started: list[subprocess.Popen[bytes]] = []

    def start(feishu: FakeFeishu, llm: FakeOpenAIServer, count: int = 2) -> list[str]:
        urls = []
        for index in range(count):
            port = free_port()
            env = serve_env(
                feishu,
                llm,
                verification_token=TOKEN,
                encrypt_key=KEY,
                DATABASE_URL=database,
                LARKGATE_ADMINS=ADMIN,
                # Short enough to matter, long enough that a loaded CI machine's stalls
                # do not look like a dead replica (which would rightly re-run a turn).
                LARKGATE_CLAIM_LEASE_SECONDS="6",
                LARKGATE_SHUTDOWN_GRACE_SECONDS="2",
                SQL_CONNECTOR_URL=f"sqlite:///{notes_db}",
            )
            env.pop("LARKGATE_CONFIG", None)
            process = start_serve(port, env, tmp_path / f"replica{index}.log", cwd=tmp_path)
            started.append(process)
            urls.append(f"http://127.0.0.1:{port}")
        return urls

    yield start
    stop_all(started, [tmp_path / f"replica{index}.log" for index in range(len(started))])


async def _post(session: aiohttp.ClientSession, url: str, path: str, envelope: dict) -> dict:
    body, headers = signed_request(envelope, encrypt_key=KEY)
    async with session.post(url + path, data=body, headers=headers) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def _wait_for(condition) -> None:
    await wait_until(condition, 40.0, every=0.02)


def _replies(feishu: FakeFeishu, message_id: str) -> list:
    return [m for m in feishu.sent if m.reply_to == message_id]


def _settled(feishu: FakeFeishu, message_id: str) -> bool:
    replies = _replies(feishu, message_id)
    return bool(replies) and all(
        not (m.card_id and feishu.cards[m.card_id].streaming_mode) for m in replies
    )


def _answer(feishu: FakeFeishu, message) -> str:
    card = feishu.cards[message.card_id].card if message.card_id else message.content
    return json.dumps(card, ensure_ascii=False)


async def test_two_processes_share_the_work(replicas, notes_db):
    rng = random.Random(7)
    model = Model()
    async with (
        FakeFeishu(bot_open_id="ou_bot") as feishu,
        FakeOpenAIServer() as llm,
        aiohttp.ClientSession() as session,
    ):
        llm.handler = model
        urls = replicas(feishu, llm)
        await asyncio.gather(*(wait_healthy(url, within=30.0) for url in urls))

        async def deliver(envelope: dict, path: str = "/feishu/events") -> dict:
            first, second = rng.sample(urls, 2)
            answer = await _post(session, first, path, envelope)
            if rng.random() < 0.5:  # redelivered, to whichever replica
                await _post(session, rng.choice([first, second]), path, envelope)
            return answer

        async def conversation(index: int) -> None:
            chat = f"oc_c{index}"
            for turn in range(TURNS):
                message_id = f"om_{index}_{turn}"
                envelope = message_event(
                    message_id=message_id,
                    chat_id=chat,
                    sender_open_id=f"ou_u{index}",  # a DM's conversation is its sender's
                    verification_token=TOKEN,
                    text=f"{chat} turn {turn}",
                )
                await deliver(envelope)
                await _wait_for(lambda m=message_id: _settled(feishu, m))

        await asyncio.gather(*(conversation(i) for i in range(CONVERSATIONS)))

        # An approval asked by one process, decided through either.
        envelope = message_event(
            message_id="om_write", chat_id="oc_w", verification_token=TOKEN, text="write a note"
        )
        envelope["event"]["sender"]["sender_id"]["open_id"] = ADMIN
        await deliver(envelope)
        await _wait_for(
            lambda: any(
                "Approval ID" in json.dumps(m.content) for m in _replies(feishu, "om_write")
            )
        )
        card = next(
            m for m in _replies(feishu, "om_write") if "Approval ID" in json.dumps(m.content)
        )
        approval_id = json.dumps(card.content).split("Approval ID: ")[1].split('"')[0]
        click = card_action_event(
            verification_token=TOKEN,
            value={"action": "approval", "decision": "approve", "approval_id": approval_id},
            operator_open_id=ADMIN,
            open_message_id=card.message_id,
            open_chat_id="oc_w",
        )
        answers = [await deliver(click, "/feishu/card") for _ in range(2)]
        assert [a["toast"]["type"] for a in answers] == ["success", "info"]
        await _wait_for(
            lambda: any(
                m.card_id and _settled(feishu, "om_write") for m in _replies(feishu, "om_write")
            )
        )

    # Exactly one reply per message, in order, each turn seeing all earlier ones.
    for index in range(CONVERSATIONS):
        chat = f"oc_c{index}"
        for turn in range(TURNS):
            replies = _replies(feishu, f"om_{index}_{turn}")
            assert len(replies) == 1, (chat, turn, replies)
            assert f"Answer to: {chat} turn {turn}" in _answer(feishu, replies[0])
        # Each turn saw every earlier turn. (A turn may run twice if a loaded machine stalls
        # a replica past its lease and the other takes over; the re-run sees the same.)
        seen = model.seen[chat]
        assert sorted(set(seen)) == list(range(TURNS)) and seen == sorted(seen), (chat, seen)
    with sqlite3.connect(notes_db) as db:
        assert db.execute("SELECT count(*) FROM notes").fetchone() == (1,)

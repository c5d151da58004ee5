"""Two `larkgate serve` processes on one PostgreSQL database fire a scheduled task once.

The task is in the database before either process starts, due a few seconds later: both
read its due time at start, sleep until it, and race for it. Only one claims it; the other's
conditional update finds the due time already moved on. The header's uuid would hide a
second post from Feishu, so the proof is in the database (one firing row, attempt 1) and in
the answers (one live card under the header).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select

from bot.schedules import parse_schedule
from bot.store import Database, upgrade_async
from bot.store.models import ScheduledFiringRow, table_of
from bot.store.schedules import ScheduledTask, ScheduleStore

from fakes.feishu_server import FakeFeishu
from fakes.openai_server import FakeOpenAIServer, Reply
from support.model_calls import is_synthesis
from support.postgres import scratch_database_async, url_text
from support.processes import serve_env, start_serve, stop_all, wait_healthy
from support.servers import free_port
from support.waiting import wait_until

POSTGRES_URL = os.environ.get("LARKGATE_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not POSTGRES_URL, reason="needs LARKGATE_TEST_POSTGRES_URL")

TOKEN, KEY = "vt-sched-replicas", "ek-sched-replicas"
CHAT = "oc_team"
PROMPT = "Post the open tasks"
DUE_IN = 6.0  # seconds: the processes are up well before (they start in about 2 s)


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with scratch_database_async("larkgate_sr_") as url:
        text = url_text(url)
        await upgrade_async(text)
        yield text


async def add_one_off(url: str, due: float) -> ScheduledTask:
    schedule = parse_schedule(
        at=datetime.fromtimestamp(due, UTC).isoformat(),
        cron=None,
        timezone="UTC",
        now=datetime.now(UTC),
    )
    async with Database(url) as db:
        return await ScheduleStore(db).create(
            name="Open tasks",
            prompt=PROMPT,
            creator="ou_user",
            chat_id=CHAT,
            chat_type="group",
            thread_id="",
            reply_to="",
            kind=schedule.kind,
            expression=schedule.expression,
            timezone=schedule.timezone,
            next_run_at=due,
            created_in_run="",
            max_per_creator=20,
        )


async def task_and_firings(url: str, task_id: str) -> tuple[ScheduledTask | None, list[Any]]:
    firings = table_of(ScheduledFiringRow)
    statement = select(firings).where(firings.c.task_id == task_id)

    def read(connection: Any) -> list[Any]:
        return list(connection.execute(statement).mappings())

    async with Database(url) as db:
        task = await ScheduleStore(db).get(task_id)
        return task, await db.transact(read, write=False)


def answering(body: dict[str, Any]) -> Reply:
    if is_synthesis(body):
        question = body["messages"][-1]["content"].split("\n\n")[0].removeprefix("Question: ")
        return Reply(content=f"Answer to: {question}")
    return Reply(content="draft")


@pytest.fixture
def replicas(database, tmp_path) -> Iterator[Any]:
    started: list[subprocess.Popen[bytes]] = []

    def start(feishu: FakeFeishu, llm: FakeOpenAIServer) -> list[str]:
        urls = []
        for index in range(2):
            port = free_port()
            env = serve_env(
                feishu,
                llm,
                verification_token=TOKEN,
                encrypt_key=KEY,
                DATABASE_URL=database,
                LARKGATE_CLAIM_LEASE_SECONDS="6",
                LARKGATE_SHUTDOWN_GRACE_SECONDS="2",
            )
            env.pop("LARKGATE_CONFIG", None)
            log = tmp_path / f"replica{index}.log"
            started.append(start_serve(port, env, log, cwd=tmp_path))
            urls.append(f"http://127.0.0.1:{port}")
        return urls

    yield start
    stop_all(started, [tmp_path / f"replica{index}.log" for index in range(len(started))])


async def test_two_processes_fire_a_due_task_once(database, replicas):
    task = await add_one_off(database, time.time() + DUE_IN)
    async with FakeFeishu(bot_open_id="ou_bot") as feishu, FakeOpenAIServer() as llm:
        # The creator is in the group: a firing runs only while they are a member.
        feishu.workspace.add_chat(CHAT, "Team", members={"ou_user"})
        llm.handler = answering
        urls = replicas(feishu, llm)
        await asyncio.gather(*(wait_healthy(url, within=30.0) for url in urls))

        def headers() -> list[Any]:
            return [
                m
                for m in feishu.sent
                if m.chat_id == CHAT and m.msg_type == "text" and "Open tasks" in str(m.content)
            ]

        async def finished() -> bool:
            stored, _ = await task_and_firings(database, task.id)
            return stored is not None and stored.state == "done" and bool(stored.last_outcome)

        await wait_until(finished, DUE_IN + 40.0, every=0.2, failure="the task never fired")
        await asyncio.sleep(2.0)  # time for a second, wrong firing to show
        (header,) = headers()
        answers = [m for m in feishu.sent if m.reply_to == header.message_id]
        assert len(answers) == 1, answers
        stored, firings = await task_and_firings(database, task.id)
    assert stored is not None and stored.last_outcome == "ok" and stored.next_run_at is None
    assert [(f["state"], f["attempt"]) for f in firings] == [("done", 1)]
    # A due time fires at (or just after) its time, not before.
    assert firings[0]["due_at"] == task.next_run_at
    assert firings[0]["created_at"] >= task.next_run_at

"""A run waiting for an approval outlives real ``larkgate serve`` processes that stop or die.

The write that needs approval is the SQL connector's ``sql_execute`` on a SQLite notes
database, so "ran exactly once" is a row count. The process that asked is stopped
(SIGTERM: its claim is handed back, the approval left pending) or killed (SIGKILL: its
claim's lease runs out); the process that takes the message over finds the run's
checkpoint and resumes it. The click on the card the first process posted decides, the
INSERT runs once, the model goes on from where it was, and the answer lands on the live
card the first process posted. On SQLite the processes run one after the other; on
PostgreSQL (``LARKGATE_TEST_POSTGRES_URL``) two replicas run side by side and the click
goes to the survivor, even before it has taken the message over.

Each test prints the time from the click's POST to the tool's start (the notes row
appearing, polled every 10 ms) and the size of the checkpoint's payload (``pytest -s``).
The same in one process across a graceful restart: ``test_durable_waits.py``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.store import CheckpointStore, Database, MessageLedger
from bot.store.approvals import ApprovalStore

from fakes.feishu_push import card_action_event, message_event, signed_request
from fakes.feishu_server import FakeFeishu
from fakes.openai_server import FakeOpenAIServer, Reply
from support.cards import callback_values
from support.postgres import POSTGRES_URL_ENV, scratch_database_async, url_text
from support.processes import serve_env, start_serve, stop_all, wait_healthy
from support.servers import free_port
from support.waiting import wait_until

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")

TOKEN, KEY = "vt-durable", "ek-durable"
ADMIN = "ou_admin"
CHAT = "oc_durable"
QUESTION = "write a note"
STATEMENT = "INSERT INTO notes (body) VALUES ('after a restart')"
LEASE = 3  # seconds: a killed process's message is taken over within about 1.5 leases
WITHIN = 30.0

needs_postgres = pytest.mark.skipif(
    not os.environ.get(POSTGRES_URL_ENV), reason=f"needs {POSTGRES_URL_ENV}"
)


class Model:
    """Picks sql_execute, asks for the INSERT, then answers with what the call returned."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> Reply:
        self.calls.append(body)
        offered = _offered(body)
        if offered == ["select_tools"]:  # the menu: this question needs a tool
            return Reply(tool_calls=[("s", "select_tools", {"tools": ["sql_execute"]})])
        result = _result_of(body, "w1")
        if result is None:
            return Reply(tool_calls=[("w1", "sql_execute", {"sql": STATEMENT})])
        return Reply(content=f"The write: {result}")


def _offered(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or ()]


def _result_of(body: dict[str, Any], call_id: str) -> str | None:
    results = [
        m["content"]
        for m in body["messages"]
        if m["role"] == "tool" and m.get("tool_call_id") == call_id
    ]
    return results[-1] if results else None


@dataclass
class Replica:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    async def healthy(self) -> None:
        await wait_healthy(self.url, process=self.process, describe=self.tail)

    def stop(self, how: signal.Signals) -> float:
        """SIGTERM (a graceful stop, waited for) or SIGKILL (``kill -9``); the seconds
        until the process was gone."""
        started = time.monotonic()
        self.process.send_signal(how)
        self.process.wait(timeout=30)
        return time.monotonic() - started


@dataclass(frozen=True)
class Asked:
    """The approval card the first process posted, and its run's checkpoint."""

    card_message_id: str
    approval_id: str
    approve: dict[str, Any]
    deny: dict[str, Any]
    live_card_id: str
    checkpoint_bytes: int


@pytest.fixture
async def postgres() -> AsyncIterator[str]:
    async with scratch_database_async("larkgate_dr_") as url:
        yield url_text(url)


@pytest.fixture
def replicas(notes_db, tmp_path) -> Iterator[Any]:
    """``start(name, feishu, llm, database)``: a ``larkgate serve`` on ``database``."""
    started: list[Replica] = []

    def start(name: str, feishu: FakeFeishu, llm: FakeOpenAIServer, database: str) -> Replica:
        port = free_port()
        env = serve_env(
            feishu,
            llm,
            verification_token=TOKEN,
            encrypt_key=KEY,
            DATABASE_URL=database,
            LARKGATE_ADMINS=ADMIN,
            LARKGATE_CLAIM_LEASE_SECONDS=str(LEASE),
            LARKGATE_SHUTDOWN_GRACE_SECONDS="2",
            LARKGATE_LOG_LEVEL="INFO",
            SQL_CONNECTOR_URL=f"sqlite:///{notes_db}",
        )
        env.pop("LARKGATE_CONFIG", None)
        log = tmp_path / f"{name}.log"
        replica = Replica(name, f"http://127.0.0.1:{port}", start_serve(port, env, log), log)
        started.append(replica)
        return replica

    yield start
    stop_all([r.process for r in started], [r.log for r in started])


@pytest.fixture
async def fakes() -> AsyncIterator[tuple[FakeFeishu, FakeOpenAIServer, Model]]:
    model = Model()
    async with FakeFeishu(bot_open_id="ou_bot") as feishu, FakeOpenAIServer() as llm:
        llm.handler = model
        feishu.workspace.add_user(ADMIN, "Ada Admin")
        yield feishu, llm, model


async def _post(url: str, path: str, envelope: dict[str, Any]) -> dict[str, Any]:
    body, headers = signed_request(envelope, encrypt_key=KEY)
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + path, data=body, headers=headers) as response,
    ):
        assert response.status == 200, await response.text()
        return await response.json()


async def _ask(replica: Replica, message_id: str) -> None:
    envelope = message_event(
        message_id=message_id,
        chat_id=CHAT,
        sender_open_id=ADMIN,  # an admin asks, and may approve their own call
        verification_token=TOKEN,
        text=QUESTION,
    )
    await _post(replica.url, "/feishu/events", envelope)


async def _click(replica: Replica, asked: Asked, value: dict[str, Any]) -> dict[str, Any]:
    envelope = card_action_event(
        verification_token=TOKEN,
        value=value,
        operator_open_id=ADMIN,
        open_message_id=asked.card_message_id,
        open_chat_id=CHAT,
    )
    return await _post(replica.url, "/feishu/card", envelope)


def _replies(feishu: FakeFeishu, message_id: str) -> list[Any]:
    return [m for m in feishu.sent if m.reply_to == message_id]


def _live(feishu: FakeFeishu, message_id: str) -> list[Any]:
    return [m for m in _replies(feishu, message_id) if m.card_id]


def _approval_card(feishu: FakeFeishu, message_id: str) -> Any:
    return next(
        (
            m
            for m in _replies(feishu, message_id)
            if any("approval_id" in v for v in callback_values(m.content))
        ),
        None,
    )


def _answer(feishu: FakeFeishu, card_id: str) -> str:
    return (feishu.cards[card_id].element("answer") or {}).get("content", "")


def _waiting_shown(feishu: FakeFeishu, message_id: str) -> bool:
    live = _live(feishu, message_id)
    if not live:
        return False
    return "⏸" in _steps(feishu, live[0].card_id)


def _steps(feishu: FakeFeishu, card_id: str) -> str:
    return (feishu.cards[card_id].element("steps") or {}).get("content", "")


def _one_answer(feishu: FakeFeishu, message_id: str, asked: Asked) -> None:
    """The message's replies: the live card the first process posted (the answer went on
    it) and the approval card, nothing more."""
    replies = _replies(feishu, message_id)
    assert len(replies) == 2, replies
    assert [m.card_id for m in replies if m.card_id] == [asked.live_card_id], replies
    assert [m.message_id for m in replies if not m.card_id] == [asked.card_message_id], replies


def _notes(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT count(*) FROM notes").fetchone()[0]


async def _asked(feishu: FakeFeishu, db: Database, message_id: str, replica: Replica) -> Asked:
    """Once the run waits: its approval card is out and linked to its approval, its
    checkpoint saved, its live card marked waiting."""
    failure = replica.tail
    card = await wait_until(lambda: _approval_card(feishu, message_id), WITHIN, failure=failure)
    values = {v["decision"]: v for v in callback_values(card.content) if "decision" in v}
    approval_id = values["approve"]["approval_id"]
    approvals = ApprovalStore(db)

    async def linked() -> bool:
        record = await approvals.get(approval_id)
        return record is not None and record.card_message_id == card.message_id

    await wait_until(linked, WITHIN, failure=failure)
    stored = await wait_until(
        lambda: CheckpointStore(db).for_message(message_id), WITHIN, failure=failure
    )
    await wait_until(lambda: _waiting_shown(feishu, message_id), WITHIN, failure=failure)
    (live,) = _live(feishu, message_id)
    return Asked(
        card_message_id=card.message_id,
        approval_id=approval_id,
        approve=values["approve"],
        deny=values["deny"],
        live_card_id=live.card_id,
        checkpoint_bytes=len(stored.payload.encode()),
    )


async def _tool_started(notes_db: Path, clicked_at: float, replicas: list[Replica]) -> float:
    """Seconds from the click's POST to the INSERT's row (polled every 10 ms)."""
    await wait_until(
        lambda: _notes(notes_db) > 0,
        WITHIN,
        every=0.01,
        failure=lambda: "\n".join(r.tail() for r in replicas),
    )
    return time.monotonic() - clicked_at


async def _finished(
    feishu: FakeFeishu, db: Database, message_id: str, asked: Asked, replica: Replica
) -> None:
    """The run ended: its live card closed, its message done, its checkpoint deleted."""
    ledger, checkpoints = MessageLedger(db), CheckpointStore(db)

    async def ended() -> bool:
        if feishu.cards[asked.live_card_id].streaming_mode:
            return False
        entry = await ledger.get(message_id)
        return (
            entry is not None
            and entry.state == "done"
            and await checkpoints.for_message(message_id) is None
        )

    await wait_until(ended, WITHIN, failure=replica.tail)


def _resumed_once(model: Model, before: int, result_says: str) -> None:
    """The model was asked once more, with everything before and the call's result (not
    asked to start over: no tool menu, the question still the last user message)."""
    after = model.calls[before:]
    assert len(after) == 1, [_offered(body) for body in after]
    (body,) = after
    assert _offered(body) != ["select_tools"]
    assert [m["content"] for m in body["messages"] if m["role"] == "user"][-1] == QUESTION
    result = _result_of(body, "w1")
    assert result is not None and result_says in result, result


def _report(label: str, asked: Asked, click_to_tool: float | None, stopped: float) -> None:
    timing = "n/a" if click_to_tool is None else f"{click_to_tool * 1000:.0f} ms"
    print(
        f"\n[durable {label}] click POST -> tool start: {timing}; "
        f"checkpoint payload: {asked.checkpoint_bytes} bytes; "
        f"the first process was gone {stopped:.2f} s after its signal"
    )


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
async def test_an_approval_outlives_its_process_on_sqlite(how, fakes, replicas, notes_db, tmp_path):
    feishu, llm, model = fakes
    database = f"sqlite+aiosqlite:///{tmp_path}/bot.db"
    message_id = f"om_sqlite_{how.name.lower()}"

    first = replicas("first", feishu, llm, database)
    await first.healthy()
    async with Database(database) as db:
        await _ask(first, message_id)
        asked = await _asked(feishu, db, message_id, first)
        before = len(model.calls)
        stopped = first.stop(how)

        # Stopped or dead, the run still waits: approval pending, checkpoint saved, the
        # message claimed (a graceful stop handed its lease back), the card as it was.
        assert (await ApprovalStore(db).get(asked.approval_id)).state == "pending"
        assert await CheckpointStore(db).for_message(message_id) is not None
        claim = await MessageLedger(db).get(message_id)
        assert claim.state == "claimed"
        if how == signal.SIGTERM:
            assert claim.lease_until <= time.time()
            assert "⏸" in _steps(feishu, asked.live_card_id)
        assert _answer(feishu, asked.live_card_id) != "_Interrupted._"
        assert _notes(notes_db) == 0

        second = replicas("second", feishu, llm, database)
        await second.healthy()
        # The second process has taken the message over and resumed the run, which
        # meets its approval again and waits for it.
        await wait_until(
            lambda: "resuming run" in second.tail(), WITHIN, every=0.02, failure=second.tail
        )
        assert _notes(notes_db) == 0
        clicked_at = time.monotonic()
        answer = await _click(second, asked, asked.approve)
        click_to_tool = await _tool_started(notes_db, clicked_at, [second])
        assert answer["toast"]["type"] == "success", answer
        await _finished(feishu, db, message_id, asked, second)

        assert _notes(notes_db) == 1  # exactly once
        # One live card: the answer went on the card the first process posted.
        _one_answer(feishu, message_id, asked)
        assert "The write:" in _answer(feishu, asked.live_card_id)
        _resumed_once(model, before, "committed: 1 row affected")
        record = await ApprovalStore(db).get(asked.approval_id)
        assert record.state == "approved" and record.used_at is not None
        assert f"taking over message {message_id}" in second.tail()
        # A second click on the card changes nothing.
        late = await _click(second, asked, asked.approve)
        assert late["toast"]["type"] == "info", late
        assert _notes(notes_db) == 1
    _report(f"sqlite {how.name}", asked, click_to_tool, stopped)


@needs_postgres
async def test_the_survivor_finishes_a_killed_replicas_approved_run(
    postgres, fakes, replicas, notes_db
):
    """Two replicas; the one that asked is killed, and the click reaches the other at once,
    before it has taken the message over (the lease has seconds to go)."""
    feishu, llm, model = fakes
    message_id = "om_pg_kill"
    a = replicas("a", feishu, llm, postgres)
    b = replicas("b", feishu, llm, postgres)
    await asyncio.gather(a.healthy(), b.healthy())
    async with Database(postgres) as db:
        await _ask(a, message_id)
        asked = await _asked(feishu, db, message_id, a)
        before = len(model.calls)
        asker = (await MessageLedger(db).get(message_id)).owner
        stopped = a.stop(signal.SIGKILL)

        clicked_at = time.monotonic()
        answer = await _click(b, asked, asked.approve)
        assert answer["toast"]["type"] == "success", answer
        # Most likely still A's (its lease has seconds to go): the decision waits in the
        # database for whoever resumes the run.
        claim = await MessageLedger(db).get(message_id)
        click_to_tool = await _tool_started(notes_db, clicked_at, [b])
        await _finished(feishu, db, message_id, asked, b)

        assert _notes(notes_db) == 1
        _one_answer(feishu, message_id, asked)
        assert "The write:" in _answer(feishu, asked.live_card_id)
        _resumed_once(model, before, "committed: 1 row affected")
        assert f"taking over message {message_id}" in b.tail()
        assert "resuming run" in b.tail()
        record = await ApprovalStore(db).get(asked.approval_id)
        assert record.state == "approved" and record.used_at is not None
    clicked_before_takeover = claim.owner == asker
    _report(
        f"postgres SIGKILL, click {'before' if clicked_before_takeover else 'after'} takeover",
        asked,
        click_to_tool,
        stopped,
    )


@needs_postgres
async def test_a_deny_through_the_survivor_after_a_graceful_stop(
    postgres, fakes, replicas, notes_db
):
    feishu, llm, model = fakes
    message_id = "om_pg_deny"
    a = replicas("a", feishu, llm, postgres)
    b = replicas("b", feishu, llm, postgres)
    await asyncio.gather(a.healthy(), b.healthy())
    async with Database(postgres) as db:
        await _ask(a, message_id)
        asked = await _asked(feishu, db, message_id, a)
        before = len(model.calls)
        stopped = a.stop(signal.SIGTERM)
        assert a.process.returncode == 0, a.tail()

        answer = await _click(b, asked, asked.deny)
        assert answer["toast"]["type"] == "success", answer
        assert answer["card"]["data"]["header"]["title"]["content"] == "Denied"
        await _finished(feishu, db, message_id, asked, b)

        assert _notes(notes_db) == 0
        _one_answer(feishu, message_id, asked)
        assert "denied by Ada Admin" in _answer(feishu, asked.live_card_id)
        _resumed_once(model, before, "denied by Ada Admin")
        record = await ApprovalStore(db).get(asked.approval_id)
        assert record.state == "denied" and record.used_at is None
    _report("postgres SIGTERM deny", asked, None, stopped)

"""Crashes and restarts: nothing lost, nothing answered twice.

The kill test runs ``larkgate serve`` as a real process (``python -m bot.cli serve``),
SIGKILLs it in the middle of a run, starts another one on the same database, and
checks that the message is taken over after the lease and answered exactly once,
without Feishu delivering it again.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from bot.store import Database, MessageLedger

from e2e.harness import ENCRYPT_KEY, VERIFICATION_TOKEN, answer_of, running_bot, settings_for
from fakes.feishu_push import message_event, signed_request
from support.models import HoldFirstLoopCall
from support.processes import serve_env, start_serve, wait_healthy
from support.servers import free_port
from support.waiting import wait_until


async def test_a_graceful_shutdown_hands_unfinished_work_to_the_next_start(
    tmp_path, feishu, llm_server
):
    hold = HoldFirstLoopCall()
    llm_server.handler = hold
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_shutdown_grace_seconds=0.2)
    async with running_bot(settings, feishu, llm_server, owner="first") as bot:
        await bot.say("om_handoff", "survive a restart")
        await hold.entered.wait()
    # Shut down mid-run: the claim was released, not left to expire.
    async with Database(settings.database_url) as db:
        entry = await MessageLedger(db).get("om_handoff")
    assert entry.state == "claimed" and entry.lease_until <= time.time()
    # Its card went up at once; the shutdown closed it saying so (no card stuck "Thinking…").
    (first_card,) = [feishu.cards[m.card_id] for m in _replies(feishu, "om_handoff")]
    assert first_card.streaming_mode is False
    assert first_card.element("answer")["content"] == "_Interrupted._"
    hold.release.set()
    async with running_bot(settings, feishu, llm_server, owner="second") as bot:
        await bot.wait_for(lambda: len(bot.replies_to("om_handoff")) == 2)
        await bot.settle_reply("om_handoff")
        await bot.settle()
        _, answer = bot.replies_to("om_handoff")  # a card of its own: the first is closed
        assert answer_of(answer, feishu).startswith("Answer to")
        assert (await bot.services.ledger.get("om_handoff")).state == "done"


async def test_a_message_already_replied_to_is_not_answered_again(tmp_path, feishu, llm_server):
    settings = settings_for(tmp_path, feishu, llm_server)
    envelope = message_event(
        message_id="om_replied", chat_id="oc_dm", text="hi", verification_token=VERIFICATION_TOKEN
    )
    async with Database(settings.database_url) as db:
        from bot.store.migrate import upgrade_async

        await upgrade_async(settings.database_url)
        ledger = MessageLedger(db, clock=lambda: time.time() - 120)
        await ledger.claim("om_replied", owner="dead", payload=envelope, lease_seconds=1)
        await ledger.mark_replied("om_replied", owner="dead", reply_message_id="om_sent")
    async with running_bot(settings, feishu, llm_server) as bot:
        # The sweep at start-up takes the expired claim over; seeing it replied, it finishes it.
        await bot.wait_for(lambda: _state(bot.services.ledger, "om_replied", "done"), 5)
        await bot.wait_for(lambda: len(bot.services.in_flight) == 0, 5)
        entry = await bot.services.ledger.get("om_replied")
        assert entry.state == "done"
    assert feishu.sent == []
    assert llm_server.requests == []


def _serve(feishu, llm_server, settings, port: int, log: Path) -> subprocess.Popen[bytes]:
    config = log.parent / "larkgate.toml"
    config.write_text("[connectors]\n")  # none: the test scripts the model's every call
    env = serve_env(
        feishu,
        llm_server,
        verification_token=VERIFICATION_TOKEN,
        encrypt_key=ENCRYPT_KEY,
        LLM_API_KEY="sk-e2e",
        DATABASE_URL=settings.database_url,
        LARKGATE_CLAIM_LEASE_SECONDS="2",
        LARKGATE_LOG_LEVEL="INFO",
        LARKGATE_CONFIG=str(config),
    )
    return start_serve(port, env, log)


async def _wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    await wait_healthy(url, process=process, describe=lambda: _tail(log))


def _tail(log: Path) -> str:
    return log.read_text()[-3000:]


async def _state(ledger: MessageLedger, message_id: str, state: str) -> bool:
    entry = await ledger.get(message_id)
    return entry is not None and entry.state == state


def _replies(feishu, message_id: str) -> list:
    return [m for m in feishu.sent if m.reply_to == message_id]


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")
async def test_a_killed_process_is_taken_over_after_the_lease(tmp_path, feishu, llm_server):
    hold = HoldFirstLoopCall()
    llm_server.handler = hold
    settings = settings_for(tmp_path, feishu, llm_server)
    log = tmp_path / "serve.log"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first = _serve(feishu, llm_server, settings, port, log)
    try:
        await _wait_healthy(url, first, log)
        envelope = message_event(
            message_id="om_crash",
            chat_id="oc_dm",
            text="please survive",
            verification_token=VERIFICATION_TOKEN,
        )
        body, headers = signed_request(envelope, encrypt_key=ENCRYPT_KEY)
        async with (
            aiohttp.ClientSession() as session,
            session.post(url + "/feishu/events", data=body, headers=headers) as resp,
        ):
            assert resp.status == 200
        await asyncio.wait_for(hold.entered.wait(), 30)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    hold.release.set()

    second = _serve(feishu, llm_server, settings, port, log)
    try:
        await _wait_healthy(url, second, log)
        await wait_until(lambda: _replies(feishu, "om_crash"), 30, failure=lambda: _tail(log))
        # Done is the last state of a message: its one run has sent all it will send.
        async with Database(settings.database_url) as db:
            ledger = MessageLedger(db)
            await wait_until(
                lambda: _state(ledger, "om_crash", "done"), 30, failure=lambda: _tail(log)
            )
        # The killed process's card went up at once and could not be closed; the answer is
        # in a card of its own (sent under its own uuid, so Feishu does not take it for a
        # resend of the first one and leave it unseen).
        stuck, answered = _replies(feishu, "om_crash")
        assert feishu.cards[stuck.card_id].element("answer")["content"] == "_Thinking…_"
        assert answer_of(answered, feishu).startswith("Answer to")
        assert feishu.cards[answered.card_id].streaming_mode is False
        assert "taking over message om_crash" in _tail(log)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=30)

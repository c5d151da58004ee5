"""A run that waits for a person outlives the process: approvals across a graceful restart.

The first bot asks for an approval and stops (SIGTERM's path: the app's shutdown). The
second, on the same database, takes the message over, finds the run's checkpoint and goes
on from it: the card shown before the restart still decides, the approved call runs once,
the model goes on from where it was (it is not asked to start over), and the answer lands
on the same live card. Deny, expiry, read-only mode switched on meanwhile, a reset, a
checkpoint changed in the database, a double click and a stale card are each tried.
(Killed processes and two replicas: ``test_durable_replicas.py``.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bot.governance.gate import TAMPERED_NOTE
from bot.runtime import texts
from bot.runtime.turn.parking import CheckpointSeal, checkpoint_key, encode
from bot.store import CheckpointStore, ConversationStore, Database, MessageLedger
from bot.store.approvals import ApprovalStore
from bot.store.org import OrgSettingsStore

from e2e.harness import Bot, running_bot, settings_for
from e2e.test_approvals import ADMIN, answer_text, first_card, header, value_for
from fakes.openai_server import Reply
from support.deploy import deploying


def _start(tmp_path, feishu, llm_server, deployer, owner: str, **overrides: Any):
    values = {"larkgate_admins": ADMIN, **overrides}
    settings = settings_for(tmp_path, feishu, llm_server, **values)
    return running_bot(settings, feishu, llm_server, tools=[deployer.tool()], owner=owner)


async def _ask_then_stop(tmp_path, feishu, llm_server, deployer, message_id: str, **overrides):
    """The first process: the question, its approval card, then a graceful stop."""
    llm_server.handler = deploying(["api"])
    feishu.workspace.add_user(ADMIN, "Ada Admin")
    async with _start(tmp_path, feishu, llm_server, deployer, "first", **overrides) as bot:
        await bot.say(message_id, "deploy api please")
        card = await first_card(bot, message_id)
        await bot.wait_for(lambda: _waiting_shown(bot, message_id))
        # Read now: the card is rewritten (without buttons) once the approval ends.
        values = {d: value_for(card, d) for d in ("approve", "deny")}
    return Asked(card.message_id, values["approve"], values["deny"])


@dataclass(frozen=True)
class Asked:
    """The approval card the first process posted, and the values of its buttons."""

    message_id: str
    approve: dict[str, Any]
    deny: dict[str, Any]


def _live(bot: Bot, message_id: str) -> list[Any]:
    return [m for m in bot.replies_to(message_id) if m.card_id]


def _waiting_shown(bot: Bot, message_id: str) -> bool:
    live = _live(bot, message_id)
    if not live:
        return False
    steps = bot.feishu.cards[live[0].card_id].element("steps")
    return bool(steps) and ("⏸" in steps["content"] or "approval" in steps["content"].lower())


async def test_an_approval_survives_a_restart_and_the_run_goes_on_from_where_it_was(
    tmp_path, feishu, llm_server, deployer
):
    card = await _ask_then_stop(tmp_path, feishu, llm_server, deployer, "om_d1")
    calls_before = len(llm_server.requests)
    async with Database(settings_for(tmp_path, feishu, llm_server).database_url) as db:
        # Stopped, not cancelled: the approval waits, the run's checkpoint is saved.
        (approval_id,) = {card.approve["approval_id"]}
        assert (await ApprovalStore(db).get(approval_id)).state == "pending"
        assert await CheckpointStore(db).for_message("om_d1") is not None
        assert (await MessageLedger(db).get("om_d1")).state == "claimed"
    # The live card was left as it was (not "Interrupted"): the next process goes on with it.
    (live,) = [m for m in feishu.sent if m.reply_to == "om_d1" and m.card_id]
    assert feishu.cards[live.card_id].element("answer")["content"] != "_Interrupted._"

    async with _start(tmp_path, feishu, llm_server, deployer, "second") as bot:
        await bot.wait_for(lambda: len(bot.services.governance.waits) == 1, within=30)
        assert deployer.runs == []
        answer = await bot.click(card.approve, by=ADMIN, card_message_id=card.message_id)
        assert answer["toast"]["type"] == "success"
        await bot.wait_for(lambda: deployer.runs == ["api"], within=30)
        await bot.wait_for(lambda: not feishu.cards[live.card_id].streaming_mode, within=30)
        await bot.settle()
        assert deployer.runs == ["api"]  # once
        # One live card: the answer went on the card posted before the restart.
        assert [m.card_id for m in _live(bot, "om_d1")] == [live.card_id]
        assert "api deployed" in answer_text(bot, "om_d1")
        # The model was asked once more, with everything before and the tool's result.
        after = llm_server.requests[calls_before:]
        assert len(after) == 1
        sent = after[0].body["messages"]
        assert any(m["role"] == "tool" and "api deployed" in m["content"] for m in sent)
        assert [m["content"] for m in sent if m["role"] == "user"][-1] == "deploy api please"
        ledger = await bot.services.ledger.get("om_d1")
        assert ledger.state == "done"
        assert await CheckpointStore(bot.services.database).for_message("om_d1") is None
        # A stale click on the card after the run finished changes nothing.
        late = await bot.click(card.approve, by=ADMIN, card_message_id=card.message_id)
        assert late["toast"]["type"] == "info"
    assert deployer.runs == ["api"]


async def test_deny_after_a_restart_resumes_the_run_with_the_refusal(
    tmp_path, feishu, llm_server, deployer
):
    card = await _ask_then_stop(tmp_path, feishu, llm_server, deployer, "om_d2")
    async with _start(tmp_path, feishu, llm_server, deployer, "second") as bot:
        await bot.wait_for(lambda: len(bot.services.governance.waits) == 1, within=30)
        answer = await bot.click(card.deny, by=ADMIN, card_message_id=card.message_id)
        assert header(answer["card"]["data"]) == "Denied"
        await bot.reply("om_d2")
        await bot.settle()
        assert "denied by Ada Admin" in answer_text(bot, "om_d2")
    assert deployer.runs == []


async def test_an_approval_expires_across_a_restart(tmp_path, feishu, llm_server, deployer):
    await _ask_then_stop(
        tmp_path, feishu, llm_server, deployer, "om_d3", larkgate_approval_ttl_seconds=3
    )
    async with _start(
        tmp_path, feishu, llm_server, deployer, "second", larkgate_approval_ttl_seconds=3
    ) as bot:
        await bot.reply("om_d3", within=30)
        await bot.settle()
        assert "approval expired" in answer_text(bot, "om_d3")
    assert deployer.runs == []


async def test_a_double_click_across_the_restart_runs_the_call_once(
    tmp_path, feishu, llm_server, deployer
):
    card = await _ask_then_stop(tmp_path, feishu, llm_server, deployer, "om_d4")
    async with _start(tmp_path, feishu, llm_server, deployer, "second") as bot:
        await bot.wait_for(lambda: len(bot.services.governance.waits) == 1, within=30)
        value = card.approve
        first = await bot.click(value, by=ADMIN, card_message_id=card.message_id)
        second = await bot.click(value, by=ADMIN, card_message_id=card.message_id)
        assert [first["toast"]["type"], second["toast"]["type"]] == ["success", "info"]
        await bot.reply("om_d4", within=30)
        await bot.settle()
    assert deployer.runs == ["api"]


async def test_read_only_switched_on_during_the_wait_refuses_the_write_after_a_restart(
    tmp_path, feishu, llm_server, deployer
):
    card = await _ask_then_stop(tmp_path, feishu, llm_server, deployer, "om_d5")
    async with Database(settings_for(tmp_path, feishu, llm_server).database_url) as db:
        await OrgSettingsStore(db).set_read_only(True, actor=ADMIN, chat_id=None)
    async with _start(tmp_path, feishu, llm_server, deployer, "second") as bot:
        await bot.reply("om_d5", within=30)
        await bot.settle()
        # The run goes on offered only what read-only mode allows: the write is not among
        # its tools (the model is told so), and its approval is closed with the run.
        resumed = [r.body for r in llm_server.requests if r.body.get("tools")][-1]
        assert "deploy" not in {t["function"]["name"] for t in resumed["tools"]}
        assert "unknown tool 'deploy'" in answer_text(bot, "om_d5")
        record = await ApprovalStore(bot.services.database).get(card.approve["approval_id"])
        assert (record.state, record.note) == ("cancelled", texts.RUN_ENDED_WITHOUT_IT)
        late = await bot.click(card.approve, by=ADMIN, card_message_id=card.message_id)
        assert late["toast"]["type"] == "info"
    assert deployer.runs == []


async def test_a_reset_during_the_wait_ends_the_run_saying_so(
    tmp_path, feishu, llm_server, deployer
):
    card = await _ask_then_stop(tmp_path, feishu, llm_server, deployer, "om_d6")
    async with Database(settings_for(tmp_path, feishu, llm_server).database_url) as db:
        stored = await CheckpointStore(db).for_message("om_d6")
        await ConversationStore(db).reset(stored.scope_key)
    async with _start(tmp_path, feishu, llm_server, deployer, "second") as bot:
        await bot.wait_for(lambda: _ended(bot, "om_d6"), within=30)
        await bot.settle()
        assert "reset" in answer_text(bot, "om_d6")
        record = await ApprovalStore(bot.services.database).get(card.approve["approval_id"])
        assert record.state == "cancelled"
        late = await bot.click(card.approve, by=ADMIN, card_message_id=card.message_id)
        assert late["toast"]["type"] == "info"
        assert (await bot.services.ledger.get("om_d6")).state == "done"
    assert deployer.runs == []


def _ended(bot: Bot, message_id: str) -> bool:
    live = _live(bot, message_id)
    return bool(live) and not bot.feishu.cards[live[0].card_id].streaming_mode


def _shown(bot: Bot, message: Any) -> str:
    card = bot.feishu.cards[message.card_id].card if message.card_id else message.content
    return json.dumps(card, ensure_ascii=False)


async def test_a_checkpoint_changed_in_the_database_is_not_resumed(
    tmp_path, feishu, llm_server, deployer
):
    """An attacker with the database but not the app secret: the arguments are rewritten
    in the checkpoint (the approval card showed "api"). The seal does not hold: the run ends,
    saying why, and nothing runs, even after a click on the card."""
    card = await _ask_then_stop(tmp_path, feishu, llm_server, deployer, "om_d7")
    async with Database(settings_for(tmp_path, feishu, llm_server).database_url) as db:
        store = CheckpointStore(db)
        stored = await store.for_message("om_d7")
        forged = stored.payload.replace('\\"api\\"', '\\"prod-db\\"').replace(
            '"service":"api"', '"service":"prod-db"'
        )
        assert forged != stored.payload
        await store.save(
            run_id=stored.run_id,
            message_id=stored.message_id,
            scope_key=stored.scope_key,
            generation=stored.generation,
            owner=stored.owner,
            payload=forged,
            seal=stored.seal,
        )
    async with _start(tmp_path, feishu, llm_server, deployer, "second") as bot:
        # Nothing of the payload is trusted, the card's anchor included: the notice goes
        # out in a card of its own.
        def said() -> bool:
            return any("did not verify" in _shown(bot, m) for m in bot.replies_to("om_d7"))

        await bot.wait_for(said, within=30)
        await bot.settle()
        late = await bot.click(card.approve, by=ADMIN, card_message_id=card.message_id)
        assert late["toast"]["type"] == "info"
    assert deployer.runs == []


async def test_a_resealed_checkpoint_with_other_arguments_is_refused_by_the_gate(
    tmp_path, feishu, llm_server, deployer
):
    """Defence in depth: even a checkpoint sealed with the right key (an attacker who has
    the app secret too) cannot run arguments other than those the card showed: the gate
    compares the resumed call with its approval and refuses it."""
    card = await _ask_then_stop(tmp_path, feishu, llm_server, deployer, "om_d8")
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_admins=ADMIN)
    seal = CheckpointSeal(checkpoint_key(settings.governance().button_key))
    async with Database(settings.database_url) as db:
        store = CheckpointStore(db)
        stored = await store.for_message("om_d8")
        from bot.runtime.turn.parking import decode

        parked = decode(stored, seal)
        engine = parked.engine
        (pending,) = engine.pending_calls
        forged_call = type(pending)(pending.id, pending.name, {"service": "prod-db"})
        transcript = list(engine.transcript)
        last = transcript[-1]
        transcript[-1] = type(last)(
            last.role, last.content, tool_calls=(forged_call,), kind=last.kind
        )
        from dataclasses import replace

        forged_engine = replace(
            engine,
            pending_calls=(forged_call,),
            transcript=tuple(transcript),
            context=tuple(transcript),
        )
        payload = encode(replace(parked, engine=forged_engine))
        await store.save(
            run_id=stored.run_id,
            message_id=stored.message_id,
            scope_key=stored.scope_key,
            generation=stored.generation,
            owner=stored.owner,
            payload=payload,
            seal=seal.sign(
                run_id=stored.run_id,
                message_id=stored.message_id,
                scope_key=stored.scope_key,
                generation=stored.generation,
                payload=payload,
            ),
        )
    async with _start(tmp_path, feishu, llm_server, deployer, "second") as bot:
        await bot.reply("om_d8", within=30)
        await bot.settle()
        record = await ApprovalStore(bot.services.database).get(card.approve["approval_id"])
        assert (record.state, record.note) == ("cancelled", TAMPERED_NOTE)
        # The model was told why the call did not run, and said so.
        assert "not the one shown" in answer_text(bot, "om_d8")
    assert deployer.runs == []


async def test_a_model_that_reuses_call_ids_is_asked_for_each_call(
    tmp_path, feishu, llm_server, deployer
):
    """Some models name every call "call_0": a later call of the run must get a card of its
    own, not meet the earlier call's (used) approval."""

    def same_id(body: dict[str, Any]) -> Reply:
        done = [m for m in body["messages"] if m["role"] == "tool"]
        if len(done) < 2:
            return Reply(tool_calls=[("call_0", "deploy", {"service": "api"})])
        return Reply(content="Result: " + " | ".join(m["content"] for m in done))

    llm_server.handler = same_id
    feishu.workspace.add_user(ADMIN, "Ada Admin")
    async with _start(tmp_path, feishu, llm_server, deployer, "only") as bot:
        await bot.say("om_d9", "deploy api twice")
        for round_ in (1, 2):
            await bot.wait_for(lambda r=round_: len(_cards(bot, "om_d9")) == r, within=30)
            card = _cards(bot, "om_d9")[-1]
            await bot.wait_for(lambda c=card: _linked(bot, c), within=15)
            answer = await bot.click(
                value_for(card, "approve"), by=ADMIN, card_message_id=card.message_id
            )
            assert answer["toast"]["type"] == "success"
        await bot.reply("om_d9", within=30)
        await bot.settle()
    assert deployer.runs == ["api", "api"]


def _cards(bot: Bot, message_id: str) -> list[Any]:
    return [m for m in bot.replies_to(message_id) if "Approval" in json.dumps(m.content)]


async def _linked(bot: Bot, card: Any) -> bool:
    approval_id = value_for(card, "approve")["approval_id"]
    record = await ApprovalStore(bot.services.database).get(approval_id)
    return record is not None and record.card_message_id == card.message_id

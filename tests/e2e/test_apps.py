"""Several Feishu apps in one deployment, end to end (``[apps.NAME]``, ``bot/apps.py``).

The emulator holds two bots in one tenant: the default app (``cli_test``, from the
environment) and HR's (``cli_hr``, from larkgate.toml, its secrets in environment
variables). Each answers the chats it is pushed, on its own routes, as its own bot, with
its own conversations and approvals; nothing one app posted can be decided through the
other's route, and a push for one app is refused on the other's.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.app import APP_SERVICES
from bot.engine import tool_from_function
from bot.runtime.intake.bot_peers import LOOP_CUTOFF
from bot.store.approvals import ApprovalStore
from bot.store.audit import AuditLog
from bot.store.conversations import ConversationStore

from e2e.harness import (
    BOT_OPEN_ID,
    ENCRYPT_KEY,
    VERIFICATION_TOKEN,
    Bot,
    running_bot,
    settings_for,
    text_of,
)
from e2e.test_approvals import first_card, value_for
from fakes.feishu_push import card_action_event, message_event, signed_request
from fakes.feishu_server import FakeFeishu, FakeMessage
from fakes.feishu_ws import FakeLongConnection
from fakes.openai_server import FakeOpenAIServer, Reply
from support.cards import callback_values
from support.model_calls import is_synthesis, user_text

HR_APP_ID = "cli_hr"
HR_SECRET = "hr-app-secret"
HR_TOKEN = "vt-hr"
HR_KEY = "ek-hr"
HR_BOT = "ou_hr_bot"  # HR's bot as the tenant's people see it
HR_ADMIN = "ou_hr_admin"  # an open_id in HR's app
ADMIN = "ou_admin"  # an open_id in the default app
HR_INSTRUCTIONS = "You are the HR desk."
GROUP = "oc_all_hands"  # a group both bots are in
PEER_BOT = "ou_peer_bot"  # another company bot HR's app accepts (the default app does not)

CONFIG = f"""
[profiles.hr]
instructions = "{HR_INSTRUCTIONS}"
tools = ["book_leave"]

[apps.hr]
app_id = "{HR_APP_ID}"
app_secret_env = "HR_APP_SECRET"
verification_token_env = "HR_VERIFICATION_TOKEN"
encrypt_key_env = "HR_ENCRYPT_KEY"
profile = "hr"
admins = ["{HR_ADMIN}"]
accept_bots = ["{PEER_BOT}"]
"""


class Booked:
    def __init__(self) -> None:
        self.leave: list[str] = []

    def tools(self) -> list[Any]:
        async def book_leave(day: str) -> str:
            """Book a day of leave."""
            self.leave.append(day)
            return f"leave booked on {day}"

        return [tool_from_function(book_leave, side_effect="write")]


def model(body: dict[str, Any]) -> Reply:
    """Answers "Answer to: <question>"; a question with BOOK calls book_leave first."""
    messages = body["messages"]
    if is_synthesis(body):
        return Reply(content="Result: " + user_text(messages[-1]))
    question = user_text([m for m in messages if m["role"] == "user"][-1])
    if "BOOK" in question and not any(m["role"] == "tool" for m in messages):
        return Reply(tool_calls=[("c0", "book_leave", {"day": "friday"})])
    done = [user_text(m) for m in messages if m["role"] == "tool"]
    return Reply(content="Result: " + done[-1] if done else f"Answer to: {question}")


@pytest.fixture
def hr_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HR_APP_SECRET", HR_SECRET)
    monkeypatch.setenv("HR_VERIFICATION_TOKEN", HR_TOKEN)
    monkeypatch.setenv("HR_ENCRYPT_KEY", HR_KEY)


@pytest.fixture
async def bot(
    tmp_path: Path, feishu: FakeFeishu, llm_server: FakeOpenAIServer, hr_env: None
) -> AsyncIterator[Bot]:
    feishu.add_app(HR_APP_ID, HR_SECRET, HR_BOT, "HR")
    llm_server.handler = model
    config = tmp_path / "larkgate.toml"
    config.write_text(CONFIG, encoding="utf-8")
    settings = settings_for(
        tmp_path,
        feishu,
        llm_server,
        larkgate_config=config,
        larkgate_admins=ADMIN,
        larkgate_group_require_mention="false",
    )
    booked = Booked()
    async with running_bot(settings, feishu, llm_server, tools=booked.tools()) as running:
        running.booked = booked  # type: ignore[attr-defined]
        yield running


async def to_hr(
    bot: Bot, envelope: dict[str, Any], *, path: str = "/feishu/hr/events", key: str = HR_KEY
) -> int:
    body, headers = signed_request(envelope, encrypt_key=key)
    status, _ = await bot.post(path, body, headers)
    return status


def hr_message(message_id: str, text: str, **fields: Any) -> dict[str, Any]:
    fields.setdefault("chat_id", "oc_hr_dm")
    return message_event(
        message_id=message_id,
        text=text,
        verification_token=HR_TOKEN,
        app_id=HR_APP_ID,
        **fields,
    )


def sent_by(bot: Bot, app_id: str, message_id: str) -> list[FakeMessage]:
    return [m for m in bot.replies_to(message_id) if m.sender_id == app_id]


async def answer_from(bot: Bot, app_id: str, message_id: str) -> str:
    await bot.wait_for(lambda: bool(sent_by(bot, app_id, message_id)))
    await bot.settle_reply(message_id)
    return text_of(sent_by(bot, app_id, message_id)[0], bot.feishu)


def hr(bot: Bot) -> Any:
    return bot.app[APP_SERVICES]["hr"]


async def settled(bot: Bot) -> None:
    await bot.settle()
    await bot.wait_for(lambda: not len(hr(bot).in_flight) and not hr(bot).workers.active_runs)


async def test_each_app_answers_its_own_chats_as_its_own_bot(bot: Bot):
    await bot.say("om_default", "what is the deploy status?")
    assert await to_hr(bot, hr_message("om_hr", "how many days of leave do I have?")) == 200
    assert "Answer to: what is the deploy status?" in await answer_from(
        bot, "cli_test", "om_default"
    )
    assert "Answer to: how many days of leave" in await answer_from(bot, HR_APP_ID, "om_hr")
    # Neither answered the other's message, and each learnt its own identity.
    assert not sent_by(bot, HR_APP_ID, "om_default") and not sent_by(bot, "cli_test", "om_hr")
    assert bot.services.identity.known == BOT_OPEN_ID
    assert hr(bot).identity.known == HR_BOT
    # HR's chats run HR's profile (its DMs too); the default app's chats the default agent.
    systems = {
        user_text(r.body["messages"][0])
        for r in bot.llm_server.requests
        if r.body["messages"][0]["role"] == "system"
    }
    assert any(HR_INSTRUCTIONS in s for s in systems)
    assert not all(HR_INSTRUCTIONS in s for s in systems)


async def test_one_message_to_both_bots_is_answered_by_each_in_a_conversation_of_its_own(
    bot: Bot,
):
    """A group message that mentions both bots reaches both apps with the same message id:
    each claims it for itself and answers it once, and each keeps its own history."""
    fields = {"chat_id": GROUP, "chat_type": "group"}
    await bot.say("om_both", "hello both of you", **fields)
    await to_hr(bot, hr_message("om_both", "hello both of you", **fields))
    assert "Answer to: hello both" in await answer_from(bot, "cli_test", "om_both")
    assert "Answer to: hello both" in await answer_from(bot, HR_APP_ID, "om_both")
    # Feishu delivers again (to each): nobody answers twice.
    await bot.say("om_both", "hello both of you", **fields)
    await to_hr(bot, hr_message("om_both", "hello both of you", **fields))
    await settled(bot)
    assert len(sent_by(bot, "cli_test", "om_both")) == 1
    assert len(sent_by(bot, HR_APP_ID, "om_both")) == 1
    conversations = ConversationStore(bot.services.database)
    default = await conversations.load(f"chat:{GROUP}", history_limit=10)
    theirs = await conversations.load(f"app:hr:chat:{GROUP}", history_limit=10)
    assert default.conversation_id != theirs.conversation_id
    for loaded in (default, theirs):
        asked = [entry.content for entry in loaded.history if entry.role == "user"]
        assert len(asked) == 1 and "hello both of you" in asked[0]


def hr_card(bot: Bot, message_id: str) -> FakeMessage:
    (card,) = [m for m in sent_by(bot, HR_APP_ID, message_id) if callback_values(m.content)]
    return card


async def test_each_app_decides_its_own_approvals_and_refuses_the_other_s(bot: Bot):
    await to_hr(bot, hr_message("om_leave", "BOOK me a day off", sender_open_id=HR_ADMIN))
    await bot.wait_for(lambda: bool([m for m in sent_by(bot, HR_APP_ID, "om_leave")
                                     if callback_values(m.content)]))  # fmt: skip
    card = await first_card(bot, "om_leave", app="hr")
    assert card.sender_id == HR_APP_ID  # HR's bot posted it
    approve = value_for(card, "approve")

    # The very click, delivered to the default app's route (signed as the default app is):
    # unknown there, nothing decided, nothing run.
    click = card_action_event(
        verification_token=VERIFICATION_TOKEN,
        value=approve,
        operator_open_id=HR_ADMIN,
        open_message_id=card.message_id,
        open_chat_id="oc_hr_dm",  # where it was asked
    )
    body, headers = signed_request(click, encrypt_key=ENCRYPT_KEY)
    status, answer = await bot.post("/feishu/card", body, headers)
    assert status == 200 and "no longer exists" in answer["toast"]["content"], answer
    # Signed with HR's key but naming the default app: refused before any handler.
    forged = card_action_event(
        verification_token=HR_TOKEN,
        value=approve,
        operator_open_id=HR_ADMIN,
        open_message_id=card.message_id,
        open_chat_id="oc_hr_dm",  # where it was asked
    )
    assert await to_hr(bot, forged, path="/feishu/hr/card") == 403
    record = await ApprovalStore(bot.services.database, app="hr").get(approve["approval_id"])
    assert record is not None and record.state == "pending"
    assert bot.booked.leave == []  # type: ignore[attr-defined]
    # The default app's store does not even see it.
    assert await ApprovalStore(bot.services.database).get(approve["approval_id"]) is None

    # On its own route, by HR's admin: decided, and the call runs.
    own = card_action_event(
        verification_token=HR_TOKEN,
        value=approve,
        operator_open_id=HR_ADMIN,
        open_message_id=card.message_id,
        open_chat_id="oc_hr_dm",  # where it was asked
        app_id=HR_APP_ID,
    )
    body, headers = signed_request(own, encrypt_key=HR_KEY)
    status, answer = await bot.post("/feishu/hr/card", body, headers)
    assert status == 200, answer
    await bot.wait_for(lambda: bot.booked.leave == ["friday"])  # type: ignore[attr-defined]
    await settled(bot)
    entries = await AuditLog(bot.services.database).recent(action="approval.")
    assert [(e.action, e.app) for e in entries] == [("approval.approved", "hr")]


async def test_a_push_for_one_app_is_refused_on_the_other_s_route(bot: Bot):
    # HR's message, encrypted and signed with HR's key, on the default app's route: it can
    # neither be verified nor decrypted there.
    assert await to_hr(bot, hr_message("om_x", "hi"), path="/feishu/events") in (400, 401)
    # The default app's message (its app_id) signed with HR's key on HR's route: refused.
    envelope = message_event(
        message_id="om_y", text="hi", chat_id="oc_dm", verification_token=HR_TOKEN
    )
    assert await to_hr(bot, envelope) == 403
    await settled(bot)
    assert bot.feishu.sent == []


async def test_healthz_names_each_app_s_bot(bot: Bot):
    await bot.wait_for(lambda: hr(bot).identity.known == HR_BOT)
    async with bot.session.get(bot.url + "/healthz") as response:
        body = json.loads(await response.text())
    assert body["bot_open_id"] == BOT_OPEN_ID
    assert body["apps"] == {"hr": {"bot_open_id": HR_BOT, "event_mode": "webhook"}}


async def test_each_app_answers_the_bots_it_accepts_and_counts_its_own_loop(bot: Bot):
    """accept_bots is per app: HR's bot answers the peer bot that mentions it; the default
    app, which accepts no bot, is silent to the same message. The loop count is HR's own."""
    fields = {
        "chat_id": GROUP,
        "chat_type": "group",
        "sender_open_id": PEER_BOT,
        "sender_type": "app",
    }
    await to_hr(
        bot,
        hr_message("om_peer", "@_user_1 status?", mentions=[("@_user_1", HR_BOT, "HR")], **fields),
    )
    await bot.say(
        "om_peer", "@_user_1 status?", mentions=[("@_user_1", BOT_OPEN_ID, "lg")], **fields
    )
    await bot.wait_for(lambda: bool(sent_by(bot, HR_APP_ID, "om_peer")))
    await settled(bot)
    (reply,) = sent_by(bot, HR_APP_ID, "om_peer")
    assert reply.msg_type == "text" and reply.content["text"].startswith(
        f'<at user_id="{PEER_BOT}">'
    )
    assert sent_by(bot, "cli_test", "om_peer") == []
    # Three more from the peer in a row: HR stops after its hops and says so once.
    for n in range(2, 6):
        await to_hr(
            bot,
            hr_message(
                f"om_peer{n}", "@_user_1 and?", mentions=[("@_user_1", HR_BOT, "HR")], **fields
            ),
        )
        await settled(bot)
    answered = [n for n in range(2, 6) if sent_by(bot, HR_APP_ID, f"om_peer{n}")]
    assert answered == [2, 3, 4]
    (notice,) = sent_by(bot, HR_APP_ID, "om_peer4")
    assert LOOP_CUTOFF.split("{")[0][:20] in text_of(notice, bot.feishu)


async def test_an_app_on_the_long_connection_answers_its_own_events(
    tmp_path: Path, llm_server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
):
    """HR in ws mode beside the default app on webhooks: HR opens its own connection with
    its own credentials, and what comes over it is answered by HR's bot."""
    gateway = FakeLongConnection("cli_test", "secret")
    gateway.other_apps[HR_APP_ID] = HR_SECRET
    monkeypatch.setenv("HR_APP_SECRET", HR_SECRET)
    config = tmp_path / "larkgate.toml"
    config.write_text(
        f'[apps.hr]\napp_id = "{HR_APP_ID}"\napp_secret_env = "HR_APP_SECRET"\nevent_mode = "ws"\n',
        encoding="utf-8",
    )
    fake = FakeFeishu(gateway.app_id, gateway.app_secret, bot_open_id=BOT_OPEN_ID)
    fake.add_routes(gateway.routes(), public=True)
    fake.add_app(HR_APP_ID, HR_SECRET, HR_BOT, "HR")
    async with fake:
        settings = settings_for(tmp_path, fake, llm_server, larkgate_config=config)
        async with running_bot(settings, fake, llm_server) as running:
            await gateway.wait_connections(1, app_id=HR_APP_ID)
            assert [c.app_id for c in gateway.connections] == [HR_APP_ID]
            envelope = hr_message("om_ws_hr", "hello over ws")
            frame = await gateway.push_event(envelope, app_id=HR_APP_ID)
            assert (await gateway.response_to(frame)).code == 200
            assert "Answer to: hello over ws" in await answer_from(running, HR_APP_ID, "om_ws_hr")
            async with running.session.get(running.url + "/healthz") as response:
                health = json.loads(await response.text())
            assert health["apps"]["hr"]["event_mode"] == "ws"

"""What is shown in a chat is seen by everyone in it: an admin's view of scheduled tasks in a
group shows only that group's tasks, never a prompt set in a direct message or another chat
(those are counted, with a hint to ask in a DM), through the model's tool, the /schedules
card and the card's redraw after a click. In a direct message an admin still sees everyone's.
"""

from __future__ import annotations

import json
from typing import Any

from bot.feishu.schedules_card import cancel_value
from bot.governance.seal import SEAL_FIELD, ButtonSeal

from e2e.harness import BOT_OPEN_ID, Bot, running_bot, settings_for
from fakes.openai_server import Reply
from support.cards import callback_values
from support.model_calls import is_synthesis
from support.schedules import daily_task

ADMIN, BOB, CAROL = "ou_admin", "ou_bob", "ou_carol"
GROUP_ID, OTHER_GROUP, BOBS_DM, ADMINS_DM = "oc_team", "oc_other", "oc_dm_bob", "oc_dm_admin"
MENTION = [("@_user_1", BOT_OPEN_ID, "larkgate")]
IN_GROUP = {"chat_type": "group", "chat_id": GROUP_ID, "mentions": MENTION}
IN_DM = {"chat_type": "p2p", "chat_id": ADMINS_DM}
PRIVATE = "Book the clinic about my back"  # Bob's, set in his DM
OTHERS = "Chase the Q3 invoices"  # Carol's, in another group
HERE = "Post the standup notes"  # Bob's, in this group


async def add(bot: Bot, creator: str, chat_id: str, chat_type: str, prompt: str) -> Any:
    return await daily_task(
        bot.services.schedules,
        creator=creator,
        chat_id=chat_id,
        chat_type=chat_type,
        prompt=prompt,
    )


async def three_tasks(bot: Bot) -> Any:
    await add(bot, BOB, BOBS_DM, "p2p", PRIVATE)
    await add(bot, CAROL, OTHER_GROUP, "group", OTHERS)
    return await add(bot, BOB, GROUP_ID, "group", HERE)


def listing(body: dict[str, Any]) -> Reply:
    seen = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if is_synthesis(body):
        return Reply(content="Result: " + body["messages"][-1]["content"][-2000:])
    if not seen:
        return Reply(tool_calls=[("c0", "list_scheduled_tasks", {})])
    return Reply(content="Listed: " + seen[-1])


def last_observation(bot: Bot) -> str:
    """The last tool result the model was sent."""
    return [
        m["content"]
        for request in bot.llm_server.requests
        for m in request.body["messages"]
        if m["role"] == "tool"
    ][-1]


async def test_an_admins_list_in_a_group_shows_that_groups_tasks_only(tmp_path, feishu, llm_server):
    llm_server.handler = listing
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_admins=ADMIN)
    async with running_bot(settings, feishu, llm_server) as bot:
        await three_tasks(bot)
        await bot.say(
            "om_group", "@_user_1 list the scheduled tasks", sender_open_id=ADMIN, **IN_GROUP
        )
        shown = await bot.reply("om_group")
        listed = last_observation(bot)
        assert HERE in listed
        assert PRIVATE not in listed and OTHERS not in listed
        assert PRIVATE not in shown and OTHERS not in shown
        assert "2 more scheduled tasks in other chats" in listed
        assert "direct message" in listed
        await bot.settle()
        # In the admin's direct message: everyone's, as before.
        await bot.say("om_dm", "list the scheduled tasks", sender_open_id=ADMIN, **IN_DM)
        await bot.reply("om_dm")
        listed = last_observation(bot)
        assert all(prompt in listed for prompt in (PRIVATE, OTHERS, HERE))
        assert "more scheduled task" not in listed


def card_text(card: dict[str, Any]) -> str:
    return json.dumps(card, ensure_ascii=False)


async def schedules_card(bot: Bot, message_id: str, sender: str, where: dict[str, Any]) -> Any:
    text = "@_user_1 /schedules" if where.get("mentions") else "/schedules"
    await bot.say(message_id, text, sender_open_id=sender, **where)
    await bot.wait_for(lambda: bool(bot.replies_to(message_id)))
    return bot.replies_to(message_id)[0]


async def test_an_admins_schedules_card_in_a_group_and_its_redraw_never_show_a_dm_prompt(
    tmp_path, feishu, llm_server
):
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_admins=ADMIN)
    async with running_bot(settings, feishu, llm_server) as bot:
        here = await three_tasks(bot)
        card = await schedules_card(bot, "om_list", ADMIN, IN_GROUP)
        drawn = card_text(card.content)
        assert HERE in drawn and PRIVATE not in drawn and OTHERS not in drawn
        assert "2 more scheduled tasks" in drawn
        (value,) = [v for v in callback_values(card.content) if v.get("op") == "cancel"]
        assert value["task_id"] == here.id

        # A click in the group redraws the group's view.
        answer = await bot.click(value, by=ADMIN, card_message_id=card.message_id, chat_id=GROUP_ID)
        assert answer["toast"]["type"] == "success"
        redrawn = card_text(answer["card"]["data"])
        assert PRIVATE not in redrawn and OTHERS not in redrawn
        assert "2 more scheduled tasks" in redrawn and f"Cancelled “{HERE}”" in redrawn


async def test_a_button_value_that_claims_a_dm_redraws_a_group_as_a_group(
    tmp_path, feishu, llm_server
):
    """The value says where the card was drawn; only this bot's seal, for this very chat,
    makes a redraw a direct message's (everyone's tasks, for an admin)."""
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_admins=ADMIN)
    seal = ButtonSeal(settings.governance().button_key)
    # As the bot writes it on an admin's DM card (for a task gone since: nothing is
    # cancelled, the card is only redrawn).
    dms = seal.sealed(cancel_value("no-such-task", drawn_in=ADMINS_DM, private=True))
    async with running_bot(settings, feishu, llm_server) as bot:
        await three_tasks(bot)

        async def redrawn(value: dict[str, Any], chat_id: str, event_id: str) -> str:
            answer = await bot.click(
                value, by=ADMIN, card_message_id="om_card", chat_id=chat_id, event_id=event_id
            )
            assert answer["toast"]["type"] == "warning"  # "That task no longer exists."
            return card_text(answer["card"]["data"])

        # In its own DM: everyone's, as before.
        assert PRIVATE in await redrawn(dms, ADMINS_DM, "evt_own")
        # The DM card clicked in the group (forwarded), a value that names the group as a
        # DM without this bot's seal, and one with no seal at all: the group's view.
        forged = {**dms, "chat": GROUP_ID}
        unsealed = {key: value for key, value in forged.items() if key != SEAL_FIELD}
        for number, value in enumerate((dms, forged, unsealed)):
            shown = await redrawn(value, GROUP_ID, f"evt_group_{number}")
            assert HERE in shown, number
            assert PRIVATE not in shown and OTHERS not in shown, number


async def test_in_a_dm_a_click_redraws_everyones_tasks_for_an_admin(tmp_path, feishu, llm_server):
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_admins=ADMIN)
    async with running_bot(settings, feishu, llm_server) as bot:
        here = await three_tasks(bot)
        card = await schedules_card(bot, "om_dm_list", ADMIN, IN_DM)
        (value,) = [v for v in callback_values(card.content) if v.get("task_id") == here.id]
        answer = await bot.click(
            value, by=ADMIN, card_message_id=card.message_id, chat_id=ADMINS_DM
        )
        assert answer["toast"]["type"] == "success"
        redrawn = card_text(answer["card"]["data"])
        assert PRIVATE in redrawn and OTHERS in redrawn and f"Cancelled “{HERE}”" in redrawn

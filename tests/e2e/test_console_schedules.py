"""The web console's scheduled tasks: everyone's listed, cancelled as the admin and audited."""

from __future__ import annotations

import time
from typing import Any

from e2e.harness import Bot, running_bot, settings_for
from e2e.test_approvals import ADMIN
from e2e.test_console import AUTH, TOKEN, get_json, post_json


async def add_task(bot: Bot, *, creator: str, name: str, **fields: Any):
    """A task straight into the store, as the schedule_task tool would have made it."""
    values: dict[str, Any] = {
        "prompt": f"{name}, please",
        "chat_id": "oc_team",
        "chat_type": "group",
        "thread_id": "",
        "reply_to": "",
        "kind": "cron",
        "expression": "0 9 * * 1-5",
        "timezone": "Asia/Shanghai",
        "next_run_at": time.time() + 86_400,
        "created_in_run": "",
        "max_per_creator": 20,
        **fields,
    }
    return await bot.services.schedules.create(name=name, creator=creator, **values)


async def test_the_console_lists_every_task_and_cancels_as_the_admin(tmp_path, feishu, llm_server):
    settings = settings_for(
        tmp_path, feishu, llm_server, larkgate_console_token=TOKEN, larkgate_admins=ADMIN
    )
    async with running_bot(settings, feishu, llm_server) as bot:
        assert (await get_json(bot, "/api/schedules"))["schedules"] == []
        digest = await add_task(bot, creator="ou_li", name="Morning digest")
        report = await add_task(bot, creator="ou_wang", name="Weekly report", chat_id="oc_dm")
        listed = (await get_json(bot, "/api/schedules"))["schedules"]
        assert [t["id"] for t in listed] == [digest.id, report.id]  # everyone's, oldest first
        first = listed[0]
        assert (first["name"], first["creator"], first["chat_id"]) == (
            "Morning digest",
            "ou_li",
            "oc_team",
        )
        assert first["schedule"] == "every weekday at 09:00 (Asia/Shanghai)"
        assert first["next_run_at"] == digest.next_run_at and first["state"] == "active"
        assert (first["last_run_at"], first["last_outcome"]) == (None, None)

        cancelled = await post_json(bot, f"/api/schedules/{digest.id}/cancel")
        assert cancelled["outcome"] == "cancelled"
        assert cancelled["schedule"]["state"] == "cancelled"
        assert (await bot.services.schedules.get(digest.id)).state == "cancelled"
        assert [t["id"] for t in (await get_json(bot, "/api/schedules"))["schedules"]] == [
            report.id
        ]
        again = await post_json(bot, f"/api/schedules/{digest.id}/cancel", status=409)
        assert again["outcome"] == "closed" and again["schedule"]["state"] == "cancelled"
        await post_json(bot, "/api/schedules/nope/cancel", status=404)

        # One audit row, naming the admin the console acted as (the repeat left none).
        audit = (await get_json(bot, "/api/audit?action=schedule."))["entries"]
        assert [(a["action"], a["actor"], a["target"], a["chat_id"]) for a in audit] == [
            ("schedule.cancelled", ADMIN, digest.id, "oc_team")
        ]
        assert audit[0]["detail"] == {
            "via": "console",
            "name": "Morning digest",
            "creator": "ou_li",
        }


async def test_cancelling_without_an_admin_is_refused(tmp_path, feishu, llm_server):
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_console_token=TOKEN)
    async with running_bot(settings, feishu, llm_server) as bot:
        task = await add_task(bot, creator="ou_li", name="Reminder")
        refused = await post_json(bot, f"/api/schedules/{task.id}/cancel", status=403)
        assert refused["outcome"] == "forbidden" and "LARKGATE_ADMINS" in refused["error"]
        assert (await bot.services.schedules.get(task.id)).state == "active"
        assert (await get_json(bot, "/api/audit"))["entries"] == []


async def test_the_schedule_routes_need_the_token(tmp_path, feishu, llm_server):
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_console_token=TOKEN)
    async with running_bot(settings, feishu, llm_server) as bot:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            async with bot.session.get(bot.url + "/api/schedules", headers=headers) as resp:
                assert resp.status == 401
            async with bot.session.post(bot.url + "/api/schedules/x/cancel", headers=headers) as r:
                assert r.status == 401
        async with bot.session.get(bot.url + "/api/schedules", headers=AUTH) as resp:
            assert resp.status == 200

"""The Feishu workspace tools, driven like the agent drives them, against the fake Feishu.

Each tool runs through its engine ``Tool`` (schema validation, then the handler), the
real ``FeishuClient`` and lark-oapi's request builders, over HTTP to ``FakeFeishu``, inside
a turn of Alice's direct chat with the bot unless a test says whose turn it is (what each
tool reads for whom: ``test_feishu_outsiders.py``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from lark_oapi.api.calendar.v4 import ListCalendarEventRequest
from lark_oapi.api.im.v1 import ListChatRequest, ListMessageRequest
from lark_oapi.api.task.v2 import CreateTaskRequest, InputTask

from bot.config import FeishuConfig
from bot.engine import Tool, ToolError
from bot.engine.tools import ToolArgumentsError
from bot.feishu import FeishuClient, FeishuError
from bot.turn_context import TurnContext
from connectors.base import ConnectorContext
from connectors.feishu import FeishuWorkspace, FeishuWorkspaceSettings
from connectors.mcp_names import builtin_tool_names

from fakes.feishu_server import BOT_CALENDAR_ID, FakeFeishu
from support.asked_turns import dm, serving

READS = {
    "feishu_search_users",
    "feishu_list_chats",
    "feishu_get_chat_history",
    "feishu_list_calendar_events",
    "feishu_list_tasks",
    "feishu_search_bitable_records",
    "feishu_read_document",
    # As the asking person (tests/connector_tools/test_feishu_as_user.py).
    "feishu_my_calendar_events",
    "feishu_my_free_busy",
    "feishu_my_tasks",
    "feishu_my_search_docs",
    "feishu_my_search_messages",
}
WRITES = {
    "feishu_send_message",
    "feishu_create_calendar_event",
    "feishu_create_task",
    "feishu_create_bitable_record",
    "feishu_create_document",
    "feishu_send_file",
    "feishu_send_chart",
    "feishu_my_create_event",
    "feishu_my_create_task",
    "feishu_my_complete_task",
}
BASE = {"app_token": "bascnFakeProjects", "table_id": "tblFakeTasks"}
SHANGHAI = ZoneInfo("Asia/Shanghai")
ALICE, BOB = "ou_fake_alice", "ou_fake_bob"


def config_for(fake: FakeFeishu) -> FeishuConfig:
    return FeishuConfig(
        app_id=fake.app_id,
        app_secret=fake.app_secret,
        verification_token="vt",
        encrypt_key="ek",
        domain=fake.domain,
    )


@pytest.fixture
async def fake() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu() as server:
        yield server


@pytest.fixture
async def client(fake: FakeFeishu) -> AsyncIterator[FeishuClient]:
    async with FeishuClient(config_for(fake), timeout=5.0) as feishu:
        yield feishu


def make_workspace(client: FeishuClient | None, **settings: Any) -> FeishuWorkspace:
    return FeishuWorkspace(FeishuWorkspaceSettings(**settings), ConnectorContext(feishu=client))


@pytest.fixture
def tools(client: FeishuClient) -> dict[str, Tool]:
    return {tool.name: tool for tool in make_workspace(client).tools()}


async def run(
    tools: dict[str, Tool], name: str, *, turn: TurnContext | None = None, **arguments: Any
) -> str:
    """What the engine does: validate against the schema, then call the handler, in the
    run of ``turn`` (Alice's direct message by default)."""
    tool = tools[name]
    with serving(turn or dm(ALICE)):
        result = await tool.handler(**tool.validate_arguments(arguments))
    assert isinstance(result, str)
    return result


async def refused(tools: dict[str, Tool], name: str, **arguments: Any) -> str:
    with pytest.raises(ToolError) as caught:
        await run(tools, name, **arguments)
    return str(caught.value)


def last(fake: FakeFeishu, method: str, path: str) -> Any:
    return next(r for r in reversed(fake.requests) if r.method == method and r.path == path)


def at(days: int, hour: int) -> str:
    """An ISO time ``days`` from today at ``hour`` o'clock, Shanghai time, no offset."""
    day = datetime.now(SHANGHAI).date() + timedelta(days=days)
    return f"{day.isoformat()}T{hour:02d}:00"


# -- the tool set ------------------------------------------------------------------------


def test_exactly_the_tools_with_their_side_effects(tools: dict[str, Tool]) -> None:
    assert set(tools) == READS | WRITES
    assert {name for name, tool in tools.items() if tool.side_effect == "read"} == READS
    assert {name for name, tool in tools.items() if tool.side_effect == "write"} == WRITES
    # Read from the package's source, so that no MCP tool may take one of these names.
    assert {n for n, c in builtin_tool_names().items() if c == "feishu"} == READS | WRITES


def test_schemas_say_what_the_model_must_pass(tools: dict[str, Tool]) -> None:
    send = tools["feishu_send_message"].parameters
    assert send["required"] == ["receive_id", "text"]
    assert send["properties"]["uuid"]["anyOf"][0]["maxLength"] == 50
    assert "idempotent" in tools["feishu_send_message"].description
    search = tools["feishu_search_bitable_records"].parameters
    assert search["required"] == ["app_token", "table_id"]
    condition = search["$defs"]["BitableCondition"]["properties"]
    assert "isGreater" in condition["operator"]["enum"]
    history = tools["feishu_get_chat_history"].parameters["properties"]
    assert history["limit"]["anyOf"][0]["maximum"] == 200
    assert "ISO 8601" in history["start_time"]["description"]
    with pytest.raises(ToolArgumentsError):
        tools["feishu_list_chats"].validate_arguments({"limit": 0})


def test_settings_reject_an_unknown_time_zone() -> None:
    with pytest.raises(ValueError, match="time zone"):
        FeishuWorkspaceSettings(timezone="Mars/Olympus")
    assert FeishuWorkspaceSettings().calendar_id == "primary"


# -- people and chats ------------------------------------------------------------------


async def test_search_users_by_email_and_mobile(fake, tools) -> None:
    text = await run(
        tools,
        "feishu_search_users",
        query="alice@example.com, +86 138-0000-0002, ghost@example.com",
    )

    assert "Alice Wang · open_id ou_fake_alice · alice@example.com" in text
    assert "Bob Li · open_id ou_fake_bob" in text and "matched +86 138-0000-0002" in text
    assert "for: ghost@example.com" in text
    lookup = last(fake, "POST", "/open-apis/contact/v3/users/batch_get_id")
    assert lookup.query["user_id_type"] == "open_id"
    assert lookup.json["emails"] == ["alice@example.com", "ghost@example.com"]
    assert lookup.json["mobiles"] == ["+86 138-0000-0002"]


async def test_search_users_by_name_scans_the_department(fake, tools) -> None:
    text = await run(tools, "feishu_search_users", query="bob")
    assert "Bob Li · open_id ou_fake_bob · bob@example.com · Product manager" in text
    assert "Alice" not in text
    scan = last(fake, "GET", "/open-apis/contact/v3/users/find_by_department")
    assert scan.query["department_id"] == "0"
    assert scan.query["page_size"] == "50"

    # Zhang Wei works in another department: the answer says why he is not found.
    text = await run(tools, "feishu_search_users", query="Zhang")
    assert "No user matching" in text and "email or mobile" in text


async def test_search_users_by_name_pages_through_members(fake, client) -> None:
    for n in range(120):
        fake.workspace.add_user(f"ou_extra_{n:03d}", f"Extra {n:03d}")
    fake.workspace.add_user("ou_extra_last", "Zoe Needle")
    tools = {t.name: t for t in make_workspace(client, user_search_max_pages=3).tools()}

    text = await run(tools, "feishu_search_users", query="needle")

    assert "Zoe Needle" in text
    assert fake.count("GET", "find_by_department$") == 3


async def test_list_chats_pages_on(fake, tools) -> None:
    text = await run(tools, "feishu_list_chats")
    assert "Engineering · chat_id oc_fake_eng · Backend and infra" in text
    assert "oc_fake_launch" in text
    assert "oc_fake_hr" not in text  # the bot is not in it
    assert "oc_fake_board" not in text  # Alice is not in it

    for n in range(5):
        fake.workspace.add_chat(f"oc_more_{n}", f"More {n}", members={ALICE})
    first = await run(tools, "feishu_list_chats", limit=5)
    token = first.rpartition("page_token=")[2].rstrip("]")
    rest = await run(tools, "feishu_list_chats", limit=5, page_token=token)
    assert "More 0" in first and "More 0" not in rest and "More 4" in rest
    assert last(fake, "GET", "/open-apis/im/v1/chats").query["sort_type"] == "ByActiveTimeDesc"


async def test_the_configured_page_size_is_the_default_limit(fake, client) -> None:
    tools = {t.name: t for t in make_workspace(client, page_size=1).tools()}
    text = await run(tools, "feishu_list_chats")
    assert "(1 shown)" in text and "page_token=" in text
    assert last(fake, "GET", "/open-apis/im/v1/chats").query["page_size"] == "1"


async def test_chat_history_newest_first_with_names_and_content(fake, tools) -> None:
    text = await run(tools, "feishu_get_chat_history", chat_id="oc_fake_eng")

    lines = text.splitlines()
    assert lines[0].startswith("Last 4 messages in chat oc_fake_eng (newest first")
    assert lines[1].endswith("Bob Li (ou_fake_bob): @Alice Wang can you review the migration?")
    assert lines[2].endswith("Alice Wang (ou_fake_alice): [image]")
    # Posts read through bot.feishu.post, one line: the title, then each paragraph.
    post = (
        "Release notes / v2.3 ships on Friday, @Alice Wang / changelog (https://example.invalid/cl)"
    )
    assert lines[3].endswith(f"Bob Li (ou_fake_bob): {post}")
    assert lines[4].endswith("Standup moved to 10:30 tomorrow")
    query = last(fake, "GET", "/open-apis/im/v1/messages").query
    assert query["container_id_type"] == "chat"
    assert query["sort_type"] == "ByCreateTimeDesc"


async def test_chat_history_limit_time_range_and_recalled(fake, tools) -> None:
    now_ms = fake.message_by_id["om_fake_hist_4"].create_time_ms
    fake.message_by_id["om_fake_hist_3"].deleted = True
    text = await run(tools, "feishu_get_chat_history", chat_id="oc_fake_eng", limit=2)
    assert len(text.splitlines()) == 3
    assert "[recalled]" in text

    since = str(now_ms // 1000 - 1500)  # 25 minutes before the newest message
    text = await run(tools, "feishu_get_chat_history", chat_id="oc_fake_eng", start_time=since)
    assert "review the migration" in text and "Standup" not in text


async def test_chat_history_of_unknown_or_foreign_chats(fake, tools) -> None:
    # A chat nobody knows, and one the bot is not in (Bob is), read the same: Feishu will
    # not list their members, so nobody is confirmed a member, and nothing is read.
    for chat_id, asker in (("oc_does_not_exist", ALICE), ("oc_fake_hr", BOB)):
        with pytest.raises(ToolError) as caught:
            await run(tools, "feishu_get_chat_history", turn=dm(asker), chat_id=chat_id)
        assert "Nothing was read" in str(caught.value)
        assert "or the bot is not in that chat" in str(caught.value)
    assert fake.count("GET", "/im/v1/messages$") == 0


async def test_send_message_then_read_it_back(fake, tools) -> None:
    text = await run(tools, "feishu_send_message", receive_id="oc_fake_eng", text="Deploy done")

    assert text.startswith("Sent message om_") and "chat_id oc_fake_eng" in text
    sent = fake.sent[-1]
    assert (sent.chat_id, sent.msg_type, sent.content) == (
        "oc_fake_eng",
        "text",
        {"text": "Deploy done"},
    )
    assert sent.uuid
    history = await run(tools, "feishu_get_chat_history", chat_id="oc_fake_eng", limit=1)
    assert history.splitlines()[1].endswith(f"app {fake.app_id}: Deploy done")


async def test_send_message_is_idempotent(fake, tools) -> None:
    first = await run(tools, "feishu_send_message", receive_id="oc_fake_eng", text="Once")
    again = await run(tools, "feishu_send_message", receive_id="oc_fake_eng", text="Once")
    assert first == again
    assert len(fake.sent) == 1

    keyed = await run(
        tools, "feishu_send_message", receive_id="oc_fake_eng", text="A", uuid="retry-key-1"
    )
    resent = await run(
        tools, "feishu_send_message", receive_id="oc_fake_eng", text="B", uuid="retry-key-1"
    )
    assert keyed.split()[2] == resent.split()[2]  # the same message id
    assert [m.content for m in fake.sent] == [{"text": "Once"}, {"text": "A"}]


async def test_send_markdown_to_a_person(fake, tools) -> None:
    await run(
        tools, "feishu_send_message", receive_id="ou_fake_alice", text="**Hi**", format="markdown"
    )

    request = last(fake, "POST", "/open-apis/im/v1/messages")
    assert request.query["receive_id_type"] == "open_id"
    sent = fake.sent[-1]
    assert sent.msg_type == "post"
    assert sent.content == {"zh_cn": {"title": "", "content": [[{"tag": "md", "text": "**Hi**"}]]}}


async def test_posts_in_history_read_as_the_bot_reads_posts(fake, tools) -> None:
    await run(
        tools, "feishu_send_message", receive_id="oc_fake_eng", text="**Done**", format="markdown"
    )
    # An `at` tag with only its placeholder takes its name from the message's mentions.
    at_post = [
        [{"tag": "at", "user_id": "@_user_1", "user_name": ""}, {"tag": "text", "text": " see "}],
        [{"tag": "img", "image_key": "img_v3_x"}, {"tag": "code_block", "text": "make\n"}],
    ]
    message = fake.add_message(
        "om_post_at",
        chat_id="oc_fake_eng",
        chat_type="group",
        msg_type="post",
        content={"title": "", "content": at_post},
        sender_open_id="ou_fake_bob",
    )
    message.mentions = [
        {"key": "@_user_1", "id": "ou_fake_alice", "id_type": "open_id", "name": "Alice Wang"}
    ]

    history = await run(tools, "feishu_get_chat_history", chat_id="oc_fake_eng", limit=2)

    assert f"app {fake.app_id}: **Done**" in history
    assert "Bob Li (ou_fake_bob): @Alice Wang see / [image] / ``` / make / ```" in history


async def test_send_message_to_bad_recipients(fake, tools) -> None:
    error = await refused(tools, "feishu_send_message", receive_id="12345", text="x")
    assert "receive_id_type" in error

    error = await refused(tools, "feishu_send_message", receive_id="oc_fake_hr", text="x")
    assert "not a member of that chat" in error

    fake.strict = True
    error = await refused(tools, "feishu_send_message", receive_id="oc_nowhere", text="x")
    assert "chat_id that does not exist" in error
    assert fake.sent == []


# -- calendar ----------------------------------------------------------------------------


async def test_list_events_of_the_bots_calendar(fake, tools) -> None:
    text = await run(tools, "feishu_list_calendar_events")

    assert f"Events on calendar {BOT_CALENDAR_ID}" in text
    assert "Weekly sync · Room 301 · Agenda in the doc" in text
    assert "Design review" in text and "Team offsite" in text and "(all day)" in text
    assert "Retro" not in text  # three days ago
    assert "Cancelled 1:1" not in text
    assert text.index("Weekly sync") < text.index("Design review") < text.index("Team offsite")
    query = last(fake, "GET", f"/open-apis/calendar/v4/calendars/{BOT_CALENDAR_ID}/events").query
    assert int(query["end_time"]) - int(query["start_time"]) == 7 * 24 * 3600
    assert 50 <= int(query["page_size"]) <= 1000

    await run(tools, "feishu_list_calendar_events", start=at(-4, 0), end=at(0, 0))
    assert fake.count("POST", "/calendars/primary$") == 1  # looked up once


async def test_create_event_shows_up_and_is_idempotent(fake, tools) -> None:
    args = {
        "summary": "Planning",
        "start": at(10, 14),
        "end": at(10, 15),
        "location": "Room 5",
        "attendees": ["ou_fake_alice", "oc_fake_launch"],
    }
    text = await run(tools, "feishu_create_calendar_event", **args)
    again = await run(tools, "feishu_create_calendar_event", **args)

    assert 'Created event "Planning"' in text and "Invited: Alice Wang, Launch 2025." in text
    assert text.splitlines()[0] == again.splitlines()[0]
    events = [
        e for e in fake.workspace.calendars[BOT_CALENDAR_ID].events if e.summary == "Planning"
    ]
    assert len(events) == 1
    assert events[0].start["timezone"] == "Asia/Shanghai"
    assert {a.get("user_id") or a.get("chat_id") for a in events[0].attendees} == {
        "ou_fake_alice",
        "oc_fake_launch",
    }
    listed = await run(tools, "feishu_list_calendar_events", start=at(10, 0), end=at(11, 0))
    assert "14:00–15:00 · Planning · Room 5" in listed


async def test_create_event_checks_times_and_reports_failed_invites(fake, tools) -> None:
    error = await refused(
        tools, "feishu_create_calendar_event", summary="x", start=at(1, 10), end=at(1, 9)
    )
    assert "end must be after start" in error
    error = await refused(tools, "feishu_create_calendar_event", summary="x", start="next tuesday")
    assert "ISO 8601" in error

    text = await run(
        tools,
        "feishu_create_calendar_event",
        summary="Solo",
        start="2031-01-01T09:00+00:00",
        attendees=["ou_nobody"],
    )
    assert "event exists, but no one was invited" in text
    assert "17:00 to 2031-01-01 18:00" in text  # 09:00 UTC shown in Shanghai time


async def test_only_the_bots_own_calendar_is_read(fake, tools) -> None:
    error = await refused(
        tools,
        "feishu_list_calendar_events",
        calendar_id="feishu.cn_fakeprivate@group.calendar.feishu.cn",
    )
    assert "reads only the bot's own calendar" in error
    assert fake.count("GET", "fakeprivate") == 0
    by_id = await run(tools, "feishu_list_calendar_events", calendar_id=BOT_CALENDAR_ID)
    assert "Weekly sync" in by_id


async def test_the_configured_calendar_the_app_cannot_read(fake, client) -> None:
    private = "feishu.cn_fakeprivate@group.calendar.feishu.cn"
    tools = {t.name: t for t in make_workspace(client, calendar_id=private).tools()}
    error = await refused(tools, "feishu_list_calendar_events")
    assert "no access to that calendar" in error


# -- tasks -------------------------------------------------------------------------------


async def test_list_tasks_the_app_created_and_of_a_tasklist(fake, tools) -> None:
    mine = await run(tools, "feishu_list_tasks")
    assert "created by this app" in mine
    assert "- [ ] Prepare launch checklist · due " in mine and "- [x] Renew TLS certificate" in mine
    assert "Book the venue" not in mine  # a person created it

    open_only = await run(tools, "feishu_list_tasks", completed=False)
    assert "Renew TLS" not in open_only
    assert last(fake, "GET", "/open-apis/task/v1/tasks").query["task_completed"] == "False"

    listed = await run(tools, "feishu_list_tasks", tasklist_guid="fake-tasklist-launch")
    assert "Book the venue" in listed and "Prepare launch checklist" in listed

    error = await refused(tools, "feishu_list_tasks", tasklist_guid="fake-tasklist-secret")
    assert "must be a member" in error
    error = await refused(tools, "feishu_list_tasks", tasklist_guid="nope")
    assert "does not exist" in error


async def test_create_task_shows_up_and_is_idempotent(fake, tools) -> None:
    args = {
        "summary": "Write the runbook",
        "due": "2031-03-01T18:00",
        "assignees": ["ou_fake_bob"],
        "tasklist_guid": "fake-tasklist-launch",
    }
    text = await run(tools, "feishu_create_task", **args)
    await run(tools, "feishu_create_task", **args)

    assert 'Created task "Write the runbook"' in text and "Assigned to ou_fake_bob." in text
    body = last(fake, "POST", "/open-apis/task/v2/tasks").json
    assert body["members"] == [{"id": "ou_fake_bob", "type": "user", "role": "assignee"}]
    assert body["tasklists"] == [{"tasklist_guid": "fake-tasklist-launch"}]
    due = datetime(2031, 3, 1, 18, tzinfo=SHANGHAI)
    assert int(body["due"]["timestamp"]) == int(due.timestamp() * 1000)
    assert [t.summary for t in fake.workspace.tasks.values()].count("Write the runbook") == 1
    # Bob's task: he sees it; the tasklist's members (its chat's) see it there.
    created = await run(tools, "feishu_list_tasks", turn=dm(BOB))
    assert "Write the runbook · due 2031-03-01 18:00" in created
    assert "Write the runbook" not in await run(tools, "feishu_list_tasks")
    listed = await run(tools, "feishu_list_tasks", tasklist_guid="fake-tasklist-launch")
    assert "Write the runbook" in listed


async def test_create_task_with_unknown_assignee(tools) -> None:
    error = await refused(tools, "feishu_create_task", summary="x", assignees=["ou_nobody"])
    assert "rejected the task's parameters" in error and "1470400" in error


# -- Base --------------------------------------------------------------------------------


async def test_search_records_filtered_sorted_and_projected(fake, tools) -> None:
    text = await run(
        tools,
        "feishu_search_bitable_records",
        **BASE,
        conditions=[{"field_name": "Status", "operator": "is", "value": ["Done"]}],
        sort_field="Points",
        sort_desc=True,
        field_names=["Name", "Points", "Owner"],
    )

    lines = text.splitlines()
    assert lines[0] == "Records in table tblFakeTasks (2 of 2):"
    assert lines[1].endswith("Name: Fix login bug · Owner: Bob Li · Points: 3")
    assert lines[2].endswith("Name: Rotate on-call keys · Owner: Alice Wang · Points: 2")
    body = last(
        fake,
        "POST",
        "/open-apis/bitable/v1/apps/bascnFakeProjects/tables/tblFakeTasks/records/search",
    ).json
    assert body["filter"] == {
        "conjunction": "and",
        "conditions": [{"field_name": "Status", "operator": "is", "value": ["Done"]}],
    }
    assert body["sort"] == [{"field_name": "Points", "desc": True}]


async def test_search_records_renders_every_cell_kind_and_pages(tools) -> None:
    first = await run(tools, "feishu_search_bitable_records", **BASE, limit=3)
    assert "Tags: ops, backend · Done: yes · Link: ticket 2 (https://example.invalid/2)" in first
    assert "Due: 20" in first  # a date, not epoch milliseconds
    token = first.rpartition("page_token=")[2].rstrip("]")
    rest = await run(tools, "feishu_search_bitable_records", **BASE, limit=3, page_token=token)
    assert rest.splitlines()[0] == "Records in table tblFakeTasks (1 of 4):"
    assert "Fix login bug" in rest


async def test_search_records_bad_names_and_no_access(tools) -> None:
    error = await refused(
        tools,
        "feishu_search_bitable_records",
        **BASE,
        conditions=[{"field_name": "Statuss", "value": ["Done"]}],
    )
    assert "field name does not exist" in error and "1254045" in error

    error = await refused(tools, "feishu_search_bitable_records", app_token="bascnX", table_id="t")
    assert "does not exist" in error and "1063001" in error
    error = await refused(
        tools, "feishu_search_bitable_records", app_token="bascnFakeLocked", table_id="tblFakePay"
    )
    assert "share it with the app" in error


async def test_create_record_shows_up_and_is_idempotent(fake, tools) -> None:
    fields = {"Name": "Ship v3", "Points": 13, "Status": "Todo", "Owner": [{"id": "ou_fake_bob"}]}
    url = "https://example.feishu.cn/base/bascnFakeProjects?table=tblFakeTasks"
    text = await run(
        tools, "feishu_create_bitable_record", app_token=url, table_id="tblFakeTasks", fields=fields
    )
    await run(tools, "feishu_create_bitable_record", **BASE, fields=fields)

    assert text.startswith("Created record rec") and "Name: Ship v3 · Points: 13" in text
    assert len(fake.workspace.bitables["bascnFakeProjects"].tables["tblFakeTasks"].records) == 5
    found = await run(
        tools,
        "feishu_search_bitable_records",
        **BASE,
        conditions=[{"field_name": "Points", "operator": "isGreater", "value": ["10"]}],
    )
    assert "Ship v3" in found and "Owner: Bob Li" in found


async def test_create_record_with_a_wrongly_typed_value(tools) -> None:
    error = await refused(
        tools, "feishu_create_bitable_record", **BASE, fields={"Points": "thirteen"}
    )
    assert "wrong type for its column" in error and "epoch milliseconds" in error


# -- docs --------------------------------------------------------------------------------


async def test_read_document_by_url(fake, tools) -> None:
    text = await run(
        tools, "feishu_read_document", document_id="https://x.feishu.cn/docx/doxcnFakeHandbook"
    )
    assert text.startswith("Document doxcnFakeHandbook (")
    assert "Team handbook\nWelcome to the team." in text
    assert last(fake, "GET", "/open-apis/docx/v1/documents/doxcnFakeHandbook/raw_content")


async def test_read_document_is_capped(fake, client) -> None:
    text = "\n".join(["lorem ipsum"] * 5000)
    fake.workspace.add_document("doxcnFakeLong", "Long", text, readers={ALICE})
    tools = {t.name: t for t in make_workspace(client, document_max_chars=1000).tools()}

    text = await run(tools, "feishu_read_document", document_id="doxcnFakeLong")

    body, _, note = text.rpartition("\n")
    assert len(body) < 1100
    assert note.startswith("[... ") and "more characters not shown" in note


async def test_read_documents_that_cannot_be_read(tools) -> None:
    assert "does not exist" in await refused(tools, "feishu_read_document", document_id="doxcnNo")
    error = await refused(tools, "feishu_read_document", document_id="doxcnFakeSecret")
    assert "share it with the app" in error
    error = await refused(tools, "feishu_read_document", document_id="https://x.feishu.cn/wiki/Wk1")
    assert "wiki" in error


async def test_create_document_with_content(fake, tools) -> None:
    content = "# Plan\n\nShip it.\n- one\n- two\n1. first\n---\n```\nmake deploy\n```"
    text = await run(
        tools,
        "feishu_create_document",
        title="Launch plan",
        content=content,
        folder_token="fldcnFakeShared",
    )

    document_id = text.split("document_id ")[1].split(")")[0]
    document = fake.workspace.documents[document_id]
    assert document.folder_token == "fldcnFakeShared"
    kinds = [block["block_type"] for block in document.blocks]
    assert kinds == [3, 2, 12, 12, 13, 22, 14]
    document.readers.add(ALICE)  # the app owns it; once shared with her, she may read it
    read = await run(tools, "feishu_read_document", document_id=document_id)
    assert "Launch plan\nPlan\nShip it.\none\ntwo\nfirst\n\nmake deploy" in read
    assert "share it" not in text  # it is in a shared folder


async def test_create_long_document_in_batches(fake, tools) -> None:
    content = "\n".join(f"Paragraph {n}" for n in range(120))
    text = await run(tools, "feishu_create_document", title="Long", content=content)

    assert "Added 120 paragraphs." in text
    assert fake.count("POST", r"/blocks/.+/children$") == 3
    document_id = text.split("document_id ")[1].split(")")[0]
    assert len(fake.workspace.documents[document_id].blocks) == 120


async def test_create_document_content_failure_is_reported_not_hidden(fake, tools) -> None:
    fake.fail("POST", r"/children$", 1770001, msg="invalid param")
    text = await run(tools, "feishu_create_document", title="Half", content="a\nb")
    assert text.startswith('Created document "Half"')
    assert "Only 0 of 2 paragraphs were added" in text

    error = await refused(tools, "feishu_create_document", title="X", folder_token="fldcnNope")
    assert "folder_token" in error


# -- failures of the backend ---------------------------------------------------------------

# (tool, arguments, method, path regex of the call that fails)
CALLS = [
    ("feishu_search_users", {"query": "a@example.com"}, "POST", r"/batch_get_id$"),
    ("feishu_list_chats", {}, "GET", r"/im/v1/chats$"),
    ("feishu_get_chat_history", {"chat_id": "oc_fake_eng"}, "GET", r"/im/v1/messages$"),
    ("feishu_send_message", {"receive_id": "oc_fake_eng", "text": "x"}, "POST", r"/messages$"),
    ("feishu_list_calendar_events", {}, "GET", r"/events$"),
    (
        "feishu_create_calendar_event",
        {"summary": "x", "start": "2031-01-01T10:00"},
        "POST",
        r"/events$",
    ),
    ("feishu_list_tasks", {}, "GET", r"/task/v1/tasks$"),
    ("feishu_create_task", {"summary": "x"}, "POST", r"/task/v2/tasks$"),
    ("feishu_search_bitable_records", BASE, "POST", r"/records/search$"),
    ("feishu_create_bitable_record", {**BASE, "fields": {"Name": "x"}}, "POST", r"/records$"),
    ("feishu_read_document", {"document_id": "doxcnFakeHandbook"}, "GET", r"/raw_content$"),
    ("feishu_create_document", {"title": "x"}, "POST", r"/docx/v1/documents$"),
]


@pytest.mark.parametrize(("name", "arguments", "method", "path"), CALLS, ids=[c[0] for c in CALLS])
async def test_missing_scope_names_the_scope(fake, tools, name, arguments, method, path) -> None:
    fake.fail(
        method,
        path,
        99991672,
        msg="Access denied. One of the following scopes is required: "
        "[calendar:calendar, calendar:calendar:readonly].",
    )
    error = await refused(tools, name, **arguments)
    assert (
        "lacks a permission scope (any one of calendar:calendar, calendar:calendar:readonly)"
        in error
    )
    assert "developer console" in error


async def test_scope_from_permission_violations(fake, tools) -> None:
    fake.fail(
        "GET",
        r"/im/v1/chats$",
        99991672,
        msg="Access denied.",
        error={"permission_violations": [{"type": "action_scope_required", "subject": "im:chat"}]},
    )
    error = await refused(tools, "feishu_list_chats")
    assert "lacks a permission scope (im:chat)" in error


async def test_server_errors_and_transport_failures_are_tool_errors(fake, tools) -> None:
    fake.fail("GET", r"/im/v1/chats$", 1254002, http_status=500, msg="internal error")
    error = await refused(tools, "feishu_list_chats")
    assert "server error" in error and "1254002" in error

    fake.fail("GET", r"/im/v1/chats$", 0, http_status=502, raw_body="<html>Bad Gateway</html>")
    error = await refused(tools, "feishu_list_chats")
    assert "could not be reached" in error

    fake.fail("GET", r"/task/v1/tasks$", 99991400, http_status=429)
    error = await refused(tools, "feishu_list_tasks")
    assert "rate limit" in error and "wait 1 seconds" in error


async def test_an_unreachable_feishu_is_a_tool_error() -> None:
    config = FeishuConfig(
        app_id="cli_x",
        app_secret="s",
        verification_token="vt",
        encrypt_key="ek",
        domain="http://127.0.0.1:9",  # nothing listens on the discard port
    )
    async with FeishuClient(config, timeout=2.0) as unreachable:
        tools = {t.name: t for t in make_workspace(unreachable).tools()}
        error = await refused(tools, "feishu_list_chats")
    assert "could not be reached" in error


async def test_an_expired_token_is_refreshed_once(fake, tools) -> None:
    await run(tools, "feishu_list_chats")
    fake.revoke_tokens()
    assert "Engineering" in await run(tools, "feishu_list_chats")
    assert fake.token_requests == 2


async def test_huge_results_are_capped(fake, tools) -> None:
    now_ms = fake.message_by_id["om_fake_hist_4"].create_time_ms
    for n in range(200):
        fake.add_message(
            f"om_big_{n:03d}",
            chat_id="oc_fake_launch",
            content={"text": f"{n:03d} " + "word " * 200},
            create_time_ms=now_ms - n * 1000,
        )
    text = await run(tools, "feishu_get_chat_history", chat_id="oc_fake_launch", limit=200)

    assert len(text) < 8100
    assert text.endswith("more characters not shown]")
    assert "000 word" in text  # the newest comes first
    assert fake.count("GET", "/im/v1/messages$") == 4  # 50 a page


# -- the plumbing underneath ---------------------------------------------------------------


async def test_client_call_returns_the_body_and_counts(fake, client) -> None:
    request = ListChatRequest.builder().page_size(1).build()
    body = await client.call("im.chat.list", request)
    assert body["code"] == 0 and len(body["data"]["items"]) == 1 and body["data"]["has_more"]
    assert client.call_counts["im.chat.list"] == 1

    with pytest.raises(FeishuError) as caught:
        await client.call(
            "task.create",
            CreateTaskRequest.builder()
            .request_body(InputTask.builder().summary(" ").build())
            .build(),
        )
    assert caught.value.code == 1470400
    assert client.error_counts[("task.create", 1470400)] == 1


@pytest.mark.parametrize(
    "request_",
    [
        ListMessageRequest.builder()
        .container_id_type("chat")
        .container_id("oc_fake_eng")
        .page_size(51)
        .build(),
        ListMessageRequest.builder().container_id_type("chat").build(),
        ListCalendarEventRequest.builder().calendar_id(BOT_CALENDAR_ID).page_size(10).build(),
        ListCalendarEventRequest.builder().calendar_id(BOT_CALENDAR_ID).start_time("1").build(),
        ListChatRequest.builder().page_size(101).build(),
    ],
    ids=["page_size", "container_id", "event_page_size", "start_without_end", "chat_page_size"],
)
async def test_the_fake_validates_parameters_as_feishu_does(client, request_) -> None:
    with pytest.raises(FeishuError) as caught:
        await client.call("probe", request_)
    assert caught.value.code == 99992402


async def test_check_reports_ready_or_the_missing_scope(fake, client) -> None:
    workspace = make_workspace(client)
    status = await workspace.check()
    assert (status.ok, status.tools) == (True, len(READS | WRITES))
    assert status.detail.startswith("ready; ") and "LARKGATE_TOKEN_KEY" in status.detail
    acting = FeishuWorkspace(
        FeishuWorkspaceSettings(), ConnectorContext(feishu=client, user_tokens=_NoTokens())
    )
    assert (await acting.check()).detail == "ready"

    fake.fail("GET", r"/im/v1/chats$", 99991672, msg="Access denied. [im:chat:readonly]")
    status = await workspace.check()
    assert not status.ok and "im:chat:readonly" in status.detail

    fake.fail("GET", r"/im/v1/chats$", 0, http_status=502, raw_body="<html>down</html>")
    status = await workspace.check()
    assert not status.ok and "check failed" in status.detail

    status = await make_workspace(None).check()
    assert not status.ok and "no Feishu client" in status.detail
    error = await refused({t.name: t for t in make_workspace(None).tools()}, "feishu_list_chats")
    assert "not configured" in error


class _NoTokens:
    """A token source that is there (per-user authorisation is set up) but never used."""

    async def as_user(self, scopes: Any, purpose: str, call: Any) -> Any:
        raise AssertionError("the check acts as no one")


def test_results_are_compact_text_not_json() -> None:
    # A rendering detail the model relies on: cells and messages are one line each.
    from connectors.feishu.bitable import cell_text
    from connectors.feishu.messages import message_text

    rich = [{"type": "text", "text": "a"}, {"type": "mention", "text": "@b"}]
    assert cell_text(rich, SHANGHAI) == "a@b"
    assert cell_text({"type": 1, "value": [{"type": "text", "text": "x"}]}, SHANGHAI) == "x"
    assert message_text("file", json.dumps({"file_name": "q3.pdf"})) == "[file q3.pdf]"
    card = {"header": {"title": {"content": "Build failed"}}, "elements": []}
    assert message_text("interactive", json.dumps(card)) == "[card] Build failed"

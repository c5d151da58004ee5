"""The ``feishu_my_*`` tools, which act as the asking person, driven like the agent drives
them against the fake Feishu.

Each person's user token is real: :class:`support.user_tokens.EmulatorUserTokens` gets it
from the emulator's fake OAuth over HTTP, and the tools send it through lark-oapi to the
emulator's endpoints, which answer only that person's data.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lark_oapi.api.calendar.v4 import ListCalendarEventRequest
from lark_oapi.api.task.v2 import ListTaskRequest

from bot.engine import Tool, ToolError
from bot.engine.tools import ToolArgumentsError
from bot.feishu import FeishuClient, FeishuError, FeishuTokenInvalid
from connectors.base import ConnectorContext, UserTokenSource
from connectors.feishu import FeishuWorkspace, FeishuWorkspaceSettings
from connectors.hub import ConnectorHub
from connectors.mcp_names import builtin_tool_names

from fakes.feishu_server import BOT_CALENDAR_ID, FakeFeishu
from support.feishu import feishu_config
from support.user_tokens import EmulatorUserTokens, FixedToken

ALICE, BOB = "ou_fake_alice", "ou_fake_bob"
SHANGHAI = ZoneInfo("Asia/Shanghai")
MY_READS = {
    "feishu_my_calendar_events",
    "feishu_my_free_busy",
    "feishu_my_tasks",
    "feishu_my_search_docs",
    "feishu_my_search_messages",
}
MY_WRITES = {"feishu_my_create_event", "feishu_my_create_task", "feishu_my_complete_task"}
USER_PATHS = ("/open-apis/task/v2/tasks", "/open-apis/search/v2/", "/freebusy/", "/messages/mget")
HOSTILE = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
async def fake() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu() as server:
        yield server


@pytest.fixture
async def client(fake: FakeFeishu) -> AsyncIterator[FeishuClient]:
    async with FeishuClient(feishu_config(fake), timeout=5.0) as feishu:
        yield feishu


def tools_for(client: FeishuClient, source: UserTokenSource | None) -> dict[str, Tool]:
    context = ConnectorContext(feishu=client, user_tokens=source)
    workspace = FeishuWorkspace(FeishuWorkspaceSettings(), context)
    return {tool.name: tool for tool in workspace.tools()}


@pytest.fixture
def alice(fake: FakeFeishu, client: FeishuClient) -> EmulatorUserTokens:
    return EmulatorUserTokens(fake, client, ALICE)


@pytest.fixture
def as_alice(client: FeishuClient, alice: EmulatorUserTokens) -> dict[str, Tool]:
    return tools_for(client, alice)


@pytest.fixture
def as_bob(fake: FakeFeishu, client: FeishuClient) -> dict[str, Tool]:
    return tools_for(client, EmulatorUserTokens(fake, client, BOB))


async def run(tools: dict[str, Tool], name: str, **arguments: Any) -> str:
    """What the engine does: validate against the schema, then call the handler."""
    tool = tools[name]
    result = await tool.handler(**tool.validate_arguments(arguments))
    assert isinstance(result, str)
    return result


async def refused(tools: dict[str, Tool], name: str, **arguments: Any) -> str:
    with pytest.raises(ToolError) as caught:
        await run(tools, name, **arguments)
    return str(caught.value)


def sent_as(fake: FakeFeishu, path_part: str) -> list[str]:
    """The Authorization headers of the requests whose path has ``path_part``."""
    return [r.headers.get("Authorization", "") for r in fake.requests if path_part in r.path]


# -- what the tools are ------------------------------------------------------------------


def test_each_declares_the_user_token_and_its_scopes(client: FeishuClient) -> None:
    workspace = FeishuWorkspace(FeishuWorkspaceSettings(), ConnectorContext(feishu=client))
    specs = {n: s for n, s in workspace.actions().items() if n.startswith("feishu_my_")}
    assert set(specs) == MY_READS | MY_WRITES
    assert {n for n, s in specs.items() if s.side_effect == "write"} == MY_WRITES
    assert all(s.acts_as == "user" and s.scopes for s in specs.values())
    assert specs["feishu_my_tasks"].scopes == ("task:task:read",)
    assert specs["feishu_my_search_docs"].scopes == ("search:docs:read",)
    assert "search:message" in specs["feishu_my_search_messages"].scopes
    assert "calendar:calendar.free_busy:read" in specs["feishu_my_free_busy"].scopes
    # Every other Feishu tool acts as the app.
    assert all(s.acts_as == "app" for n, s in workspace.actions().items() if n not in specs)
    # No MCP tool may take one of these names either.
    assert set(builtin_tool_names()) >= MY_READS | MY_WRITES


def test_the_hub_knows_them_and_read_only_mode_keeps_only_the_reads(client) -> None:
    workspace = FeishuWorkspace(FeishuWorkspaceSettings(), ConnectorContext(feishu=client))
    hub = ConnectorHub([workspace], {})
    assert all(hub.acts_as_user(name) for name in MY_READS | MY_WRITES)
    assert not hub.acts_as_user("feishu_list_calendar_events")
    reads = set(hub.tools("read").names())
    assert reads >= MY_READS and not MY_WRITES & reads
    assert set(hub.tools("write").names()) >= MY_WRITES


def test_no_tool_takes_whose_data_it_reads(as_alice: dict[str, Tool]) -> None:
    """Who is asking comes from the run (the token source), never from an argument."""
    for name in MY_READS | MY_WRITES:
        properties = set(as_alice[name].parameters["properties"])
        assert not properties & {"user_id", "open_id", "calendar_id", "owner", "as_user"}


@pytest.mark.parametrize("name", sorted(MY_READS | MY_WRITES))
async def test_without_per_user_authorisation_each_says_what_to_configure(
    fake, client, name
) -> None:
    tools = tools_for(client, None)
    arguments: dict[str, Any] = {
        "feishu_my_search_docs": {"query": "handbook"},
        "feishu_my_search_messages": {"query": "migration"},
        "feishu_my_create_event": {"summary": "Sync", "start": "2030-05-01T10:00"},
        "feishu_my_create_task": {"summary": "Ship it"},
        "feishu_my_complete_task": {"task_guid": "abc"},
    }.get(name, {})
    said = await refused(tools, name, **arguments)
    assert "LARKGATE_TOKEN_KEY" in said
    assert not any(sent_as(fake, part) for part in USER_PATHS)


async def test_the_check_says_the_my_tools_need_the_token_key(client) -> None:
    workspace = FeishuWorkspace(FeishuWorkspaceSettings(), ConnectorContext(feishu=client))
    status = await workspace.check()
    assert status.ok and "LARKGATE_TOKEN_KEY" in status.detail


# -- calendar ----------------------------------------------------------------------------


async def test_my_events_are_the_askers_own(fake, as_alice, alice, as_bob) -> None:
    mine = await run(as_alice, "feishu_my_calendar_events")
    assert "1:1 with Bob" in mine and "Dentist" in mine and "Smile clinic" in mine
    assert "Cancelled lunch" not in mine  # cancelled events are left out
    assert "Weekly sync" not in mine  # the bot's calendar is not theirs
    assert "Board prep" not in mine  # nor is Bob's
    assert "Board prep" in await run(as_bob, "feishu_my_calendar_events")
    # Sent with the person's user token, never the tenant token.
    tokens = sent_as(fake, "/events")
    assert tokens[0] == f"Bearer {alice.tokens.access_token}"
    assert all(t.startswith("Bearer u-") for t in tokens)
    scopes = ("calendar:calendar:read", "calendar:calendar.event:read")
    assert alice.asked[0] == (scopes, "read your calendar")


async def test_alices_token_cannot_open_bobs_calendar(fake, client, alice) -> None:
    """Even a request built by hand for Bob's calendar id is refused to Alice's token."""
    await run(tools_for(client, alice), "feishu_my_calendar_events")
    assert alice.tokens is not None
    bob_calendar = fake.workspace.user_calendar(BOB).calendar_id
    request = ListCalendarEventRequest.builder().calendar_id(bob_calendar).build()
    with pytest.raises(FeishuError) as caught:
        await client.call_as_user("calendar.event.list", request, alice.tokens.access_token)
    assert caught.value.code == 191002


async def test_free_busy_shows_when_not_what(as_alice) -> None:
    said = await run(
        as_alice, "feishu_my_free_busy", end="2100-01-01T00:00", start="2099-12-31T00:00"
    )
    assert "Alice Wang (you): free the whole time" in said
    three_days = str(int(time.time()) + 3 * 86400)
    both = await run(as_alice, "feishu_my_free_busy", people=["me", "Bob Li"], end=three_days)
    assert "Alice Wang (you): busy" in both and "Bob Li: busy" in both
    # "1:1 with Bob", not "1:1": that is inside the start time at 11:10 (found at 11:10).
    assert "Board prep" not in both and "Salary" not in both and "1:1 with Bob" not in both


async def test_free_busy_leaves_out_free_and_cancelled_events(fake, as_alice) -> None:
    calendar = fake.workspace.user_calendar(ALICE)
    one = next(e for e in calendar.events if e.summary == "1:1 with Bob")
    begin, until = one.bounds()
    # From 3 hours before the 1:1 to 5 hours after: the cancelled lunch and the "free"
    # focus time fall inside, and neither is busy.
    said = await run(
        as_alice, "feishu_my_free_busy", start=str(begin - 3 * 3600), end=str(until + 5 * 3600)
    )
    shown = datetime.fromtimestamp(begin, SHANGHAI).strftime("%Y-%m-%d %H:%M")
    ends = datetime.fromtimestamp(until, SHANGHAI).strftime("%H:%M")
    assert f"Alice Wang (you): busy {shown}–{ends}" in said
    assert said.count("–") == 1


async def test_i_create_an_event_on_my_calendar_and_invite_bob(fake, as_alice) -> None:
    said = await run(
        as_alice,
        "feishu_my_create_event",
        summary="Roadmap review",
        start="2030-05-01T14:00",
        attendees=["Bob Li"],
    )
    assert 'Created "Roadmap review"' in said and "on your calendar" in said
    assert "Invited: Bob Li." in said
    calendar = fake.workspace.user_calendar(ALICE)
    (event,) = [e for e in calendar.events if e.summary == "Roadmap review"]
    assert event.organizer == "Alice Wang"
    assert [a["user_id"] for a in event.attendees] == [BOB]
    bot = fake.workspace.calendars[BOT_CALENDAR_ID]
    assert all(e.summary != "Roadmap review" for e in bot.events)
    # The same event twice is one event.
    await run(
        as_alice, "feishu_my_create_event", summary="Roadmap review", start="2030-05-01T14:00"
    )
    assert len([e for e in calendar.events if e.summary == "Roadmap review"]) == 1


async def test_an_event_ending_before_it_starts_is_refused_before_any_call(fake, as_alice):
    said = await refused(
        as_alice,
        "feishu_my_create_event",
        summary="x",
        start="2030-05-01T14:00",
        end="2030-05-01T13:00",
    )
    assert "end must be after start" in said
    assert not sent_as(fake, "/events")


# -- tasks -------------------------------------------------------------------------------


async def test_my_tasks_are_the_ones_assigned_to_me(fake, as_alice, as_bob) -> None:
    mine = await run(as_alice, "feishu_my_tasks")
    assert "Write the migration plan" in mine and "Prepare launch checklist" in mine
    assert "Submit expense report" not in mine  # completed: not open
    assert "Review Q3 budget" not in mine  # Bob's
    done = await run(as_alice, "feishu_my_tasks", status="completed")
    assert "[x] Submit expense report" in done and "migration" not in done
    assert "Review Q3 budget" in await run(as_bob, "feishu_my_tasks")


async def test_i_create_a_task_for_me_then_for_bob(fake, as_alice, as_bob) -> None:
    said = await run(as_alice, "feishu_my_create_task", summary="Renew the domain")
    assert "Assigned to you." in said
    task = next(t for t in fake.workspace.tasks.values() if t.summary == "Renew the domain")
    assert task.creator == {"id": ALICE, "type": "user"}
    assert "Renew the domain" in await run(as_alice, "feishu_my_tasks")
    said = await run(
        as_alice, "feishu_my_create_task", summary="Fix the login page", assignees=["Bob Li"]
    )
    assert f"Assigned to Bob Li ({BOB})." in said
    assert "Fix the login page" in await run(as_bob, "feishu_my_tasks")
    assert "Fix the login page" not in await run(as_alice, "feishu_my_tasks")


async def test_the_same_task_twice_is_one_but_two_people_make_two(fake, as_alice, as_bob):
    for tools in (as_alice, as_alice, as_bob):
        await run(tools, "feishu_my_create_task", summary="Weekly report")
    made = [t for t in fake.workspace.tasks.values() if t.summary == "Weekly report"]
    assert sorted(t.creator["id"] for t in made) == [ALICE, BOB]


async def test_someone_nobody_knows_is_refused_before_anything_is_made(fake, as_alice):
    said = await refused(as_alice, "feishu_my_create_task", summary="x", assignees=["Nobody Atall"])
    assert 'no one named "Nobody Atall"' in said
    assert not [r for r in fake.requests if r.method == "POST" and r.path.endswith("/v2/tasks")]


async def test_people_are_found_by_email_and_an_unclear_name_is_refused(fake, as_alice):
    said = await run(
        as_alice, "feishu_my_create_task", summary="Pair on it", assignees=["me", "bob@example.com"]
    )
    assert f"Assigned to you, Bob Li ({BOB})." in said
    fake.workspace.add_user("ou_fake_bob2", "Bob Zhou", email="bz@example.com")
    unclear = await refused(as_alice, "feishu_my_create_task", summary="x", assignees=["Bob"])
    assert "could be" in unclear and BOB in unclear and "ou_fake_bob2" in unclear
    nobody = await refused(
        as_alice,
        "feishu_my_create_event",
        summary="x",
        start="2030-01-01T10:00",
        attendees=["ghost@example.com"],
    )
    assert "no Feishu user" in nobody and "ghost@example.com" in nobody
    assert "empty string" in await refused(as_alice, "feishu_my_free_busy", people=["me", "  "])
    names = [f"Person {i}" for i in range(11)]
    assert "at most 10 people may be given by name" in await refused(
        as_alice, "feishu_my_create_task", summary="x", assignees=names
    )


async def test_i_complete_my_task_but_not_bobs(fake, as_alice) -> None:
    mine = next(t for t in fake.workspace.tasks.values() if t.summary == "Write the migration plan")
    said = await run(as_alice, "feishu_my_complete_task", task_guid=mine.guid)
    assert said == f'Completed task "Write the migration plan" (guid {mine.guid}).'
    assert mine.completed_ms > 0
    bobs = next(t for t in fake.workspace.tasks.values() if t.summary == "Review Q3 budget")
    said = await refused(as_alice, "feishu_my_complete_task", task_guid=bobs.guid)
    assert "code 1470403" in said and bobs.completed_ms == 0
    said = await refused(as_alice, "feishu_my_complete_task", task_guid="../../v1/tasks?x=1")
    assert "1470404" in said or "does not exist" in said


# -- search ------------------------------------------------------------------------------


async def test_i_find_only_the_documents_i_can_open(as_alice, as_bob) -> None:
    mine = await run(as_alice, "feishu_my_search_docs", query="on-call")
    assert "Team handbook" in mine and "On-call runbook · wiki page" in mine
    assert "Board minutes" not in mine  # Bob's alone, though it says "on-call"
    assert "Board minutes" in await run(as_bob, "feishu_my_search_docs", query="on-call")
    wiki = await run(as_alice, "feishu_my_search_docs", query="on-call", where="wiki")
    assert "On-call runbook" in wiki and "Team handbook" not in wiki
    assert "No document" in await run(as_alice, "feishu_my_search_docs", query="payroll")


async def test_i_find_only_messages_of_my_chats(as_alice, as_bob) -> None:
    mine = await run(as_alice, "feishu_my_search_messages", query="migration")
    assert "can you review the migration?" in mine and "chat oc_fake_eng" in mine
    assert "Bob Li (ou_fake_bob)" in mine
    assert "No message" in await run(as_alice, "feishu_my_search_messages", query="salary")
    assert "salary review" in await run(as_bob, "feishu_my_search_messages", query="salary")
    from_bob = await run(as_alice, "feishu_my_search_messages", sender="Bob Li")
    assert "Standup moved" not in from_bob and "review the migration" in from_bob
    from_me = await run(as_alice, "feishu_my_search_messages", sender="me", query="standup")
    assert "Standup moved to 10:30 tomorrow" in from_me


async def test_a_search_needs_something_to_look_for(fake, as_alice) -> None:
    assert "give words" in await refused(as_alice, "feishu_my_search_messages", query="  ")
    assert "not only spaces" in await refused(as_alice, "feishu_my_search_docs", query="   ")
    with pytest.raises(ToolArgumentsError):
        await run(as_alice, "feishu_my_search_docs", query="x" * 51)
    assert not sent_as(fake, "/search/v2/")


# -- tokens and scopes -------------------------------------------------------------------


async def test_the_tenant_token_is_refused_where_feishu_wants_a_user_token(fake, client):
    tenant = await client.tokens.get()
    tools = tools_for(client, FixedToken(tenant))
    said = await refused(tools, "feishu_my_tasks")
    assert "no longer accepts your authorisation" in said and "/login" in said
    # The bot's own call to "my tasks" is refused the same way (Feishu's 99991668).
    request = ListTaskRequest.builder().type("my_tasks").build()
    with pytest.raises(FeishuTokenInvalid) as caught:
        await client.call("task.task.list_mine", request)
    assert caught.value.code == 99991668


async def test_a_missing_scope_says_which_one_to_grant(fake, client) -> None:
    reader = EmulatorUserTokens(fake, client, ALICE, grant=["task:task:read"])
    tools = tools_for(client, reader)
    assert "Write the migration plan" in await run(tools, "feishu_my_tasks")
    said = await refused(tools, "feishu_my_create_task", summary="Not allowed")
    assert "does not include the permission" in said
    assert "task:task:write" in said and "/login" in said
    assert not [t for t in fake.workspace.tasks.values() if t.summary == "Not allowed"]


async def test_an_app_without_the_user_scope_is_for_an_admin_to_fix(fake, as_alice) -> None:
    fake.deny_scopes("GET", r"/task/v2/tasks$", ["task:task:read"])
    said = await refused(as_alice, "feishu_my_tasks")
    assert "the Feishu app may not act as users for this (task:task:read)" in said
    assert "An admin must add that user permission" in said


async def test_a_refused_invitation_keeps_the_event_and_says_so(fake, as_alice) -> None:
    fake.fail("POST", r"/attendees$", 190002)
    said = await run(
        as_alice,
        "feishu_my_create_event",
        summary="Demo",
        start="2030-06-01T10:00",
        attendees=[BOB],
    )
    assert 'Created "Demo"' in said and "The event exists, but no one was invited." in said


async def test_an_expired_token_is_refreshed_and_the_call_made_once_more(fake, client, alice):
    tools = tools_for(client, alice)
    await run(tools, "feishu_my_tasks")
    fake.expire_user_tokens(ALICE)
    assert "Write the migration plan" in await run(tools, "feishu_my_tasks")
    assert alice.refreshes == 1 and alice.consents == 1


async def test_a_revoked_authorisation_asks_to_authorise_again(fake, client, alice) -> None:
    tools = tools_for(client, alice)
    await run(tools, "feishu_my_tasks")
    fake.revoke_user_grant(ALICE)
    said = await refused(tools, "feishu_my_tasks")
    assert "Authorise again with /login" in said


async def test_the_token_never_reaches_the_result(fake, client, alice) -> None:
    tools = tools_for(client, alice)
    results = [
        await run(tools, "feishu_my_tasks"),
        await run(tools, "feishu_my_calendar_events"),
        await run(tools, "feishu_my_search_messages", query="migration"),
    ]
    assert alice.tokens is not None
    assert not any(alice.tokens.access_token in r for r in results)


# -- hostile arguments -------------------------------------------------------------------


async def answer_or_refusal(tools: dict[str, Tool], name: str, **arguments: Any) -> str:
    """The tool's answer, or the text of the clear error it gave; anything else raised
    (a crash) fails the test."""
    try:
        return await run(tools, name, **arguments)
    except (ToolError, ToolArgumentsError) as exc:
        return str(exc)


times = st.one_of(
    st.none(),
    st.text(max_size=40),
    st.integers(min_value=-(10**15), max_value=10**15).map(str),
    st.datetimes().map(lambda d: d.isoformat()),
    st.sampled_from(["2030-02-30T10:00", "9999-12-31T23:59", "0001-01-01", "1e9", "now"]),
)


@HOSTILE
@given(start=times, end=times)
async def test_any_time_range_gives_an_answer_or_a_clear_error(as_alice, start, end) -> None:
    for name in ("feishu_my_calendar_events", "feishu_my_free_busy"):
        arguments = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
        assert await answer_or_refusal(as_alice, name, **arguments)


@HOSTILE
@given(query=st.text(max_size=60), chat=st.one_of(st.none(), st.text(max_size=30)))
async def test_any_query_gives_an_answer_or_a_clear_error(as_alice, query, chat) -> None:
    calls = [
        ("feishu_my_search_docs", {"query": query}),
        ("feishu_my_search_messages", {"query": query, "chat_id": chat}),
    ]
    for name, arguments in calls:
        assert await answer_or_refusal(as_alice, name, **arguments)

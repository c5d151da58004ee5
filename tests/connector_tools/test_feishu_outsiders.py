"""The bot is never a way around Feishu's own permissions: each tool that reads as the app
(the tenant token sees every chat the bot is in and everything shared with the app) reads
only what everyone who will read the answer may see, checked through Feishu's API.

Each tool is asked by an outsider (refused: nothing read, nothing of the content in what
the model is told) and by someone it is theirs to see (answered), in a direct message and
in a group, where the whole group reads the answer. Who asks and where is the run's
(``support.asked_turns``), as the engine serves a tool call; the tools, the client and
lark-oapi go over HTTP to the emulator, which answers as Feishu does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.engine import Tool, ToolError
from bot.engine.tools import ToolArgumentsError
from bot.feishu import FeishuClient
from connectors.base import ConnectorContext
from connectors.feishu import FeishuWorkspace, FeishuWorkspaceSettings

from fakes.feishu_server import FakeFeishu
from support.asked_turns import dm, in_group, serving
from support.feishu import feishu_config
from support.turns import look_alike, turn_context

ALICE, BOB, ZHANG = "ou_fake_alice", "ou_fake_bob", "ou_fake_zhang"
BOARD = "oc_fake_board"  # the bot and Bob are in it; Alice is not
BOARD_TEXT = ("Berlin office", "reorg quiet")
BUDGET_TEXT = "Marketing spend"  # doxcnFakeBudget, Bob's alone
HISTORY_PATH = r"/im/v1/messages$"
HOSTILE = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class Clock:
    """Time for the workspace's brief caches, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def fake() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu() as server:
        yield server


@pytest.fixture
async def client(fake: FakeFeishu) -> AsyncIterator[FeishuClient]:
    async with FeishuClient(feishu_config(fake), timeout=5.0) as feishu:
        yield feishu


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def tools(client: FeishuClient, clock: Clock) -> dict[str, Tool]:
    context = ConnectorContext(feishu=client)
    workspace = FeishuWorkspace(FeishuWorkspaceSettings(), context, clock=clock)
    return {tool.name: tool for tool in workspace.tools()}


async def run(tools: dict[str, Tool], name: str, turn: object, **arguments: Any) -> str:
    """What the engine does inside the run of ``turn``: validate, then call the handler."""
    tool = tools[name]
    with serving(turn):
        result = await tool.handler(**tool.validate_arguments(arguments))
    assert isinstance(result, str)
    return result


async def refused(tools: dict[str, Tool], name: str, turn: object, **arguments: Any) -> str:
    with pytest.raises(ToolError) as caught:
        await run(tools, name, turn, **arguments)
    return str(caught.value)


def read_messages_of(fake: FakeFeishu, chat_id: str) -> int:
    return sum(
        1
        for r in fake.requests
        if r.path.endswith("/im/v1/messages") and r.query.get("container_id") == chat_id
    )


# -- chat history ------------------------------------------------------------------------


async def test_an_outsider_cannot_read_a_group_they_are_not_in(fake, tools) -> None:
    """The report: Alice, not in the group, DMs the bot for its messages."""
    said = await refused(tools, "feishu_get_chat_history", dm(ALICE), chat_id=BOARD)
    assert "Nothing was read" in said and "member" in said
    assert not any(text in said for text in BOARD_TEXT)
    assert read_messages_of(fake, BOARD) == 0
    # Bob is a member: the same question is his to ask.
    mine = await run(tools, "feishu_get_chat_history", dm(BOB), chat_id=BOARD)
    assert "Reorg: the Berlin office closes in May" in mine


async def test_in_a_group_only_that_groups_messages_are_read(fake, tools) -> None:
    # Bob is in the board chat, but everyone in Engineering reads the answer.
    said = await refused(
        tools, "feishu_get_chat_history", in_group("oc_fake_eng", BOB), chat_id=BOARD
    )
    assert "only this chat's messages" in said and "direct message" in said
    assert read_messages_of(fake, BOARD) == 0
    here = await run(tools, "feishu_get_chat_history", in_group(BOARD, BOB), chat_id=BOARD)
    assert "Berlin office" in here
    eng = await run(
        tools, "feishu_get_chat_history", in_group("oc_fake_eng", ALICE), chat_id="oc_fake_eng"
    )
    assert "review the migration" in eng
    assert fake.count("GET", r"/members$") == 0  # the chat's own history needs no check


async def test_every_asker_must_be_a_member(fake, tools) -> None:
    for turn in (dm(BOB, joined=(ALICE,)), dm(BOB, joined=("",))):
        said = await refused(tools, "feishu_get_chat_history", turn, chat_id=BOARD)
        assert "everyone whose message this reply answers" in said
    assert read_messages_of(fake, BOARD) == 0


@pytest.mark.parametrize(
    "deps",
    [None, object(), turn_context(chat_id="", sender_open_id=BOB), look_alike(dm(BOB))],
    # look_alike: deps of another type with every field of Bob's turn are nobody's turn.
    ids=["no_run_deps", "not_a_turn", "no_chat", "look_alike"],
)
async def test_a_run_that_answers_no_one_reads_nothing(fake, tools, deps) -> None:
    reads = {
        "feishu_get_chat_history": {"chat_id": BOARD},
        "feishu_list_chats": {},
        "feishu_read_document": {"document_id": "doxcnFakeBudget"},
        "feishu_search_bitable_records": {"app_token": "bascnFakeProjects", "table_id": "t"},
        "feishu_list_calendar_events": {},
        "feishu_list_tasks": {},
        "feishu_search_users": {"query": "bob@example.com"},
    }
    for name, arguments in reads.items():
        said = await refused(tools, name, deps, **arguments)
        assert "answers no one in a chat" in said, name
    assert fake.requests == []


# -- listing chats -------------------------------------------------------------------------


async def test_a_chat_listing_names_only_the_askers_chats(fake, tools) -> None:
    alices = await run(tools, "feishu_list_chats", dm(ALICE))
    assert "oc_fake_eng" in alices and "oc_fake_launch" in alices
    assert "oc_fake_partners" in alices  # external, but she is in it
    assert BOARD not in alices and "Leadership" not in alices and "oc_fake_hr" not in alices
    bobs = await run(tools, "feishu_list_chats", dm(BOB))
    assert "Leadership · chat_id oc_fake_board" in bobs and "oc_fake_partners" not in bobs
    zhangs = await run(tools, "feishu_list_chats", dm(ZHANG))
    assert zhangs.startswith("None of the bot's chats") and "Engineering" not in zhangs


async def test_in_a_group_a_chat_listing_names_only_this_chat(fake, tools) -> None:
    said = await run(tools, "feishu_list_chats", in_group("oc_fake_eng", BOB))
    assert "only this chat (chat_id oc_fake_eng)" in said and "Leadership" not in said
    assert fake.count("GET", r"/im/v1/chats") == 0


# -- documents -----------------------------------------------------------------------------


async def test_a_document_is_read_only_for_those_it_is_shared_with(fake, tools) -> None:
    said = await refused(tools, "feishu_read_document", dm(ALICE), document_id="doxcnFakeBudget")
    assert "Ask its owner to share it with you" in said and BUDGET_TEXT not in said
    assert fake.count("GET", r"/raw_content$") == 0
    # Bob owns it (owners are not in the collaborator list: the metadata says so).
    assert BUDGET_TEXT in await run(
        tools, "feishu_read_document", dm(BOB), document_id="doxcnFakeBudget"
    )
    # Shared with a group Bob is in (Launch 2025), not with Zhang in any way.
    plan = await run(tools, "feishu_read_document", dm(BOB), document_id="doxcnFakeLaunchPlan")
    assert "press release" in plan
    said = await refused(
        tools, "feishu_read_document", dm(ZHANG), document_id="doxcnFakeLaunchPlan"
    )
    assert "press release" not in said
    assert fake.count("GET", r"/raw_content$") == 2


async def test_in_a_group_a_document_must_be_shared_with_everyone_there(fake, tools) -> None:
    # Shared with Engineering itself.
    handbook = await run(
        tools,
        "feishu_read_document",
        in_group("oc_fake_eng", ALICE),
        document_id="doxcnFakeHandbook",
    )
    assert "Welcome to the team." in handbook
    # Launch 2025's members (Alice, Bob) are each its collaborator or owner.
    assert "Welcome to the team." in await run(
        tools,
        "feishu_read_document",
        in_group("oc_fake_launch", BOB),
        document_id="doxcnFakeHandbook",
    )
    # The launch plan is shared with Launch 2025, and Bob in Engineering is not Alice.
    said = await refused(
        tools,
        "feishu_read_document",
        in_group("oc_fake_eng", ALICE),
        document_id="doxcnFakeLaunchPlan",
    )
    assert "shared with this group" in said and "press release" not in said
    assert fake.count("GET", r"doxcnFakeLaunchPlan/raw_content$") == 0


# -- Bases ---------------------------------------------------------------------------------

BASE = {"app_token": "bascnFakeProjects", "table_id": "tblFakeTasks"}


async def test_a_base_is_searched_only_for_those_it_is_shared_with(fake, tools) -> None:
    said = await refused(tools, "feishu_search_bitable_records", dm(ZHANG), **BASE)
    assert "Ask its owner to share it with you" in said and "Migrate" not in said
    assert fake.count("POST", r"/records/search$") == 0
    assert "Migrate the database" in await run(
        tools, "feishu_search_bitable_records", dm(ALICE), **BASE
    )
    assert "Migrate the database" in await run(
        tools, "feishu_search_bitable_records", in_group("oc_fake_eng", BOB), **BASE
    )
    # Partner Inc.'s person in the external group is not one of its collaborators.
    said = await refused(
        tools, "feishu_search_bitable_records", in_group("oc_fake_partners", ALICE), **BASE
    )
    assert "shared with this group" in said


async def test_a_base_with_advanced_permissions_is_not_read_as_the_app(fake, tools) -> None:
    levels = {"app_token": "bascnFakeLevels", "table_id": "tblFakeLevels"}
    said = await refused(tools, "feishu_search_bitable_records", dm(ALICE), **levels)
    assert "advanced permissions" in said and "L7" not in said
    assert fake.count("POST", r"/records/search$") == 0


# -- calendar ------------------------------------------------------------------------------


async def test_the_bots_calendar_shows_each_person_the_events_they_were_invited_to(
    fake, tools
) -> None:
    alices = await run(tools, "feishu_list_calendar_events", dm(ALICE))
    assert "that you were invited to" in alices
    assert "Weekly sync" in alices and "Design review" in alices and "Team offsite" in alices
    assert "Reorg briefing" not in alices and "Berlin" not in alices
    assert "Reorg briefing · Berlin office closure" in await run(
        tools, "feishu_list_calendar_events", dm(BOB)
    )
    zhangs = await run(tools, "feishu_list_calendar_events", dm(ZHANG))
    assert zhangs.startswith("No events on calendar") and "Weekly sync" not in zhangs


async def test_in_a_group_an_event_must_have_invited_everyone_there(fake, tools) -> None:
    launch = await run(tools, "feishu_list_calendar_events", in_group("oc_fake_launch", ALICE))
    # Invited: the Launch chat (offsite); Alice and Bob, its members (design review).
    assert "Team offsite" in launch and "Design review" in launch
    assert "Weekly sync" not in launch and "Reorg briefing" not in launch


async def test_no_calendar_but_the_bots_own_is_read(fake, tools) -> None:
    for calendar_id in ("feishu.cn_fakeprivate@group.calendar.feishu.cn", "feishu.cn_fakebob"):
        said = await refused(tools, "feishu_list_calendar_events", dm(BOB), calendar_id=calendar_id)
        assert "reads only the bot's own calendar" in said
        assert "feishu_my_calendar_events" in said
    assert fake.count("GET", r"/events$") == 0


# -- tasks ---------------------------------------------------------------------------------


async def test_tasks_are_listed_for_their_members_only(fake, tools) -> None:
    alices = await run(tools, "feishu_list_tasks", dm(ALICE))
    assert "Prepare launch checklist" in alices and "Renew TLS certificate" in alices
    assert "Draft the reorg memo" not in alices
    assert "Draft the reorg memo" in await run(tools, "feishu_list_tasks", dm(BOB))
    assert "No tasks" in await run(tools, "feishu_list_tasks", dm(ZHANG))
    # A tasklist's members see all of its tasks; others see those they are members of.
    leads = {"tasklist_guid": "fake-tasklist-leads"}
    assert "Draft the reorg memo" in await run(tools, "feishu_list_tasks", dm(BOB), **leads)
    assert "reorg" not in await run(tools, "feishu_list_tasks", dm(ALICE), **leads)
    launch = {"tasklist_guid": "fake-tasklist-launch"}
    assert "Book the venue" in await run(tools, "feishu_list_tasks", dm(ALICE), **launch)
    assert "Book the venue" not in await run(tools, "feishu_list_tasks", dm(ZHANG), **launch)


async def test_in_a_group_a_task_must_be_everyones_there(fake, tools) -> None:
    # Engineering is Alice and Bob: the certificate task has both, the checklist only Alice.
    eng = await run(tools, "feishu_list_tasks", in_group("oc_fake_eng", ALICE))
    assert "Renew TLS certificate" in eng and "Prepare launch checklist" not in eng
    # The launch tasklist is shared with Launch 2025 itself.
    launch = await run(
        tools,
        "feishu_list_tasks",
        in_group("oc_fake_launch", BOB),
        tasklist_guid="fake-tasklist-launch",
    )
    assert "Book the venue" in launch and "Prepare launch checklist" in launch


# -- people --------------------------------------------------------------------------------


async def test_the_directory_is_not_read_where_another_company_reads_the_answer(
    fake, tools
) -> None:
    said = await refused(
        tools, "feishu_search_users", in_group("oc_fake_partners", ALICE), query="bob@example.com"
    )
    assert "external" in said and "bob@example.com" not in said.split("Nothing")[1]
    assert fake.count("POST", r"/batch_get_id$") == 0
    for turn in (dm(ALICE), in_group("oc_fake_eng", ALICE)):
        assert "Bob Li" in await run(tools, "feishu_search_users", turn, query="bob@example.com")


# -- the checks cost few calls, and follow Feishu within a minute ----------------------------


async def test_membership_is_asked_once_a_minute_and_a_removal_counts_after(
    fake, tools, clock
) -> None:
    for _ in range(3):
        await run(tools, "feishu_get_chat_history", dm(BOB), chat_id=BOARD)
    assert fake.count("GET", rf"/chats/{BOARD}/members$") == 1
    fake.workspace.chats[BOARD].members.discard(BOB)
    clock.now += 30
    await run(tools, "feishu_get_chat_history", dm(BOB), chat_id=BOARD)  # still trusted
    clock.now += 31
    said = await refused(tools, "feishu_get_chat_history", dm(BOB), chat_id=BOARD)
    assert "Berlin" not in said
    assert fake.count("GET", rf"/chats/{BOARD}/members$") == 2


async def test_parallel_reads_share_one_membership_call(fake, tools) -> None:
    hold = fake.hold("GET", rf"/chats/{BOARD}/members$")
    reads = [
        asyncio.create_task(run(tools, "feishu_get_chat_history", dm(BOB), chat_id=BOARD))
        for _ in range(3)
    ]
    async with asyncio.timeout(10):  # a bound, so that code that never asks fails
        await hold.arrived.wait()
    hold.release()
    assert all("Berlin" in text for text in await asyncio.gather(*reads))
    assert fake.count("GET", rf"/chats/{BOARD}/members$") == 1


# -- hostile arguments ---------------------------------------------------------------------

TRICKY_CHATS = [
    BOARD,
    f" {BOARD} ",
    BOARD.upper(),
    f"{BOARD}/../oc_fake_eng",
    f"oc_fake_eng/../{BOARD.removeprefix('oc_')}",
    f"oc_fake_eng/../../chats/{BOARD}",
    f"{BOARD}?container_id=oc_fake_eng",
    f"oc_fake_eng&container_id={BOARD}",
    f"oc_fake_eng\x00{BOARD}",
    f"{BOARD}%2F",
    "oc_dm_fake_alice",  # her own chat, but this turn is in Engineering
]


@HOSTILE
@given(
    chat_id=st.one_of(
        st.sampled_from(TRICKY_CHATS),
        st.text(max_size=40),
        st.builds(lambda a, b: a + b, st.sampled_from(TRICKY_CHATS), st.text(max_size=10)),
    )
)
async def test_no_chat_id_reads_a_chat_that_is_not_the_askers(tools, chat_id) -> None:
    for turn in (dm(ALICE), in_group("oc_fake_launch", ALICE)):
        try:
            said = await run(tools, "feishu_get_chat_history", turn, chat_id=chat_id)
        except (ToolError, ToolArgumentsError) as exc:
            said = str(exc)
        assert not any(text in said for text in BOARD_TEXT), (chat_id, said)
        assert "salary review" not in said  # the HR chat, which the bot is not in


TRICKY_DOCUMENTS = [
    "doxcnFakeBudget",
    "https://example.feishu.cn/docx/doxcnFakeBudget",
    "https://example.feishu.cn/docx/doxcnFakeHandbook/../doxcnFakeBudget",
    "https://example.feishu.cn/docx/doxcnFakeHandbook?doc=doxcnFakeBudget",
    "doxcnFakeHandbook/../doxcnFakeBudget",
    "doxcnFakeBudget#doxcnFakeHandbook",
    " doxcnFakeBudget",
    "DOXCNFAKEBUDGET",
]


@HOSTILE
@given(
    document_id=st.one_of(
        st.sampled_from(TRICKY_DOCUMENTS),
        st.text(min_size=1, max_size=40),
        st.builds(lambda a, b: a + b, st.sampled_from(TRICKY_DOCUMENTS), st.text(max_size=10)),
    )
)
async def test_no_document_id_or_url_reads_a_document_that_is_not_the_askers(
    tools, document_id
) -> None:
    for turn in (dm(ALICE), in_group("oc_fake_eng", ALICE)):
        try:
            said = await run(tools, "feishu_read_document", turn, document_id=document_id)
        except (ToolError, ToolArgumentsError) as exc:
            said = str(exc)
        assert BUDGET_TEXT not in said, (document_id, said)


@HOSTILE
@given(
    app_token=st.one_of(
        st.sampled_from(["bascnFakeLevels", "bascnFakeProjects", "bascnFakeProjects/x"]),
        st.text(min_size=1, max_size=30),
    ),
    table_id=st.sampled_from(["tblFakeTasks", "tblFakeLevels", "tbl/../x"]),
)
async def test_no_base_token_reads_a_base_that_is_not_the_askers(
    tools, app_token, table_id
) -> None:
    try:
        said = await run(
            tools,
            "feishu_search_bitable_records",
            dm(ZHANG),
            app_token=app_token,
            table_id=table_id,
        )
    except (ToolError, ToolArgumentsError) as exc:
        said = str(exc)
    assert "Migrate the database" not in said and "L7" not in said


@HOSTILE
@given(calendar_id=st.one_of(st.none(), st.text(max_size=60)))
async def test_no_calendar_id_lists_an_event_the_asker_was_not_invited_to(
    tools, calendar_id
) -> None:
    try:
        said = await run(tools, "feishu_list_calendar_events", dm(ALICE), calendar_id=calendar_id)
    except (ToolError, ToolArgumentsError) as exc:
        said = str(exc)
    assert "Reorg briefing" not in said and "Board" not in said

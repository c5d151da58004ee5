"""The scheduled-task tools and their guard, called as the engine calls them, inside a turn:
every asker of the reply counts (``bot.askers``), and what a chat is shown is what everyone
in it may see (``bot.runtime.schedules.views``).

The end-to-end stories are in ``tests/e2e/test_schedule_askers.py`` and
``tests/e2e/test_schedule_views.py``; here are the checks the tools make themselves, also
when a hook before them let the call through.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.askers import Askers
from bot.engine import HookResult, RunContext, ToolError
from bot.engine.hooks import _CURRENT_RUN, ToolUse
from bot.runtime.schedules.scheduler import SchedulerConfig
from bot.runtime.schedules.tools import SEVERAL_ASKERS, ScheduleTools
from bot.runtime.schedules.views import Place, view_of
from bot.store import Database, upgrade_async
from bot.store.schedules import ScheduledTask, ScheduleStore
from bot.turn_context import TurnContext

from support.schedules import daily_task
from support.turns import look_alike

BOB, CAROL, ADMIN = "ou_bob", "ou_carol", "ou_admin"
GROUP, OTHER, DM = "oc_team", "oc_other", "oc_dm_bob"


def in_an_hour() -> str:
    """An ``at`` an hour from now, read when a test runs (never at import)."""
    return datetime.fromtimestamp(time.time() + 3600, UTC).isoformat()


def turn(
    sender: str = BOB,
    *,
    chat_id: str = GROUP,
    chat_type: str = "group",
    joined: list[str] | None = None,
    scheduled_task: str = "",
) -> TurnContext:
    """A turn's context; ``joined`` is read live, as the runtime's is (more may join)."""
    senders = joined if joined is not None else []
    return TurnContext(
        run_id="run-1",
        conversation_id=None,
        scope_key=f"chat:{chat_id}",
        message_id="om_1",
        chat_id=chat_id,
        chat_type=chat_type,
        sender_open_id=sender,
        thread_id="",
        generation=0,
        scheduled_task=scheduled_task,
        joined_senders=lambda: tuple(senders),
    )


@contextmanager
def serving(context: object) -> Iterator[None]:
    """As the engine's executor does around a tool's handler."""
    token = _CURRENT_RUN.set(RunContext(run_id="run-1", query="q", deps=context))
    try:
        yield
    finally:
        _CURRENT_RUN.reset(token)


@pytest.fixture
async def store(tmp_path) -> AsyncIterator[ScheduleStore]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'larkgate.db'}"
    await upgrade_async(url)
    async with Database(url) as db:
        yield ScheduleStore(db)


def tools_of(store: ScheduleStore, **options: Any) -> ScheduleTools:
    config = SchedulerConfig(owner="host:1", lease_seconds=60, grace_seconds=60)
    return ScheduleTools(
        store,
        config,
        default_timezone="UTC",
        is_admin=lambda person: person == ADMIN,
        wake=lambda: None,
        **options,
    )


async def add(store: ScheduleStore, creator: str, chat_id: str, prompt: str) -> ScheduledTask:
    chat_type = "p2p" if chat_id.startswith("oc_dm") else "group"
    return await daily_task(
        store, creator=creator, chat_id=chat_id, chat_type=chat_type, prompt=prompt
    )


async def test_a_reply_someone_joined_schedules_nothing(store):
    tools = tools_of(store)
    with serving(turn(joined=[CAROL])), pytest.raises(ToolError, match="several people"):
        await tools.schedule_task("Stretch", at=in_an_hour())
    assert await store.list(creator=None) == []


async def test_deps_that_only_look_like_a_turn_schedule_and_cancel_nothing(store):
    """The attacker's look-alike: deps of another type with every field of Bob's turn are
    no chat to schedule in, nor a person to list or cancel for."""
    mine = await add(store, BOB, GROUP, "Stretch")
    forged = look_alike(turn())
    tools = tools_of(store)
    for act in (
        lambda: tools.schedule_task("Stretch", at=in_an_hour()),
        tools.list_scheduled_tasks,
        lambda: tools.cancel_scheduled_task(mine.id),
    ):
        with serving(forged), pytest.raises(ToolError, match="only be managed from a chat"):
            await act()
    assert [task.id for task in await store.list(creator=None)] == [mine.id]


async def test_someone_joining_before_the_task_is_stored_stops_it(store):
    """Asked once more right before the insert: Carol's message lands while the creator's
    time zone is looked up (as it could while the approval card waited)."""
    joined: list[str] = []

    async def zone_of(person: str) -> str | None:
        joined.append(CAROL)
        return None

    tools = tools_of(store, time_zone_of=zone_of)
    with serving(turn(joined=joined)), pytest.raises(ToolError) as refused:
        await tools.schedule_task("Stretch", at=in_an_hour())
    assert str(refused.value) == SEVERAL_ASKERS
    assert await store.list(creator=None) == []


async def test_the_starters_own_follow_ups_still_schedule_as_him(store):
    tools = tools_of(store)
    with serving(turn(joined=[BOB, BOB])):
        assert (await tools.schedule_task("Stretch", at=in_an_hour())).startswith("Scheduled task")
    (task,) = await store.list(creator=None)
    assert (task.creator, task.chat_id, task.chat_type) == (BOB, GROUP, "group")


async def test_a_cancel_must_be_allowed_for_every_asker(store):
    bobs = await add(store, BOB, GROUP, "Water the plants")
    tools = tools_of(store)
    # An admin's reply that Carol joined: the admin may, Carol may not.
    with serving(turn(ADMIN, joined=[CAROL])), pytest.raises(ToolError, match="each of them"):
        await tools.cancel_scheduled_task(bobs.id)
    # Bob's reply that the admin joined: both may.
    with serving(turn(BOB, joined=[ADMIN])):
        assert await tools.cancel_scheduled_task(bobs.id) == f"Cancelled {bobs.id}: {bobs.name}."


async def test_cancelling_a_task_of_another_chat_in_a_group_does_not_name_it(store):
    private = await add(store, BOB, DM, "Book the clinic about my back")
    with serving(turn(ADMIN)):
        said = await tools_of(store).cancel_scheduled_task(private.id)
    assert "clinic" not in said and private.id in said


def call(name: str, context: TurnContext, **arguments: Any) -> ToolUse:
    tool = next(t for t in tools_of_none().tools() if t.name == name)
    run = RunContext(run_id=context.run_id, query="q", deps=context)
    return ToolUse(name, arguments, "c1", tool.side_effect, tool, 1, run)


def tools_of_none() -> ScheduleTools:
    return tools_of(None)  # type: ignore[arg-type]  # only the tools' specs are read


async def test_the_guard_refuses_before_anyone_is_asked_to_approve(store):
    guard = tools_of(store).guard()
    bobs = await add(store, BOB, GROUP, "Water the plants")

    async def verdict(name: str, context: TurnContext, **arguments: Any) -> HookResult:
        return await guard.pre_tool_use(call(name, context, **arguments))

    assert (await verdict("schedule_task", turn())).allow
    several = await verdict("schedule_task", turn(joined=[CAROL]))
    assert not several.allow and several.reason == SEVERAL_ASKERS
    scheduled = await verdict("cancel_scheduled_task", turn(scheduled_task="t1"), task_id=bobs.id)
    assert not scheduled.allow and "scheduled run" in (scheduled.reason or "")
    assert not (await verdict("cancel_scheduled_task", turn(CAROL), task_id=bobs.id)).allow
    assert (await verdict("cancel_scheduled_task", turn(BOB), task_id=bobs.id)).allow
    assert (await verdict("list_scheduled_tasks", turn(joined=[CAROL]))).allow


# The views: whatever the tasks, askers and place, a chat is shown only what every asker
# may see, and a group only its own tasks.

PEOPLE = st.sampled_from([BOB, CAROL, ADMIN, ""])
CHATS = st.sampled_from([GROUP, OTHER, DM])


def a_task(creator: str, chat_id: str, index: int) -> ScheduledTask:
    return ScheduledTask(
        id=f"t{index}",
        name=f"task {index}",
        prompt=f"prompt {index}",
        creator=creator,
        chat_id=chat_id,
        chat_type="p2p" if chat_id == DM else "group",
        thread_id="",
        reply_to="",
        kind="cron",
        expression="0 9 * * *",
        timezone="UTC",
        state="active",
        next_run_at=0.0,
        last_run_at=None,
        last_outcome=None,
        failures=0,
        created_at=0.0,
        created_in_run="",
    )


@given(
    st.lists(st.tuples(PEOPLE, CHATS), max_size=8),
    PEOPLE,
    st.lists(PEOPLE, max_size=3),
    st.sampled_from([Place(GROUP, "group"), Place(OTHER, "group"), Place(DM, "p2p")]),
)
def test_a_chat_is_shown_only_what_everyone_asking_may_see_and_a_group_only_its_own(
    made: list[tuple[str, str]], starter: str, joined: list[str], place: Place
) -> None:
    tasks = [a_task(creator, chat, index) for index, (creator, chat) in enumerate(made)]
    askers = Askers.of(starter, joined)
    view = view_of(tasks, askers, place, lambda person: person == ADMIN)
    for task in view.shown:
        for person in askers.everyone:
            assert person and (person == task.creator or person == ADMIN)
        if not place.private:
            assert task.chat_id == place.chat_id
    visible = [
        t for t in tasks if all(p and (p == t.creator or p == ADMIN) for p in askers.everyone)
    ]
    assert len(view.shown) + view.elsewhere == len(visible)
    if place.private:
        assert view.elsewhere == 0
    # A count says nothing of what it counts.
    assert all(t.prompt not in view.note() and t.name not in view.note() for t in tasks)

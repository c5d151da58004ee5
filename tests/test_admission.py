"""The one admission a message and a scheduled firing both pass
(``bot/runtime/intake/admission.py``), against the Feishu emulator's chat member list
through the real client.

A delivered message is Feishu's word that its sender and the bot are in the chat; a firing
has none, so Feishu is asked. Whatever the chat, the allowlist, who is in it and whether
the bot still is, an entry is admitted exactly when a message would be and its person and
the bot are in the group now.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.config import ChatPolicy
from bot.feishu.client import FeishuClient
from bot.governance.budgets import Budgets, Refusal
from bot.governance.config import BudgetConfig
from bot.runtime.intake.admission import MAX_MEMBER_PAGES, TOO_BIG, Admission, Closed, Entry
from bot.store import Database, upgrade_async
from bot.store.usage import UsageStore

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config

BOB, CAROL = "ou_bob", "ou_carol"
GROUP = "oc_team"
NO_LIMITS = BudgetConfig()


@pytest.fixture
async def fake() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu() as server:
        yield server


@pytest.fixture
async def client(fake: FakeFeishu) -> AsyncIterator[FeishuClient]:
    async with FeishuClient(feishu_config(fake), timeout=5.0) as feishu:
        yield feishu


@pytest.fixture
async def usage(tmp_path) -> AsyncIterator[UsageStore]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'larkgate.db'}"
    await upgrade_async(url)
    async with Database(url) as db:
        yield UsageStore(db)


def admission(
    client: FeishuClient,
    usage: UsageStore,
    *,
    allowlist: frozenset[str] = frozenset(),
    limits: BudgetConfig = NO_LIMITS,
) -> Admission:
    # One fixed moment: the rate limit's minute never turns over during a test.
    budgets = Budgets(limits, usage, clock=lambda: 1_800_000_000.0)
    return Admission(ChatPolicy(allowlist=allowlist), budgets, client)


def entry(person: str = BOB, *, chat_type: str = "group", delivered: bool = False) -> Entry:
    chat = GROUP if chat_type == "group" else f"oc_dm_{person}"
    return Entry(person, chat, chat_type, delivered=delivered)


ADMISSIONS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@ADMISSIONS
@given(
    chat_type=st.sampled_from(["group", "p2p"]),
    allowed=st.booleans(),
    delivered=st.booleans(),
    chat_known=st.booleans(),
    bot_in_chat=st.booleans(),
    people=st.sets(st.sampled_from([BOB, CAROL, "ou_dave"])),
    person=st.sampled_from([BOB, CAROL, ""]),
)
async def test_an_entry_is_admitted_exactly_when_its_chat_is_open_to_its_person(
    fake: FakeFeishu,
    client: FeishuClient,
    usage: UsageStore,
    chat_type: str,
    allowed: bool,
    delivered: bool,
    chat_known: bool,
    bot_in_chat: bool,
    people: set[str],
    person: str,
) -> None:
    fake.workspace.chats.pop(GROUP, None)
    if chat_known:
        fake.workspace.add_chat(GROUP, "Team", members=people, bot_is_member=bot_in_chat)
    door = admission(client, usage, allowlist=frozenset({GROUP} if allowed else {"oc_else"}))
    verdict = await door.admit(entry(person, chat_type=chat_type, delivered=delivered), spends=True)
    if chat_type == "p2p":
        assert verdict is None  # a direct message is the person's own
    elif not allowed:
        assert verdict == Closed(f"group {GROUP} is not on the allowlist")
    elif delivered:
        assert verdict is None  # the message itself says they are in it
    elif not chat_known:
        assert verdict == Closed("the group no longer exists")
    elif not bot_in_chat:
        assert verdict == Closed("the bot is no longer in the group")
    elif not person:
        assert isinstance(verdict, Closed)
    elif person not in people:
        assert verdict == Closed("its creator is no longer a member of the group")
    else:
        assert verdict is None


async def test_a_member_on_a_later_page_is_found(fake, client, usage):
    people = {f"ou_{n:04}" for n in range(250)}
    fake.workspace.add_chat(GROUP, "Big", members=people)
    assert await admission(client, usage).admit(entry("ou_0249"), spends=True) is None
    assert client.call_counts["im.chat.members.get"] == 3  # 100 a page


async def test_a_group_too_big_to_read_at_each_firing_is_closed(fake, client, usage):
    people = {f"ou_{n:05}" for n in range(MAX_MEMBER_PAGES * 100 + 1)}
    fake.workspace.add_chat(GROUP, "Huge", members=people)
    verdict = await admission(client, usage).admit(entry(BOB), spends=True)
    assert verdict == Closed(TOO_BIG)
    assert client.call_counts["im.chat.members.get"] == MAX_MEMBER_PAGES


async def test_a_failure_that_says_nothing_of_the_group_is_for_now_not_closed(fake, client, usage):
    fake.workspace.add_chat(GROUP, "Team", members={BOB})
    fake.fail("GET", r"/chats/.+/members$", 99991400, http_status=429)
    verdict = await admission(client, usage).admit(entry(BOB), spends=True)
    assert isinstance(verdict, Refusal) and "Feishu did not say" in verdict.text
    # Next time Feishu answers, and the task runs.
    assert await admission(client, usage).admit(entry(BOB), spends=True) is None


async def test_budgets_count_for_messages_and_firings_alike_and_only_when_spent(
    fake, client, usage
):
    fake.workspace.add_chat(GROUP, "Team", members={BOB})
    door = admission(client, usage, limits=BudgetConfig(messages_per_minute=1))
    message, firing = entry(BOB, delivered=True), entry(BOB)
    assert await door.admit(message, spends=False) is None  # a command: nothing spent
    assert await door.admit(message, spends=True) is None
    refused: Any = await door.admit(firing, spends=True)
    assert isinstance(refused, Refusal) and "(1 a minute)" in refused.text

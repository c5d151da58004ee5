"""The approval gate asks for every asker of a run, not only for the person who started it.

A message sent while the bot works joins the running reply, and its sender becomes an
asker too (``bot/askers.py``). These tests drive ``FeishuGateHook.pre_tool_use`` with runs
of any askers and any grants, over the real approval store (SQLite) and the real card path
against the Feishu emulator: a call goes without a card only when every asker holds a
grant; otherwise the card names them all and its approvers are those allowed for each of
them alike, or, when nobody is, the call is refused at once with a reason and no card.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.askers import Askers
from bot.engine import HookResult, RunContext, tool_from_function
from bot.engine.hooks import ToolUse
from bot.feishu.client import FeishuClient
from bot.governance.cards import ApprovalCards
from bot.governance.config import ApproverRule, GovernanceConfig
from bot.governance.decisions import ApprovalDecisions, DecisionRequest
from bot.governance.gate import FeishuGateHook
from bot.governance.person_wait import PersonWaits
from bot.store import (
    ApprovalStore,
    AuditLog,
    Database,
    NewApproval,
    OrgSettingsStore,
    upgrade_async,
)
from bot.turn_context import TurnContext

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config
from support.turns import look_alike, turn_context

ADMINS = frozenset({"ou_admin", "ou_boss"})
PEOPLE = ("ou_bob", "ou_carol", "ou_dave", "")
CHAT = "oc_team"
NOW = 1_700_000_000.0
# Who may approve, by rule: the rule of the configuration, and the admins it sees.
RULES = {
    "admins": (ApproverRule("auto"), ADMINS),
    "requester": (ApproverRule("requester"), ADMINS),
    "no admins": (ApproverRule("auto"), frozenset()),
    "list": (ApproverRule("list", ("ou_boss", "ou_bob")), ADMINS),
}
_scopes = itertools.count()


@dataclass
class Live:
    """The live answer card: tells the test when a call starts waiting for a human."""

    waiting_now: asyncio.Event = field(default_factory=asyncio.Event)

    def waiting(self, call_id: str) -> None:
        self.waiting_now.set()

    def resumed(self, call_id: str) -> None:
        pass


@dataclass
class Run:
    """What the runtime's TurnContext tells governance: where, and who asks (live)."""

    message_id: str
    sender_open_id: str
    scope_key: str
    joined: list[str] = field(default_factory=list)
    run_id: str = "run_1"
    generation: int = 1
    chat_id: str = CHAT
    chat_type: str = "group"
    thread_id: str = ""
    live: Live | None = None
    slot: Any = None

    def askers(self) -> Askers:
        return Askers.of(self.sender_open_id, self.joined)

    def turn(self) -> TurnContext:
        """The runtime's context of this turn: a real one, its joiners read live."""
        return turn_context(
            run_id=self.run_id,
            scope_key=self.scope_key,
            message_id=self.message_id,
            chat_id=self.chat_id,
            chat_type=self.chat_type,
            sender_open_id=self.sender_open_id,
            thread_id=self.thread_id,
            generation=self.generation,
            live=self.live,
            slot=self.slot,
            joined=self.joined,
        )


@dataclass
class World:
    database: Database
    approvals: ApprovalStore
    feishu: FakeFeishu
    client: FeishuClient

    def gate(self, rule: str, *, ttl: float = 0.0) -> tuple[FeishuGateHook, ApprovalDecisions]:
        approver_rule, admins = RULES[rule]
        config = GovernanceConfig(
            admins=admins, approvers=approver_rule, approval_ttl_seconds=ttl, console_url=None
        )
        waits = PersonWaits(self.approvals, kind="approval")
        cards = ApprovalCards(self.client, self.approvals, config=config)

        async def name_of(open_id: str) -> str:
            return open_id or "someone"

        gate = FeishuGateHook(
            config=config,
            store=self.approvals,
            waits=waits,
            cards=cards,
            connector_of=lambda tool: None,
            owner="p1",
            name_of=name_of,
            clock=lambda: NOW,
        )
        decisions = ApprovalDecisions(
            config=config,
            approvals=self.approvals,
            org=OrgSettingsStore(self.database),
            waits=waits,
            cards=cards,
        )
        return gate, decisions

    async def run(self, starter: str, joined: list[str] = (), **changes: Any) -> Run:
        """A run in a scope of its own, replying to a message in the chat."""
        sent = await self.client.send_message(
            "chat_id", CHAT, msg_type="text", content=json.dumps({"text": "deploy api"})
        )
        number = next(_scopes)
        scope = f"chat:{CHAT}:{number}"
        # Each run its own id, as the runtime gives: an approval is found again by its run.
        changes.setdefault("run_id", f"run_{number}")
        return Run(sent.message_id, starter, scope, list(joined), **changes)

    async def grant(self, run: Run, people: set[str]) -> None:
        """Bob's "approve for this person here" from an earlier call, for each of ``people``."""
        for person in sorted(people):
            record = await self.approvals.create(
                NewApproval(
                    run_id="earlier",
                    scope_key=run.scope_key,
                    generation=run.generation,
                    chat_id=CHAT,
                    message_id=run.message_id,
                    thread_id="",
                    tool="deploy",
                    connector=None,
                    arguments="{}",
                    reason=None,
                    requester=person,
                    approvers=("ou_admin",),
                    owner="p1",
                    ttl_seconds=600,
                )
            )
            await self.approvals.decide(record.id, "approve_session", actor="ou_admin")

    def cards(self, run: Run) -> list[Any]:
        return [m for m in self.feishu.sent if m.reply_to == run.message_id]


@pytest.fixture
async def world(tmp_path) -> AsyncIterator[World]:
    url = f"sqlite+aiosqlite:///{tmp_path}/gate.db"
    await upgrade_async(url)
    database = await Database.connect(url)
    async with FakeFeishu() as fake, FeishuClient(feishu_config(fake), timeout=5.0) as client:
        yield World(database, ApprovalStore(database, clock=lambda: NOW), fake, client)
    await database.dispose()


async def _deploy(service: str) -> str:
    """Deploy a service."""
    return f"{service} deployed"


DEPLOY = tool_from_function(_deploy, name="deploy", side_effect="write")


def call(run: Run) -> ToolUse:
    return ToolUse(
        name="deploy",
        arguments={"service": "api"},
        call_id="c1",
        side_effect="write",
        tool=DEPLOY,
        iteration=1,
        run=RunContext(run.run_id, "deploy api", run.turn()),
    )


async def _asked(world: World, run: Run) -> list[Any]:
    """The approvals the gate recorded for ``run`` (each ended in an audit row)."""
    entries = await AuditLog(world.database).recent(limit=10_000, action="approval.expired")
    ids = {e.target for e in entries}
    records = [await world.approvals.get(i) for i in ids]
    return [r for r in records if r is not None and r.scope_key == run.scope_key]


GATE = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@GATE
@given(
    starter=st.sampled_from(PEOPLE),
    joined=st.lists(st.sampled_from(PEOPLE), max_size=4),
    granted=st.sets(st.sampled_from(PEOPLE)),
    rule=st.sampled_from(sorted(RULES)),
)
async def test_a_call_runs_without_a_card_only_when_every_asker_holds_a_grant(
    world: World, starter: str, joined: list[str], granted: set[str], rule: str
):
    # The approval's time runs out at once: a card, when there is one, ends expired (no wait).
    gate, _ = world.gate(rule)
    run = await world.run(starter, joined)
    await world.grant(run, granted)
    askers = run.askers()
    cards_before = len(world.cards(run))

    result = await gate.pre_tool_use(call(run))

    new_cards = world.cards(run)[cards_before:]
    every_asker_granted = all(a in granted and a for a in askers.everyone)
    approver_rule, admins = RULES[rule]
    allowed_for_each = [set(approver_rule.approvers(a, admins)) for a in askers.everyone]
    approvers = set.intersection(*allowed_for_each) - {""}
    if every_asker_granted:
        assert result == HookResult()
        assert new_cards == []
        return
    assert not result.allow  # never silently: a card that expired, or a refusal
    if not approvers:
        assert new_cards == []
        assert "did not run" in (result.reason or "")
        if askers.several:
            assert "in a message of their own" in (result.reason or "")
        assert await _asked(world, run) == []
        return
    assert "expired" in (result.reason or "")
    [record] = await _asked(world, run)
    assert record.requesters == askers.everyone
    assert record.requester == starter
    assert set(record.approvers) == approvers
    # The card names every asker.
    [card] = new_cards
    facts = json.dumps(world.feishu.message_by_id[card.message_id].content, ensure_ascii=False)
    for asker in askers.everyone:
        assert (f"<at id={asker}></at>" if asker else "(unknown)") in facts


async def test_with_each_requester_approving_their_own_two_askers_are_refused_with_why(world):
    gate, _ = world.gate("requester", ttl=600)
    run = await world.run("ou_bob", ["ou_carol"])
    result = await gate.pre_tool_use(call(run))
    assert result.allow is False
    assert result.reason == (
        "deploy did not run: ou_bob and ou_carol asked in this one reply, and here each person "
        "approves only their own requests, so nobody may approve it for all of them. Each "
        "person should ask for it in a message of their own."
    )
    assert world.cards(run) == []
    # Alone, Bob gets his card (and approves it himself).
    live = Live()
    alone = await world.run("ou_bob", live=live)
    task = asyncio.ensure_future(gate.pre_tool_use(call(alone)))
    await live.waiting_now.wait()
    [record] = await world.approvals.pending()
    assert (record.requesters, record.approvers) == (("ou_bob",), ("ou_bob",))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_deps_that_only_look_like_a_turn_are_nobodys_turn(world):
    """The attacker's look-alike: deps of another type with every field of a real turn
    (a session grant for its asker included) are not a chat to ask in, nor grant-covered."""
    gate, _ = world.gate("admins", ttl=600)
    run = await world.run("ou_bob")
    await world.grant(run, {"ou_bob"})
    forged = replace(call(run), run=RunContext(run.run_id, "deploy api", look_alike(run.turn())))
    result = await gate.pre_tool_use(forged)
    assert result.allow is False
    assert result.reason == "deploy needs a human's approval, and no chat is open"
    assert await world.approvals.pending() == []
    # The same call in the real turn is covered by Bob's grant.
    assert (await gate.pre_tool_use(call(run))).allow


async def test_someone_who_joins_while_the_card_waits_is_not_covered_by_its_approval(world):
    gate, decisions = world.gate("admins", ttl=600)
    live = Live()
    run = await world.run("ou_bob", ["ou_carol"], live=live)
    waiting = asyncio.ensure_future(gate.pre_tool_use(call(run)))
    await live.waiting_now.wait()
    [record] = await world.approvals.pending()
    assert record.requesters == ("ou_bob", "ou_carol")
    run.joined.append("ou_dave")  # Dave's message joins the reply while the card waits
    decided = await decisions.decide(
        DecisionRequest(
            record.id,
            "approve_session",
            actor="ou_admin",
            via="card",
            chat_id=CHAT,
            card_message_id=record.card_message_id or "",
        )
    )
    assert decided.outcome == "decided"
    result = await waiting
    assert result.allow is False
    assert result.reason == (
        "deploy did not run: it was approved for ou_bob and ou_carol only, and ou_dave "
        "joined this reply while the approval waited. Ask for it again, so that the approval "
        "covers everyone whose message is in this reply."
    )
    # Asked again: Bob and Carol hold the grant now, Dave does not, so a card names all three.
    again = asyncio.ensure_future(gate.pre_tool_use(call(run)))
    live.waiting_now.clear()
    await live.waiting_now.wait()
    [record] = await world.approvals.pending()
    assert record.requesters == ("ou_bob", "ou_carol", "ou_dave")
    again.cancel()
    with pytest.raises(asyncio.CancelledError):
        await again


async def test_an_approval_for_the_askers_it_named_lets_the_call_run(world):
    gate, decisions = world.gate("admins", ttl=600)
    live = Live()
    run = await world.run("ou_bob", ["ou_carol", "ou_bob"], live=live)
    waiting = asyncio.ensure_future(gate.pre_tool_use(call(run)))
    await live.waiting_now.wait()
    [record] = await world.approvals.pending()
    run.joined.append("ou_carol")  # someone already named writes again: nobody new
    # Only the approvers stored on the approval decide it: neither asker may.
    for actor in ("ou_bob", "ou_carol"):
        refused = await decisions.decide(DecisionRequest(record.id, "approve", actor, "console"))
        assert refused.outcome == "forbidden"
    approved = await decisions.decide(DecisionRequest(record.id, "approve", "ou_boss", "console"))
    assert approved.outcome == "decided"
    assert await waiting == HookResult()

"""The decision path and the sealed buttons under hostile input (property-based).

Every approval decision takes one path (``ApprovalDecisions``). Whatever a click or the
console sends — another card's message id, another chat, someone who is not an approver,
a made-up decision, read-only mode switched on — the approval is decided only when every
rule holds, and a write is never approved while the organisation is read-only. Real
stores on SQLite, the real card path against the Feishu emulator.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.feishu.client import FeishuClient
from bot.governance.cards import ApprovalCards
from bot.governance.config import GovernanceConfig
from bot.governance.decisions import ApprovalDecisions, DecisionRequest
from bot.governance.person_wait import PersonWaits
from bot.governance.seal import ButtonSeal
from bot.store import ApprovalStore, Database, NewApproval, OrgSettingsStore, upgrade_async

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config

APPROVERS = ("ou_admin", "ou_boss")
PEOPLE = ("ou_admin", "ou_boss", "ou_asker", "ou_mallory", "", "ou_admin ")
CHAT = "oc_1"
HOSTILE = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@dataclass
class World:
    approvals: ApprovalStore
    org: OrgSettingsStore
    decisions: ApprovalDecisions
    feishu: FakeFeishu
    client: FeishuClient


@pytest.fixture
async def world(tmp_path) -> AsyncIterator[World]:
    url = f"sqlite+aiosqlite:///{tmp_path}/governance.db"
    await upgrade_async(url)
    database = await Database.connect(url)
    async with FakeFeishu() as fake, FeishuClient(feishu_config(fake), timeout=5.0) as client:
        governance = GovernanceConfig(admins=frozenset(APPROVERS), console_url=None)
        approvals = ApprovalStore(database)
        org = OrgSettingsStore(database)
        cards = ApprovalCards(client, approvals, config=governance)
        decisions = ApprovalDecisions(
            config=governance,
            approvals=approvals,
            org=org,
            waits=PersonWaits(approvals, kind="approval"),
            cards=cards,
        )
        yield World(approvals, org, decisions, fake, client)
    await database.dispose()


async def _pending(world: World, *, side_effect: str, arguments: str) -> tuple[str, str]:
    """A pending approval with a card in the chat; returns its id and the card's message id."""
    record = await world.approvals.create(
        NewApproval(
            run_id="run",
            scope_key=f"p2p:{CHAT}",
            generation=1,
            chat_id=CHAT,
            message_id="om_user",
            thread_id="",
            tool="deploy",
            connector=None,
            arguments=arguments,
            reason=None,
            requester="ou_asker",
            approvers=APPROVERS,
            owner="p1",
            ttl_seconds=600,
            side_effect=side_effect,
        )
    )
    sent = await world.client.send_message(
        "chat_id", CHAT, msg_type="text", content=json.dumps({"text": "card"})
    )
    await world.approvals.set_card(record.id, sent.message_id)
    return record.id, sent.message_id


requests = st.fixed_dictionaries(
    {
        "decision": st.sampled_from(["approve", "approve_session", "deny", "", "APPROVE", "x"]),
        "actor": st.sampled_from(PEOPLE),
        "via": st.sampled_from(["card", "console"]),
        "chat": st.sampled_from([CHAT, "oc_2", ""]),
        "own_card": st.booleans(),
        "other_id": st.booleans(),  # a made-up approval id instead of the real one
        "read_only": st.booleans(),
        "side_effect": st.sampled_from(["write", "read", "unknown"]),
        "long": st.booleans(),  # arguments too long for the card (and no console)
    }
)


@HOSTILE
@given(request=requests)
async def test_an_approval_is_decided_only_when_every_rule_holds(world: World, request):
    arguments = json.dumps({"service": "s" * (60_000 if request["long"] else 10)})
    approval_id, card_id = await _pending(
        world, side_effect=request["side_effect"], arguments=arguments
    )
    await world.org.set_read_only(request["read_only"], actor="ou_admin", chat_id=None)
    asked = DecisionRequest(
        approval_id="apr_forged" if request["other_id"] else approval_id,
        decision=request["decision"],
        actor=request["actor"],
        via=request["via"],
        chat_id=request["chat"],
        card_message_id=card_id if request["own_card"] else "om_elsewhere",
    )
    result = await world.decisions.decide(asked)
    after = await world.approvals.get(approval_id)

    from_its_card = request["via"] == "console" or (request["own_card"] and request["chat"] == CHAT)
    allowed = (
        not request["other_id"]
        and request["decision"] in ("approve", "approve_session", "deny")
        and from_its_card
        and request["actor"] in APPROVERS
    )
    approving = request["decision"] != "deny"
    writes = request["side_effect"] != "read"
    if not allowed:
        assert after.state == "pending", (request, result)
        assert result.outcome != "decided"
    elif approving and writes and request["read_only"]:
        # Read-only mode: never approved; the approval is cancelled and says why.
        assert (result.outcome, after.state, after.note) == (
            "read_only",
            "cancelled",
            "read-only mode",
        )
    elif approving and request["long"] and request["via"] == "card":
        # Nobody could read the whole call: not approvable from the card.
        assert (result.outcome, after.state) == ("unreadable", "pending")
    else:
        assert result.outcome == "decided"
        assert after.state == ("denied" if request["decision"] == "deny" else "approved")
        assert after.decided_by == request["actor"]
    # Whatever happened, read-only mode and an approved write never go together.
    assert not (request["read_only"] and writes and after.state == "approved")


seals = st.dictionaries(
    st.text(min_size=1, max_size=8),
    st.one_of(st.integers(), st.text(max_size=12), st.booleans(), st.none()),
    max_size=5,
)


@settings(max_examples=300, derandomize=True)
@given(
    value=seals, key=st.binary(min_size=1, max_size=32), other=st.binary(min_size=1, max_size=32)
)
def test_a_sealed_value_holds_only_unchanged_and_under_its_own_key(value, key, other):
    seal = ButtonSeal(key)
    sealed = seal.sealed(value)
    assert seal.valid(sealed)
    if other != key:
        assert not ButtonSeal(other).valid(sealed)
    for name in value:
        changed = {**sealed, name: "changed" if sealed[name] != "changed" else "other"}
        assert not seal.valid(changed)
    assert not seal.valid({**sealed, "extra": 1})
    assert not seal.valid({k: v for k, v in sealed.items() if k != "seal"})
    assert not seal.valid({**sealed, "seal": sealed["seal"].upper() + "0"})

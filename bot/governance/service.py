"""Governance, assembled: what the composition root wires into the runtime and routes."""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from bot.engine import Hook, ToolRegistry
from bot.feishu.client import FeishuClient
from bot.store.approvals import ApprovalRecord, ApprovalStore
from bot.store.audit import AuditLog
from bot.store.checkpoints import CheckpointStore
from bot.store.db import Database
from bot.store.org import OrgSettingsStore
from bot.store.replays import ReplayGuard
from bot.store.usage import UsageStore

from .actions import CardActions
from .admin import AdminCommands
from .budgets import Budgets
from .cards import ApprovalCards
from .config import GovernanceConfig
from .console import ConsoleActions
from .decisions import ApprovalDecisions
from .gate import FeishuGateHook
from .names import UserNames
from .person_wait import PersonWaits
from .profile_guard import ProfileGuard
from .readonly import ReadOnlyGuard, ReadOnlySwitch, ToolsForRun
from .seal import ButtonSeal
from .sweeper import ApprovalSweeper


@dataclass(frozen=True)
class Governance:
    config: GovernanceConfig
    approvals: ApprovalStore
    org: OrgSettingsStore
    audit: AuditLog
    waits: PersonWaits[ApprovalRecord]
    sweeper: ApprovalSweeper
    # PreToolUse hooks, in order: the profile guard (a tool the chat's agent may not use),
    # the read-only guard, so a write in read-only mode is refused without asking anyone;
    # the approval gate; the read-only guard again,
    # at the moment the call would run (after any wait for a human). Nothing after them
    # may rewrite a call's arguments: what was approved is what runs.
    hooks: tuple[Hook, ...]
    tools_for_run: ToolsForRun
    card_actions: CardActions
    admin: AdminCommands
    budgets: Budgets
    # The web console's approve / deny and read-only switch (bot/console).
    console: ConsoleActions
    # The one path of every approval decision (card clicks and the console).
    decisions: ApprovalDecisions
    # Card callbacks already acted on, for the replay window.
    replays: ReplayGuard


def build_governance(
    config: GovernanceConfig,
    *,
    database: Database,
    feishu: FeishuClient,
    tools: ToolRegistry,
    connector_of: Callable[[str], str | None],
    owner: str,
    spawn: Callable[[Coroutine[Any, Any, None]], object],
    sweep_interval: float,
    replay_window_seconds: float,
    clock: Callable[[], float] = time.time,
    on_approval_outcome: Callable[[str], None] | None = None,
    names: UserNames | None = None,
    acts_as_user: Callable[[str], bool] | None = None,
    user_auth_gate: Hook | None = None,
    app: str = "",
) -> Governance:
    """``app``: the [apps.NAME] whose approvals and audit these are ("": the default app).
    ``names``: the people directory (cached names and time zones), when the caller
    shares one with other parts; else governance makes its own. ``acts_as_user``: which
    tools act as the requester (their approval cards say so); ``user_auth_gate``: the hook
    that gets the requester's consent for them (per-user authorisation on)."""
    approvals = ApprovalStore(database, clock=clock, on_outcome=on_approval_outcome, app=app)
    org = OrgSettingsStore(database, clock=clock, app=app)
    audit = AuditLog(database, clock=clock, app=app)
    waits = PersonWaits(approvals, kind="approval")
    cards = ApprovalCards(feishu, approvals, config=config, acts_as_user=acts_as_user)
    replays = ReplayGuard(database, clock=clock)
    names = names or UserNames(feishu)
    gate = _gate(config, approvals, waits, cards, names, connector_of, owner, clock)
    switch = ReadOnlySwitch(org, approvals, waits, cards, spawn=spawn)
    admin = AdminCommands(config, org, audit, switch, ButtonSeal(config.button_key))
    decisions = ApprovalDecisions(
        config=config, approvals=approvals, org=org, waits=waits, cards=cards
    )
    usage = UsageStore(database, clock=clock)
    budgets = Budgets(
        config.budgets, usage, timezone=config.timezone, clock=clock, profiles=config.profiles
    )
    return Governance(
        config=config,
        approvals=approvals,
        org=org,
        audit=audit,
        waits=waits,
        sweeper=ApprovalSweeper(
            approvals,
            cards,
            interval=sweep_interval,
            checkpoints=CheckpointStore(database, clock=clock),
        ),
        # Consent to act as the requester is asked after the approval (no one is asked to
        # authorise a call that will be denied), and before read-only mode's last word.
        hooks=(
            ProfileGuard(),  # a tool this chat's agent may not use is never even approved
            ReadOnlyGuard(org),
            gate,
            *((user_auth_gate,) if user_auth_gate is not None else ()),
            ReadOnlyGuard(org),
        ),
        tools_for_run=ToolsForRun(tools, org),
        card_actions=CardActions(
            decisions=decisions,
            cards=cards,
            admin=admin,
            replays=replays,
            replay_window_seconds=replay_window_seconds,
            feishu=feishu,
            spawn=spawn,
        ),
        admin=admin,
        console=ConsoleActions(config=config, decisions=decisions, admin=admin),
        decisions=decisions,
        replays=replays,
        budgets=budgets,
    )


def _gate(
    config: GovernanceConfig,
    approvals: ApprovalStore,
    waits: PersonWaits[ApprovalRecord],
    cards: ApprovalCards,
    names: UserNames,
    connector_of: Callable[[str], str | None],
    owner: str,
    clock: Callable[[], float],
) -> FeishuGateHook:
    # The card names the requester: a cached lookup per person, not one per approval.
    return FeishuGateHook(
        config=config,
        store=approvals,
        waits=waits,
        cards=cards,
        connector_of=connector_of,
        owner=owner,
        name_of=names.name,
        clock=clock,
    )

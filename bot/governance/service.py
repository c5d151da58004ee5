"""Governance, assembled: what the composition root wires into the runtime and routes."""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from bot.engine import ToolRegistry
from bot.feishu.client import FeishuClient
from bot.store.approvals import ApprovalStore
from bot.store.audit import AuditLog
from bot.store.db import Database
from bot.store.org import OrgSettingsStore
from bot.store.usage import UsageStore

from .actions import CardActions
from .admin import AdminCommands
from .budgets import Budgets
from .cards import ApprovalCards
from .config import GovernanceConfig
from .console import ConsoleActions
from .gate import FeishuGateHook
from .names import UserNames
from .readonly import ReadOnlyGuard, ToolsForRun
from .sweeper import ApprovalSweeper
from .waits import ApprovalWaits


@dataclass(frozen=True)
class Governance:
    config: GovernanceConfig
    approvals: ApprovalStore
    org: OrgSettingsStore
    audit: AuditLog
    waits: ApprovalWaits
    sweeper: ApprovalSweeper
    # PreToolUse hooks, in order: the read-only guard first, so a write in read-only
    # mode is refused without asking anyone.
    hooks: tuple[object, ...]
    tools_for_run: ToolsForRun
    card_actions: CardActions
    admin: AdminCommands
    budgets: Budgets
    # The web console's approve / deny and read-only switch (bot/console).
    console: ConsoleActions


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
    clock: Callable[[], float] = time.time,
    on_approval_outcome: Callable[[str], None] | None = None,
) -> Governance:
    approvals = ApprovalStore(database, clock=clock, on_outcome=on_approval_outcome)
    org = OrgSettingsStore(database, clock=clock)
    audit = AuditLog(database, clock=clock)
    waits = ApprovalWaits(approvals)
    cards = ApprovalCards(feishu, approvals, timezone=config.timezone)
    names = UserNames(feishu)
    gate = FeishuGateHook(
        config=config,
        store=approvals,
        waits=waits,
        cards=cards,
        connector_of=connector_of,
        owner=owner,
        name_of=names.name,
        clock=clock,
    )
    admin = AdminCommands(config, org, audit)
    return Governance(
        config=config,
        approvals=approvals,
        org=org,
        audit=audit,
        waits=waits,
        sweeper=ApprovalSweeper(approvals, cards, interval=sweep_interval),
        hooks=(ReadOnlyGuard(org), gate),
        tools_for_run=ToolsForRun(tools, org),
        card_actions=CardActions(
            config=config,
            approvals=approvals,
            waits=waits,
            cards=cards,
            admin=admin,
            feishu=feishu,
            spawn=spawn,
        ),
        admin=admin,
        console=ConsoleActions(
            config=config, approvals=approvals, waits=waits, cards=cards, admin=admin
        ),
        budgets=Budgets(
            config.budgets, UsageStore(database, clock=clock), timezone=config.timezone, clock=clock
        ),
    )

"""Governance settings as the composition root hands them over: typed, validated once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from bot.profiles import Profiles

# always: every call asks; never: no call asks; write: calls of tools that are not
# classified read ask (an unclassified tool counts as a write).
ApprovalMode = Literal["always", "never", "write"]
APPROVAL_MODES: tuple[ApprovalMode, ...] = ("always", "never", "write")
ApproverKind = Literal["auto", "requester", "admins", "list"]


@dataclass(frozen=True, slots=True)
class ApprovalRules:
    """Which tool calls need a human's approval: per tool, then per connector, then default."""

    default: ApprovalMode = "write"
    tools: Mapping[str, ApprovalMode] = field(default_factory=dict)
    connectors: Mapping[str, ApprovalMode] = field(default_factory=dict)
    # "Approve for this person here": later calls of the same tool by the same requester in
    # the same conversation generation run unasked. False removes the button.
    session_grants: bool = True

    def mode_for(self, tool: str, connector: str | None) -> ApprovalMode:
        if tool in self.tools:
            return self.tools[tool]
        if connector is not None and connector in self.connectors:
            return self.connectors[connector]
        return self.default

    def needs_approval(self, tool: str, connector: str | None, side_effect: str) -> bool:
        mode = self.mode_for(tool, connector)
        return mode == "always" or (mode == "write" and side_effect != "read")


@dataclass(frozen=True, slots=True)
class ApproverRule:
    """Who may decide an approval.

    ``auto`` (the default): the admins when any are configured, else the requester.
    ``admins`` with no admins configured falls back to the requester, so an approval
    can always be decided by somebody.
    """

    kind: ApproverKind = "auto"
    open_ids: tuple[str, ...] = ()

    def approvers(self, requester: str, admins: frozenset[str]) -> tuple[str, ...]:
        if self.kind == "list" and self.open_ids:
            return self.open_ids
        if self.kind == "requester" or not admins:
            return (requester,)
        return tuple(sorted(admins))


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    """Per-user message rate and daily token budgets; 0 switches a limit off."""

    messages_per_minute: int = 0
    user_daily_tokens: int = 0
    group_daily_tokens: int = 0

    @property
    def any(self) -> bool:
        return bool(self.messages_per_minute or self.user_daily_tokens or self.group_daily_tokens)


@dataclass(frozen=True, slots=True)
class GovernanceConfig:
    admins: frozenset[str] = frozenset()
    approval_ttl_seconds: float = 600.0
    rules: ApprovalRules = field(default_factory=ApprovalRules)
    approvers: ApproverRule = field(default_factory=ApproverRule)
    budgets: BudgetConfig = field(default_factory=BudgetConfig)
    # IANA zone for times shown on cards, and for when daily budgets reset.
    timezone: str = "UTC"
    # The key that seals the buttons governance renders (admin toggles): a click whose value
    # was not written by this bot (a forged or reworded card) is refused. Derived from the
    # app secret at the composition root, so every replica accepts every replica's cards.
    button_key: bytes = field(default=b"", repr=False)
    # Where an approver reads a call too long for its card in full (the web console's page),
    # or None when the console is off; "" when it is on but the public URL is unknown.
    console_url: str | None = None
    # The agent profiles and the chats routed to them (shown on the admin card).
    profiles: Profiles = field(default_factory=Profiles)

    def is_admin(self, open_id: str) -> bool:
        return open_id in self.admins

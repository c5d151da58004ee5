"""Governance settings: which tool calls need approval, who decides, which budgets are on."""

from __future__ import annotations

import dataclasses

import pytest

from bot.governance.config import (
    APPROVAL_MODES,
    ApprovalRules,
    ApproverRule,
    BudgetConfig,
    GovernanceConfig,
)

# A tool's side effect as the registry reports it; anything not "read" counts as a write.
SIDE_EFFECTS = ["read", "write", "unknown", ""]


@pytest.mark.parametrize("side_effect", SIDE_EFFECTS)
def test_write_mode_asks_for_everything_not_classified_read(side_effect):
    rules = ApprovalRules(default="write")
    assert rules.needs_approval("tool", None, side_effect) is (side_effect != "read")


@pytest.mark.parametrize("side_effect", SIDE_EFFECTS)
def test_always_and_never(side_effect):
    assert ApprovalRules(default="always").needs_approval("tool", "c", side_effect) is True
    assert ApprovalRules(default="never").needs_approval("tool", "c", side_effect) is False


def test_the_default_mode_is_write():
    rules = ApprovalRules()
    assert rules.default == "write"
    assert rules.needs_approval("deploy", None, "write")
    assert not rules.needs_approval("status", None, "read")
    assert set(APPROVAL_MODES) == {"always", "never", "write"}


def test_a_tool_rule_wins_over_its_connector_which_wins_over_the_default():
    rules = ApprovalRules(
        default="never",
        tools={"sql_execute": "always", "http_post": "never"},
        connectors={"sql": "write", "http": "always"},
    )
    # The tool's own rule.
    assert rules.mode_for("sql_execute", "sql") == "always"
    assert rules.needs_approval("sql_execute", "sql", "read")
    assert rules.mode_for("http_post", "http") == "never"
    assert not rules.needs_approval("http_post", "http", "write")
    # The connector's rule.
    assert rules.mode_for("sql_query", "sql") == "write"
    assert not rules.needs_approval("sql_query", "sql", "read")
    assert rules.needs_approval("sql_insert", "sql", "write")
    assert rules.needs_approval("http_get", "http", "read")
    # The default: another connector, or a tool of no connector (added directly).
    assert rules.mode_for("calculator", "utilities") == "never"
    assert rules.mode_for("custom", None) == "never"
    assert not rules.needs_approval("custom", None, "write")


def test_a_tool_rule_applies_whatever_its_connector():
    rules = ApprovalRules(tools={"deploy": "always"})
    assert rules.mode_for("deploy", None) == "always"
    assert rules.mode_for("deploy", "ops") == "always"


def test_a_connector_rule_needs_the_connector():
    rules = ApprovalRules(default="always", connectors={"utilities": "never"})
    assert not rules.needs_approval("calculator", "utilities", "read")
    assert rules.needs_approval("calculator", None, "read")


ADMINS = frozenset({"ou_b", "ou_a"})
NO_ADMINS: frozenset[str] = frozenset()


@pytest.mark.parametrize(
    ("rule", "admins", "expected"),
    [
        (ApproverRule(), ADMINS, ("ou_a", "ou_b")),  # auto: the admins, sorted
        (ApproverRule(), NO_ADMINS, ("ou_req",)),  # auto: else the requester
        (ApproverRule("requester"), ADMINS, ("ou_req",)),
        (ApproverRule("requester"), NO_ADMINS, ("ou_req",)),
        (ApproverRule("admins"), ADMINS, ("ou_a", "ou_b")),
        (ApproverRule("admins"), NO_ADMINS, ("ou_req",)),  # somebody must be able to decide
        (ApproverRule("list", ("ou_y", "ou_x")), ADMINS, ("ou_y", "ou_x")),  # as given
        (ApproverRule("list", ("ou_x",)), NO_ADMINS, ("ou_x",)),
        (ApproverRule("list", ()), ADMINS, ("ou_a", "ou_b")),  # an empty list: auto
        (ApproverRule("list", ()), NO_ADMINS, ("ou_req",)),
    ],
)
def test_approvers(rule, admins, expected):
    assert rule.approvers("ou_req", admins) == expected


def test_a_listed_approver_list_need_not_include_the_requester_or_the_admins():
    rule = ApproverRule("list", ("ou_x",))
    assert "ou_req" not in rule.approvers("ou_req", ADMINS)
    assert not set(rule.approvers("ou_req", ADMINS)) & ADMINS


@pytest.mark.parametrize(
    ("budgets", "on"),
    [
        (BudgetConfig(), False),
        (BudgetConfig(messages_per_minute=1), True),
        (BudgetConfig(user_daily_tokens=1), True),
        (BudgetConfig(group_daily_tokens=1), True),
    ],
)
def test_budgets_are_on_when_any_limit_is(budgets, on):
    assert budgets.any is on


def test_governance_config_defaults_and_admins():
    config = GovernanceConfig(admins=frozenset({"ou_a"}))
    assert config.is_admin("ou_a") and not config.is_admin("ou_b")
    assert config.approval_ttl_seconds == 600.0
    assert config.rules == ApprovalRules()
    assert config.approvers == ApproverRule("auto")
    assert config.budgets == BudgetConfig()
    assert config.timezone == "UTC"
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.timezone = "Asia/Shanghai"  # type: ignore[misc]

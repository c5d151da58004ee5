"""Agent profiles as larkgate.toml declares them: parsing, routing, what each allows."""

from __future__ import annotations

import fnmatch
import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.config import SettingsError, load_settings
from bot.engine import ToolRegistry, tool_from_function
from bot.profiles import Profile, ProfileError, Profiles, load_profiles

from support.env import clear_settings, servable

OPS = """
[profiles.ops]
instructions = "You are the operations desk."
tools = ["calculator", "sql_*"]
model = "fast"
approvers = ["ou_lead"]
mode = "dag"

[profiles.hr]
instructions = "You help HR."
read_only = true

[groups]
allowlist = ["oc_ops", "oc_hr"]

[groups."oc_ops"]
profile = "ops"
require_mention = false

[groups."oc_hr"]
profile = "hr"

[dm]
profile = "hr"
"""


def parsed(text: str) -> Profiles:
    return load_profiles(tomllib.loads(text), where="larkgate.toml")


def test_chats_are_routed_to_their_profiles():
    profiles = parsed(OPS)
    ops = profiles.for_chat("oc_ops", "group")
    assert ops is not None and ops.name == "ops"
    assert ops.tools == ("calculator", "sql_*")
    assert (ops.model, ops.approvers, ops.mode) == ("fast", ("ou_lead",), "dag")
    assert profiles.for_chat("oc_hr", "group").name == "hr"
    assert profiles.for_chat("oc_p2p_anyone", "p2p").name == "hr"  # [dm]
    assert profiles.for_chat("oc_elsewhere", "group") is None  # the default agent
    assert profiles.routes() == [
        ("direct messages", "hr"),
        ("group oc_hr", "hr"),
        ("group oc_ops", "ops"),
    ]


def test_without_a_dm_route_direct_messages_get_the_default_agent():
    profiles = parsed('[profiles.ops]\ntools = ["calculator"]\n[groups."oc_1"]\nprofile = "ops"\n')
    assert profiles.for_chat("oc_p2p", "p2p") is None


def _tool(name: str, side_effect: str):
    def run() -> str:
        """A tool."""
        return name

    run.__name__ = name
    return tool_from_function(run, side_effect=side_effect)


def test_a_profile_offers_only_its_tools_and_a_read_only_one_no_write():
    registry = ToolRegistry(
        [
            _tool("calculator", "read"),
            _tool("sql_query", "read"),
            _tool("sql_execute", "write"),
            _tool("http_post", "write"),
        ]
    )
    profiles = parsed(OPS)
    assert profiles.profiles["ops"].offer(registry).names() == [
        "calculator",
        "sql_query",
        "sql_execute",
    ]
    assert profiles.profiles["hr"].offer(registry).names() == ["calculator", "sql_query"]
    assert not profiles.profiles["ops"].allows("http_post", "write")
    assert "not one of the tools" in profiles.profiles["ops"].refusal("http_post")
    assert not profiles.profiles["hr"].allows("sql_execute", "write")
    assert "read-only" in profiles.profiles["hr"].refusal("sql_execute")


@given(
    st.lists(st.from_regex(r"[a-z_*?]{1,8}", fullmatch=True), max_size=4),
    st.from_regex(r"[a-z_]{1,10}", fullmatch=True),
    st.sampled_from(["read", "write"]),
    st.booleans(),
)
def test_a_call_is_allowed_exactly_when_a_pattern_matches_it(patterns, tool, effect, read_only):
    # The guard and what is offered agree: a tool runs only if offered, and is offered
    # only if it may run (fnmatch, case-sensitive, as the patterns are written).
    profile = Profile("p", tools=tuple(patterns), read_only=read_only)
    matched = any(fnmatch.fnmatchcase(tool, p) for p in patterns)
    assert profile.allows(tool, effect) == (matched and not (read_only and effect != "read"))
    offered = profile.offer(ToolRegistry([_tool(tool, effect)])).names()
    assert offered == ([tool] if profile.allows(tool, effect) else [])


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('[groups."oc_1"]\nprofile = "nope"\n', "names no [profiles.*] table"),
        ('[dm]\nprofile = "nope"\n', "dm.profile = 'nope'"),
        ('[dm]\nprofil = "x"\n', "[dm] takes only profile"),
        ("[profiles.ops]\ntool = ['calculator']\n", "unknown key tool"),
        ("[profiles.ops]\ntools = 'calculator'\n", "tools must be a list"),
        ("[profiles.ops]\ntools = ['']\n", "tools must be a list"),
        ("[profiles.ops]\napprovers = ['alice']\n", "approvers must be a list of open_ids"),
        ("[profiles.ops]\nmode = 'fast'\n", "mode must be one of"),
        ("[profiles.ops]\nread_only = 'yes'\n", "read_only must be true or false"),
        ("[profiles.ops]\ninstructions = 3\n", "instructions must be text"),
        ("[profiles.ops]\nuser_daily_tokens = -1\n", "user_daily_tokens must be a whole"),
        ("[profiles.ops]\nmessages_per_minute = true\n", "messages_per_minute must be"),
        ("[profiles.ops]\ngroup_daily_tokens = 1.5\n", "group_daily_tokens must be"),
        ("[profiles.'a b']\n", "letters, digits"),
        ("profiles = 3\n", "[profiles] must hold tables"),
        ("groups = 3\n", "[groups] must be a table"),
        ("dm = 3\n", "[dm] must be a table"),
    ],
)
def test_a_wrong_table_is_said_with_where(text, said):
    with pytest.raises(ProfileError) as raised:
        parsed(text)
    assert said in str(raised.value) and "larkgate.toml" in str(raised.value)


def test_settings_refuse_a_route_to_no_profile(monkeypatch, tmp_path):
    clear_settings(monkeypatch, tmp_path)
    config = tmp_path / "larkgate.toml"
    config.write_text('[groups."oc_1"]\nprofile = "ghost"\n')
    monkeypatch.setenv("LARKGATE_CONFIG", str(config))
    with pytest.raises(SettingsError, match="names no"):
        load_settings().profiles()
    config.write_text(OPS)
    assert load_settings().profiles().for_chat("oc_ops", "group").name == "ops"
    # The other readers of [groups] take the table with its profile key as before.
    policy = load_settings().policy()
    assert not policy.mention_required("oc_ops") and policy.group_allowed("oc_hr")


def test_serve_refuses_a_route_to_no_profile_at_start(monkeypatch, tmp_path, capsys):
    from bot.cli import main

    clear_settings(monkeypatch, tmp_path)
    config = tmp_path / "larkgate.toml"
    config.write_text('[dm]\nprofile = "ghost"\n')
    servable(monkeypatch, LARKGATE_CONFIG=str(config))
    assert main(["serve", "--port", "9"]) == 2
    assert "dm.profile = 'ghost' names no [profiles.*] table" in capsys.readouterr().err


def test_a_profiles_budgets_replace_the_settings_in_its_chats_only():
    from bot.governance.budgets import Budgets
    from bot.governance.config import BudgetConfig

    profiles = parsed(
        "[profiles.tight]\nuser_daily_tokens = 10\nmessages_per_minute = 0\n"
        '[groups."oc_t"]\nprofile = "tight"\n'
    )
    settings = BudgetConfig(messages_per_minute=5, user_daily_tokens=0, group_daily_tokens=99)
    budgets = Budgets(settings, usage=None, profiles=profiles)  # type: ignore[arg-type]
    assert budgets.config_for("oc_t", "group") == BudgetConfig(0, 10, 99)
    assert budgets.config_for("oc_x", "group") == settings
    assert budgets.config_for("oc_dm", "p2p") == settings
    assert budgets.enabled and budgets.counts_tokens
    # Only a profile's budget on: tokens are counted (and only there are they limited).
    only = Budgets(BudgetConfig(), usage=None, profiles=profiles)  # type: ignore[arg-type]
    assert only.enabled and only.counts_tokens
    assert not Budgets(BudgetConfig(), usage=None).enabled  # type: ignore[arg-type]


def test_a_profile_without_memory_offers_and_allows_no_memory_tool():
    from bot.engine import ToolRegistry, tool_from_function
    from bot.profiles import MEMORY_TOOLS

    async def remember(text: str) -> str:
        """Remember."""
        return text

    async def lookup(q: str) -> str:
        """Look up."""
        return q

    registry = ToolRegistry(
        [
            tool_from_function(remember, side_effect="read"),
            tool_from_function(lookup, side_effect="read"),
        ]
    )
    (quiet,) = load_profiles(
        {"profiles": {"quiet": {"memory": False}}}, where="t"
    ).profiles.values()
    assert [t.name for t in quiet.offer(registry)] == ["lookup"]
    assert not any(quiet.allows(name, "read") for name in MEMORY_TOOLS)
    assert "keeps no memories" in quiet.refusal("remember")
    with pytest.raises(ProfileError, match="memory must be true or false"):
        load_profiles({"profiles": {"quiet": {"memory": "no"}}}, where="t")

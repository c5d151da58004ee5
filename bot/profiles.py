"""Agent profiles: a different agent per chat, declared in ``larkgate.toml``::

    [profiles.ops]
    instructions = "You are the operations desk ..."   # added to the agent's instructions
    tools = ["calculator", "sql_*"]                     # the only tools offered (names, globs)
    model = "fast"                                      # a [models.*] hint, or a model name
    approvers = ["ou_..."]                              # who approves writes there
    mode = "react"                                      # react | dag | auto
    read_only = true                                    # no tool that writes, there
    memory = false                                      # no memories recalled or kept there
    user_daily_tokens = 50000                           # budgets there (0: none), in place
    group_daily_tokens = 200000                         #   of LARKGATE_USER_DAILY_TOKENS,
    messages_per_minute = 10                            #   ..._GROUP_..., ..._RATE_LIMIT_...

    [groups."oc_..."]
    profile = "ops"

    [dm]
    profile = "helpdesk"

A chat routed to no profile (and every DM without ``[dm]``) gets the default agent, as
configured by the environment. A profile's ``tools`` are enforced twice: only they are
offered to the model (tool selection chooses among them), and a call of any other tool is
refused before it runs (``bot.governance.profile_guard``), whatever the model names.

This module is neutral ground (the turn's context carries the run's profile): it imports
nothing of the bot but the engine's tool registry.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.engine import ToolRegistry

RunMode = Literal["react", "dag", "auto"]
_RUN_MODES = ("react", "dag", "auto")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
# The memory tools (``bot.memory.tools``): a profile with ``memory = false`` has neither.
MEMORY_TOOLS = ("remember", "forget")
BUDGET_KEYS = ("messages_per_minute", "user_daily_tokens", "group_daily_tokens")
_PROFILE_KEYS = frozenset(
    {"instructions", "tools", "model", "approvers", "mode", "read_only", "memory", *BUDGET_KEYS}
)
MAX_INSTRUCTIONS = 8_000


class ProfileError(ValueError):
    """A ``[profiles]``, ``[groups]`` or ``[dm]`` table that cannot be used; says where."""


@dataclass(frozen=True, slots=True)
class Profile:
    """One agent: what it is told, what it may use, on which model, approved by whom."""

    name: str
    instructions: str = ""
    # Names or globs ("sql_*"); None: every tool (as the default agent).
    tools: tuple[str, ...] | None = None
    model: str = ""
    approvers: tuple[str, ...] = ()
    mode: RunMode | None = None
    read_only: bool = False
    # Memories recalled into its runs and the remember/forget tools (LARKGATE_MEMORY too).
    memory: bool = True
    # Budgets in this profile's chats, by BUDGET_KEYS name, in place of the settings'
    # (a key absent: the setting's; 0: no limit there).
    budgets: Mapping[str, int] = field(default_factory=dict)

    def allows(self, tool: str, side_effect: str) -> bool:
        """Whether a call of ``tool`` may run in this profile's chats."""
        if self.read_only and side_effect != "read":
            return False
        if not self.memory and tool in MEMORY_TOOLS:
            return False
        return self.tools is None or any(fnmatch.fnmatchcase(tool, p) for p in self.tools)

    def offer(self, tools: ToolRegistry) -> ToolRegistry:
        """The tools this profile's model is offered, of ``tools``."""
        if self.tools is None and not self.read_only and self.memory:
            return tools
        return ToolRegistry([t for t in tools if self.allows(t.name, t.side_effect)])

    def refusal(self, tool: str) -> str:
        """What the model is told of a call this profile does not allow."""
        if not self.memory and tool in MEMORY_TOOLS:
            return f"this chat's agent ({self.name}) keeps no memories; {tool} did not run"
        if self.tools is not None and not any(fnmatch.fnmatchcase(tool, p) for p in self.tools):
            return (
                f"{tool} is not one of the tools of this chat's agent ({self.name}); it did "
                "not run. Use only the tools you were given."
            )
        return f"{tool} writes, and this chat's agent ({self.name}) is read-only; it did not run"

    def unmatched(self, names: Iterable[str]) -> list[str]:
        """The entries of ``tools`` that match none of ``names`` (a typo, a tool gone)."""
        known = list(names)
        return [p for p in self.tools or () if not fnmatch.filter(known, p)]


@dataclass(frozen=True, slots=True)
class Profiles:
    """The profiles and which chats use them."""

    profiles: Mapping[str, Profile] = field(default_factory=dict)
    groups: Mapping[str, str] = field(default_factory=dict)  # chat id -> profile name
    dm: str | None = None
    # An [apps.NAME]'s profile: its chats that no [groups] route names, its DMs too (the
    # [dm] route is the default app's).
    default: str | None = None

    def for_chat(self, chat_id: str, chat_type: str) -> Profile | None:
        """The profile of a chat; None: the default agent."""
        if chat_type == "p2p":
            name = self.default or self.dm
        else:
            name = self.groups.get(chat_id) or self.default
        return self.profiles.get(name) if name else None

    def routes(self) -> list[tuple[str, str]]:
        """(where, profile) for every route, for /admin and the console."""
        if self.default:
            found = [("this app's other chats", self.default)]
        else:
            found = [("direct messages", self.dm)] if self.dm else []
        return [*found, *((f"group {chat}", name) for chat, name in sorted(self.groups.items()))]


def load_profiles(data: Mapping[str, Any], *, where: str) -> Profiles:
    """``[profiles.*]``, ``[groups."oc_…"] profile`` and ``[dm] profile`` of the parsed
    file ``data``; ``where`` names it in errors."""
    section = data.get("profiles", {})
    if not isinstance(section, Mapping):
        raise ProfileError(f"{where}: [profiles] must hold tables, [profiles.NAME]")
    profiles = {name: _profile(name, table, where) for name, table in section.items()}
    groups_table = data.get("groups") or {}
    if not isinstance(groups_table, Mapping):
        raise ProfileError(f"{where}: [groups] must be a table")
    groups: dict[str, str] = {}
    for chat_id, rule in groups_table.items():
        if isinstance(rule, Mapping) and "profile" in rule:
            groups[chat_id] = _route(rule["profile"], f"groups.{chat_id}.profile", profiles, where)
    dm_table = data.get("dm") or {}
    if not isinstance(dm_table, Mapping):
        raise ProfileError(f"{where}: [dm] must be a table")
    unknown = set(dm_table) - {"profile"}
    if unknown:
        raise ProfileError(f"{where}: [dm] takes only profile, not {', '.join(sorted(unknown))}")
    dm = (
        _route(dm_table["profile"], "dm.profile", profiles, where)
        if "profile" in dm_table
        else None
    )
    return Profiles(profiles, groups, dm)


def _route(value: Any, key: str, profiles: Mapping[str, Profile], where: str) -> str:
    if not isinstance(value, str) or value not in profiles:
        known = ", ".join(sorted(profiles)) or "none is declared"
        raise ProfileError(f"{where}: {key} = {value!r} names no [profiles.*] table ({known})")
    return value


def _profile(name: str, table: Any, where: str) -> Profile:
    at = f"{where}: [profiles.{name}]"
    if not _NAME.match(name):
        raise ProfileError(f"{at}: a profile's name is letters, digits, - and _")
    if not isinstance(table, Mapping):
        raise ProfileError(f"{at} must be a table")
    unknown = set(table) - _PROFILE_KEYS
    if unknown:
        raise ProfileError(
            f"{at}: unknown key {', '.join(sorted(unknown))} "
            f"(known: {', '.join(sorted(_PROFILE_KEYS))})"
        )
    instructions = table.get("instructions", "")
    if not isinstance(instructions, str) or len(instructions) > MAX_INSTRUCTIONS:
        raise ProfileError(f"{at}: instructions must be text of at most {MAX_INSTRUCTIONS} chars")
    tools = table.get("tools")
    if tools is not None and not _strings(tools):
        raise ProfileError(f"{at}: tools must be a list of tool names or globs")
    model = table.get("model", "")
    if not isinstance(model, str):
        raise ProfileError(f"{at}: model must be a [models.*] hint or a model name")
    approvers = table.get("approvers", [])
    if not _strings(approvers) or not all(a.startswith("ou_") for a in approvers):
        raise ProfileError(f"{at}: approvers must be a list of open_ids (ou_…)")
    mode = table.get("mode")
    if mode is not None and mode not in _RUN_MODES:
        raise ProfileError(f"{at}: mode must be one of {', '.join(_RUN_MODES)}")
    read_only = table.get("read_only", False)
    if not isinstance(read_only, bool):
        raise ProfileError(f"{at}: read_only must be true or false")
    memory = table.get("memory", True)
    if not isinstance(memory, bool):
        raise ProfileError(f"{at}: memory must be true or false")
    budgets = {key: table[key] for key in BUDGET_KEYS if key in table}
    for key, value in budgets.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ProfileError(f"{at}: {key} must be a whole number, 0 or more (0: no limit)")
    return Profile(
        name=name,
        instructions=instructions.strip(),
        tools=tuple(tools) if tools is not None else None,
        model=model.strip(),
        approvers=tuple(approvers),
        mode=mode,
        read_only=read_only,
        memory=memory,
        budgets=budgets,
    )


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)

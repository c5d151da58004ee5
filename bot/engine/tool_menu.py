"""Tool selection inside the answer's own call, for a run that streams.

With many tools, a separate selection call costs a whole round trip before the answer's
call can start: a plain question waits for two. When the loop streams (native mode,
synthesis ``auto``), its first call carries the menu instead: the system prompt lists
the tools (a catalogue line each, no schemas), and the one tool offered is
``select_tools``. The model either answers at once, and that streamed reply is the
answer (one call: the first word as soon as a bare call gives it), or asks for the tools
it needs, which the run then gets, as after a separate selection:

- known names: those tools (at most ``max_tools``), and only those may run;
- an empty list: no tool, so the next call carries no schemas;
- only unknown names, a call to any other tool (one the model knew from the menu but was
  not offered), or arguments that do not parse: the full set, the reference design's
  answer to a selection it cannot use.

The menu's reply is not kept in the context: it was a choice, not a step. The menu costs
its catalogue once, in the first call (~15 tokens a tool); the separate selection stays
for JSON mode and ``synthesis="always"``, where the first call does not stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .messages import Message, ToolCall
from .prompts import TOOL_MENU_PROMPT, TOOL_MENU_TOOL, TOOL_SELECTION_SCHEMA
from .tools import ToolRegistry

MENU_TOOL_NAME = "select_tools"


@dataclass(frozen=True, slots=True)
class ToolMenu:
    """The full set of tools a run may choose from, and how many it may take."""

    tools: ToolRegistry
    max_tools: int

    def schema(self) -> list[dict[str, Any]]:
        """The ``tools`` parameter of the menu's call: ``select_tools`` alone."""
        description = TOOL_MENU_TOOL.format(max_tools=self.max_tools)
        function = {
            "name": MENU_TOOL_NAME,
            "description": description,
            "parameters": dict(TOOL_SELECTION_SCHEMA),
        }
        return [{"type": "function", "function": function}]

    def messages(self, context: Sequence[Message]) -> list[Message]:
        """``context`` with the menu at the end of its system prompt."""
        note = TOOL_MENU_PROMPT.format(catalogue=self.tools.catalogue(), max_tools=self.max_tools)
        if context and context[0].role == "system":
            head = context[0]
            return [Message.system(f"{head.content}\n\n{note}"), *context[1:]]
        return [Message.system(note), *context]

    def chosen(self, calls: Sequence[ToolCall]) -> ToolRegistry:
        """The tools the model asked for with ``calls`` (see the module docstring)."""
        known = set(self.tools.names())
        names: list[str] = []
        for call in calls:
            listed = call.arguments.get("tools") if call.name == MENU_TOOL_NAME else None
            if call.parse_error is not None or not isinstance(listed, list):
                return self.tools  # not a choice it can be held to: every tool
            if listed and not any(isinstance(n, str) and n in known for n in listed):
                return self.tools  # only names that are not on the menu
            names += [n for n in listed if isinstance(n, str) and n in known and n not in names]
        return self.tools.filter(names[: self.max_tools])

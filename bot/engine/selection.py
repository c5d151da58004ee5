"""Tool selection: with many tools, one cheap structured call picks the few that matter.

The model sees a compact catalogue (name and one line each, no schemas) and answers
``{"tools": [NAME, ...]}``. Unknown names are ignored; an answer with no known name,
or any failure, keeps the full set, so selection can only ever save tokens.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .llm import LLM
from .messages import Message, Usage
from .prompts import TOOL_SELECTION_PROMPT, TOOL_SELECTION_SCHEMA
from .structured import structured_llm_call
from .tools import ToolRegistry

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Selection:
    tools: ToolRegistry
    usage: Usage
    selected: bool


async def select_tools(llm: LLM, tools: ToolRegistry, query: str, *, max_tools: int) -> Selection:
    """Pick at most ``max_tools`` of ``tools`` for ``query``; the full set on any failure."""
    known = set(tools.names())

    def parse(data: dict[str, object]) -> list[str] | None:
        names = data.get("tools")
        if not isinstance(names, list):
            return None
        chosen: list[str] = []
        for name in names:
            if isinstance(name, str) and name in known and name not in chosen:
                chosen.append(name)
        return chosen[:max_tools] or None

    prompt = TOOL_SELECTION_PROMPT.format(
        query=query, catalogue=tools.catalogue(), max_tools=max_tools
    )
    try:
        result = await structured_llm_call(
            llm,
            [Message.user(prompt)],
            TOOL_SELECTION_SCHEMA,
            function_name="select_tools",
            parse_fn=parse,
            default_value=None,
        )
    except Exception:  # selection is an optimisation; never fatal
        logger.warning("tool selection failed; offering all %d tools", len(tools), exc_info=True)
        return Selection(tools, Usage(), False)
    if not result.value:
        logger.info("tool selection gave no usable answer; offering all %d tools", len(tools))
        return Selection(tools, result.usage, False)
    return Selection(tools.filter(result.value), result.usage, True)

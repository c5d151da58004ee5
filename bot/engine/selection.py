"""Tool selection: with many tools, one cheap structured call picks the few that matter.

The model sees a compact catalogue (name and one line each, no schemas) and answers
``{"tools": [NAME, ...]}``. A reply that parses is the answer, whatever it says, so
selection costs one call:

- known names: the run gets those tools (at most ``max_tools``), and only those may run;
- an empty list (``{"tools": []}``): the model says no tool is needed, and the run gets
  no tools at all, so the main call carries no tool schemas. Measured over the fake
  server (``python -m bench.selection``, the 30 built-in tools): a plain question's
  main call sends ~200 prompt tokens without schemas against ~7,550 with the full set
  (the selection call itself ~775), so "none" means none. A wrong "none" costs one
  answer without tools; the person's next message is selected anew;
- only unknown names: the reply is not about this catalogue, so the run keeps the
  full set (the reference design), still one call.

Only a reply that does not parse is retried (``structured_llm_call``'s levels); a
failed request, or anything unexpected, keeps the full set, so selection can only
ever save tokens.

Selection is not skipped for short greetings or follow-ups: without it such a message
would go out with the full set (~7,550 tokens against ~975 for selection and a bare
main call), and skipping it with no tools would be a guess from the words that a
question needs no tool. It costs one round trip; a run whose first call streams can
spare it with ``tool_menu`` (the same catalogue, in that call), as the bot does.
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

# A reply in JSON mode or plain text: six names and their JSON take well under 100 tokens;
# past this a model is rambling (a small one held to a JSON grammar can write whitespace
# for minutes), and what it wrote is read as it is.
SELECTION_MAX_TOKENS = 256


@dataclass(frozen=True, slots=True)
class Selection:
    """The tools a run gets; ``selected`` is False when it kept the full set."""

    tools: ToolRegistry
    usage: Usage
    selected: bool


@dataclass(frozen=True, slots=True)
class _Chosen:
    """A parsed reply: the known names it listed, and whether it listed any name."""

    names: tuple[str, ...]
    listed_any: bool


async def select_tools(llm: LLM, tools: ToolRegistry, query: str, *, max_tools: int) -> Selection:
    """Pick at most ``max_tools`` of ``tools`` for ``query`` (see the module docstring)."""
    known = set(tools.names())

    def parse(data: dict[str, object]) -> _Chosen | None:
        names = data.get("tools")
        if not isinstance(names, list):
            return None
        chosen: list[str] = []
        for name in names:
            if isinstance(name, str) and name in known and name not in chosen:
                chosen.append(name)
        return _Chosen(tuple(chosen[:max_tools]), listed_any=bool(names))

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
            max_tokens=SELECTION_MAX_TOKENS,
        )
    except Exception:  # selection is an optimisation; never fatal
        logger.warning("tool selection failed; offering all %d tools", len(tools), exc_info=True)
        return Selection(tools, Usage(), False)
    chosen = result.value
    if not isinstance(chosen, _Chosen):
        logger.info("tool selection gave no usable answer; offering all %d tools", len(tools))
        return Selection(tools, result.usage, False)
    if chosen.names:
        return Selection(tools.filter(list(chosen.names)), result.usage, True)
    if chosen.listed_any:
        logger.info("tool selection named no known tool; offering all %d tools", len(tools))
        return Selection(tools, result.usage, False)
    return Selection(tools.filter([]), result.usage, True)

"""DAGPlanner: one structured call that turns a goal into a validated ``Plan``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from ..llm import LLM
from ..messages import ImagePart, Message, Usage
from ..structured import structured_llm_call
from ..tools import ToolRegistry
from .plan import Plan, PlanError
from .prompts import PLAN_SCHEMA, PLANNER_HISTORY, PLANNER_LEARNED, PLANNER_PROMPT
from .validation import DEFAULT_MAX_STEPS, validate_plan

logger = logging.getLogger(__name__)

HISTORY_MESSAGES = 6
HISTORY_CHARS = 300


@dataclass(frozen=True, slots=True)
class PlannedSteps:
    plan: Plan
    usage: Usage


class DAGPlanner:
    """Writes plans for goals, knowing the tools the steps will have.

    ``today`` is read at every call (a long-lived planner must not freeze the date).
    """

    def __init__(
        self,
        llm: LLM,
        tools: ToolRegistry,
        *,
        max_steps: int = DEFAULT_MAX_STEPS,
        today: Callable[[], date] = date.today,
    ) -> None:
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self.llm = llm
        self.tools = tools
        self.max_steps = max_steps
        self._today = today

    async def plan(
        self,
        goal: str,
        *,
        history: Sequence[Message] = (),
        learned: str | None = None,
        images: Sequence[ImagePart] = (),
    ) -> PlannedSteps:
        """A plan for ``goal``; ``learned`` is what earlier rounds found (for a re-plan).

        Raises ``PlanError`` (with the usage spent) when the model gives no valid plan.
        """
        prompt = self.prompt(goal, history=history, learned=learned)
        try:
            result = await structured_llm_call(
                self.llm,
                [Message.user(prompt, images=tuple(images))],
                PLAN_SCHEMA,
                function_name="plan",
                parse_fn=_has_steps,
                default_value=None,
            )
        except Exception as exc:  # a broken provider: no plan, the caller answers without
            raise PlanError(f"planning failed: {type(exc).__name__}: {exc}") from exc
        if result.value is None:
            raise PlanError(
                f"no plan in the model's reply: {result.raw[:200]!r}", usage=result.usage
            )
        try:
            plan = validate_plan(
                result.value, known_tools=set(self.tools.names()), max_steps=self.max_steps
            )
        except PlanError as exc:
            raise PlanError(str(exc), usage=result.usage) from exc
        return PlannedSteps(plan, result.usage)

    def prompt(
        self, goal: str, *, history: Sequence[Message] = (), learned: str | None = None
    ) -> str:
        context = ""
        lines = [
            f"{m.role}: {_cut(m.content, HISTORY_CHARS)}"
            for m in history
            if m.kind != "attachment" and m.role in ("user", "assistant") and m.content
        ][-HISTORY_MESSAGES:]
        if lines:
            context += PLANNER_HISTORY.format(lines="\n".join(lines))
        if learned:
            context += PLANNER_LEARNED.format(learned=learned)
        return PLANNER_PROMPT.format(
            today=self._today().isoformat(),
            catalogue=self.tools.catalogue() or "(none)",
            max_steps=self.max_steps,
            context=context,
            goal=goal,
        )


def _has_steps(data: dict[str, Any]) -> dict[str, Any] | None:
    # Only the shape: a reply without steps is worth the structured call's next level,
    # a plan with a cycle is not (validation rejects it after).
    steps = data.get("steps")
    return data if isinstance(steps, list) and steps else None


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"

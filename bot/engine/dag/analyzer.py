"""PlanAnalyzer: one structured call judging whether a round's results reach the goal.

A verdict below the confidence threshold (or one saying the goal was not reached) asks
for a re-plan. No verdict at all (the model failed to give one) asks for nothing: the
results stand as they are, rather than paying for rounds on a judge that cannot judge.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..llm import LLM
from ..messages import Message, Usage
from ..structured import structured_llm_call
from .prompts import ANALYZER_PROMPT, VERDICT_SCHEMA
from .report import StepReport, Verdict

logger = logging.getLogger(__name__)

DEFAULT_THRESHOLD = 0.6
# The judge needs the gist of each result, not all of it.
DEFAULT_RESULT_CHARS = 600
REASONING_CHARS = 1_000


@dataclass(frozen=True, slots=True)
class Judged:
    verdict: Verdict | None
    usage: Usage


class PlanAnalyzer:
    def __init__(
        self,
        llm: LLM,
        *,
        threshold: float = DEFAULT_THRESHOLD,
        result_chars: int = DEFAULT_RESULT_CHARS,
    ) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError("threshold must be between 0 and 1")
        self.llm = llm
        self.threshold = threshold
        self.result_chars = result_chars

    def needs_replan(self, verdict: Verdict | None) -> bool:
        if verdict is None:
            return False
        return not verdict.achieved or verdict.confidence < self.threshold

    async def judge(self, goal: str, steps: Sequence[StepReport]) -> Judged:
        prompt = ANALYZER_PROMPT.format(goal=goal, results=results_text(steps, self.result_chars))
        try:
            result = await structured_llm_call(
                self.llm,
                [Message.user(prompt)],
                VERDICT_SCHEMA,
                function_name="judge_plan",
                parse_fn=_verdict,
                default_value=None,
            )
        except Exception:  # the judge is advice: without it, the results stand
            logger.warning("plan analysis failed", exc_info=True)
            return Judged(None, Usage())
        if result.value is None:
            logger.warning("plan analysis gave no verdict: %.200r", result.raw)
        return Judged(result.value, result.usage)


def results_text(steps: Sequence[StepReport], limit: int) -> str:
    """One entry per step: its id, how it ended, its task and its result (cut)."""
    lines = []
    for report in steps:
        head = f"[{report.step.id} {report.state}"
        head += f": {report.reason}]" if report.reason else "]"
        body = " ".join(report.result.split())
        if len(body) > limit:
            body = body[:limit] + " … (cut)"
        lines.append(f"{head} {report.step.task}" + (f"\n{body}" if body else ""))
    return "\n".join(lines) or "(no step ran)"


def _verdict(data: dict[str, Any]) -> Verdict | None:
    achieved, confidence = data.get("achieved"), data.get("confidence")
    if not isinstance(achieved, bool) or isinstance(confidence, bool):
        return None
    if not isinstance(confidence, int | float) or not math.isfinite(confidence):
        return None
    reasoning = data.get("reasoning")
    text = reasoning.strip()[:REASONING_CHARS] if isinstance(reasoning, str) else ""
    return Verdict(achieved, min(1.0, max(0.0, float(confidence))), text)

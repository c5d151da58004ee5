"""What plan mode did, as the bot reads it from ``AgentResult.plan``.

One ``RoundReport`` per plan that ran: the first, and each re-plan with what caused it
(a low-confidence verdict or a follow-up message). Each step says how it ended and
what it found; ``as_dict`` is the same in JSON shape, for a console.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..events import PlanStepState
from ..messages import ZERO_USAGE, Usage
from .plan import Plan, PlanStep

ReplanTrigger = Literal["initial", "low_confidence", "follow_up"]


@dataclass(frozen=True, slots=True)
class StepReport:
    step: PlanStep
    state: PlanStepState
    result: str = ""
    reason: str | None = None
    duration: float = 0.0
    model: str | None = None
    tool_calls: int = 0
    iterations: int = 0
    usage: Usage = ZERO_USAGE

    @property
    def completed(self) -> bool:
        return self.state == "completed"

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.step.as_dict(),
            "state": self.state,
            "result": self.result,
            "reason": self.reason,
            "duration": round(self.duration, 3),
            "model": self.model,
            "tool_calls": self.tool_calls,
        }


@dataclass(frozen=True, slots=True)
class Verdict:
    """The analyser's judgment of a round: did the results reach the goal?"""

    achieved: bool
    confidence: float
    reasoning: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "achieved": self.achieved,
            "confidence": self.confidence,
            "reasoning": self.reasoning,
        }


@dataclass(frozen=True, slots=True)
class RoundReport:
    round: int
    trigger: ReplanTrigger
    goal: str
    plan: Plan
    steps: tuple[StepReport, ...]
    verdict: Verdict | None = None

    def completed(self) -> tuple[StepReport, ...]:
        return tuple(step for step in self.steps if step.completed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "trigger": self.trigger,
            "steps": [step.as_dict() for step in self.steps],
            "verdict": self.verdict.as_dict() if self.verdict is not None else None,
        }


@dataclass(frozen=True, slots=True)
class PlanReport:
    rounds: tuple[RoundReport, ...]

    @property
    def steps(self) -> tuple[StepReport, ...]:
        """Every step of every round, in the order the rounds ran."""
        return tuple(step for round_ in self.rounds for step in round_.steps)

    @property
    def verdict(self) -> Verdict | None:
        return self.rounds[-1].verdict if self.rounds else None

    def as_dict(self) -> dict[str, Any]:
        return {"rounds": [round_.as_dict() for round_ in self.rounds]}

"""One plan-mode run: rounds of plan, execute, analyse, and re-plan while it helps.

A round re-plans when the analyser's verdict is below its threshold, or when the user
sent a follow-up during the round (added to the goal; the analysis is skipped, since it
would judge the old goal). Re-plans are bounded by ``max_replans``; once they are used
up, a follow-up is left in the queue for the next turn, as ReAct leaves what it cannot
take. The first plan failing raises ``PlanError`` (the caller answers without a plan);
a re-plan failing keeps what the earlier rounds found.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..events import EventSink, PhaseEvent
from ..interrupts import InterruptQueue
from ..messages import ImagePart, Message, Usage
from ..result import Step
from .analyzer import PlanAnalyzer, results_text
from .board import RoundBoard
from .executor import DAGExecutor
from .plan import Plan, PlanError
from .planner import DAGPlanner
from .prompts import FOLLOW_UP
from .report import ReplanTrigger, RoundReport, StepReport, Verdict
from .step_run import StepRunContext

logger = logging.getLogger(__name__)

DEFAULT_MAX_REPLANS = 2
LEARNED_RESULT_CHARS = 500


@dataclass(frozen=True, slots=True)
class PlanParts:
    """The pieces a run uses, built once per agent."""

    planner: DAGPlanner
    executor: DAGExecutor
    analyzer: PlanAnalyzer
    max_replans: int = DEFAULT_MAX_REPLANS


@dataclass(slots=True)
class PlanRun:
    parts: PlanParts
    context: StepRunContext
    sink: EventSink
    interrupts: InterruptQueue | None
    history: Sequence[Message] = ()
    images: Sequence[ImagePart] = ()
    goal: str = ""
    usage: Usage = field(default_factory=Usage)
    rounds: list[RoundReport] = field(default_factory=list)
    tool_steps: list[Step] = field(default_factory=list)
    follow_ups: list[list[str]] = field(default_factory=list)
    current: RoundBoard | None = None

    async def run(self, query: str) -> None:
        self.goal = query
        trigger: ReplanTrigger = "initial"
        for round_ in range(self.parts.max_replans + 1):
            plan = await self._plan(round_, trigger)
            if plan is None:
                return
            board = RoundBoard(plan, round_, self.goal, trigger, self.sink)
            self.current = board
            board.announce()
            self.sink.emit(PhaseEvent("executing", round_))
            can_replan = round_ < self.parts.max_replans
            await self.parts.executor.execute(
                board, self.context, self.interrupts if can_replan else None
            )
            next_trigger, verdict = await self._review(board, can_replan)
            self._close_round(board, verdict)
            if next_trigger is None:
                return
            trigger = next_trigger

    def settle_stopped(self) -> None:
        """After a stop: keep the round that was running (the executor settled its steps)."""
        if self.current is not None:
            self._close_round(self.current, None)

    # -- phases ------------------------------------------------------------------------

    async def _plan(self, round_: int, trigger: ReplanTrigger) -> Plan | None:
        if round_ == 0:
            self.sink.emit(PhaseEvent("planning", round_))
        else:
            self.sink.emit(PhaseEvent("replanning", round_, trigger))
        learned = self._learned() if round_ else None
        try:
            planned = await self.parts.planner.plan(
                self.goal, history=self.history, learned=learned, images=self.images
            )
        except PlanError as exc:
            self.usage += exc.usage
            if round_ == 0:
                raise
            logger.warning("re-plan %d failed (%s); keeping what was found", round_, exc)
            return None
        self.usage += planned.usage
        return planned.plan

    async def _review(
        self, board: RoundBoard, can_replan: bool
    ) -> tuple[ReplanTrigger | None, Verdict | None]:
        if can_replan and self._take_follow_ups():
            return "follow_up", None
        self.sink.emit(PhaseEvent("analysing", board.round))
        judged = await self.parts.analyzer.judge(self.goal, board.report().steps)
        self.usage += judged.usage
        if can_replan and self._take_follow_ups():  # sent while the judge was thinking
            return "follow_up", judged.verdict
        if can_replan and self.parts.analyzer.needs_replan(judged.verdict):
            return "low_confidence", judged.verdict
        return None, judged.verdict

    def _take_follow_ups(self) -> bool:
        if self.interrupts is None or not self.interrupts.pending():
            return False
        texts = self.interrupts.drain()
        if not texts:
            return False
        self.follow_ups.append(texts)
        self.goal += FOLLOW_UP.format(texts="\n".join(f"- {text}" for text in texts))
        return True

    def _close_round(self, board: RoundBoard, verdict: Verdict | None) -> None:
        self.rounds.append(board.report(verdict))
        self.tool_steps.extend(board.tool_steps)
        self.current = None

    def _learned(self) -> str:
        """What the earlier rounds found, for the re-planner: results, failures, verdict."""
        ran: list[StepReport] = [
            step for round_ in self.rounds for step in round_.steps if step.state != "skipped"
        ]
        text = results_text(ran, LEARNED_RESULT_CHARS)
        verdict = self.rounds[-1].verdict if self.rounds else None
        if verdict is not None and verdict.reasoning:
            text += f"\nJudgment of the last round: {verdict.reasoning}"
        return text

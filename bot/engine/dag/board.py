"""The state of one round's steps while it runs, and the events that show it.

The executor moves steps from pending to running to an end state here; the run reads
the board after the round (or after a stop, mid-round) to report and to re-plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..events import EventSink, PlanStepEvent, PlanStepState
from ..result import Step
from .plan import Plan, PlanStep
from .report import ReplanTrigger, RoundReport, StepReport, Verdict


@dataclass(slots=True)
class RoundBoard:
    plan: Plan
    round: int
    goal: str
    trigger: ReplanTrigger
    sink: EventSink
    ended: dict[str, StepReport] = field(default_factory=dict)
    running: set[str] = field(default_factory=set)
    calls: dict[str, tuple[Step, ...]] = field(default_factory=dict)
    # Set when a follow-up message arrived: no new step starts, the run re-plans.
    interrupted: bool = False

    def announce(self) -> None:
        for step in self.plan:
            self._emit(step, "pending")

    def pending(self) -> list[PlanStep]:
        return [s for s in self.plan if s.id not in self.ended and s.id not in self.running]

    def ready(self) -> list[PlanStep]:
        """Pending steps whose dependencies all completed, in plan order."""
        return [s for s in self.pending() if all(self._completed(dep) for dep in s.dependencies)]

    def start(self, step: PlanStep) -> None:
        self.running.add(step.id)
        self._emit(step, "running")

    def end(self, report: StepReport, tool_steps: tuple[Step, ...] = ()) -> None:
        self.running.discard(report.step.id)
        self.ended[report.step.id] = report
        self.calls[report.step.id] = tool_steps
        ran = report.state != "skipped"
        self._emit(report.step, report.state, report.reason, report.duration if ran else None)

    def skip(self, step: PlanStep, reason: str) -> None:
        self.end(StepReport(step, "skipped", reason=reason))

    def skip_blocked(self) -> None:
        """Skip every pending step that depends on one that did not complete."""
        changed = True
        while changed:
            changed = False
            for step in self.pending():
                failed = [
                    d for d in step.dependencies if d in self.ended and not self._completed(d)
                ]
                if failed:
                    self.skip(step, f"depends on {', '.join(failed)}, which did not complete")
                    changed = True

    @property
    def tool_steps(self) -> list[Step]:
        """Every tool call of the round, step by step in plan order (parallel steps end
        in any order; the trace should not depend on it)."""
        return [call for s in self.plan for call in self.calls.get(s.id, ())]

    def completed(self) -> list[StepReport]:
        """Completed steps in plan order."""
        return [self.ended[s.id] for s in self.plan if s.id in self.ended and self._completed(s.id)]

    def report(self, verdict: Verdict | None = None) -> RoundReport:
        steps = tuple(
            self.ended.get(s.id) or StepReport(s, "skipped", reason="not run") for s in self.plan
        )
        return RoundReport(self.round, self.trigger, self.goal, self.plan, steps, verdict)

    def _completed(self, step_id: str) -> bool:
        report = self.ended.get(step_id)
        return report is not None and report.completed

    def _emit(
        self,
        step: PlanStep,
        state: PlanStepState,
        reason: str | None = None,
        duration: float | None = None,
    ) -> None:
        self.sink.emit(
            PlanStepEvent(
                step.id, step.task, state, self.round, step.dependencies, reason, duration
            )
        )

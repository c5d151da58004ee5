"""Plan mode on the live answer card: the plan as a checklist, step by step.

The card's ``steps`` element shows, in plan mode, one line per plan step with its state
(pending, running, waiting for approval, done, failed, skipped, stopped), what a running
step is calling, how long a finished one took and why one failed or was skipped. Above
it, a head line says what the plan is doing (planning, running, checking the results,
re-planning). The checklist is rebuilt from this view on each of the card's regular
updates: plan events change the view, never the card directly, so a plan costs no
Feishu calls beyond the card's cadence.

Tasks are written by the model: they are shown flattened, visible and escaped, so a
task cannot format the card, open a link or mention anyone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from .approval_arguments import visible
from .approval_card import escape_markdown

PlanLineState = Literal["pending", "running", "completed", "failed", "skipped", "cancelled"]

TASK_CHARS = 90
REASON_CHARS = 90
TOOL_CHARS = 40
LINES_SHOWN = 12

_ICONS: dict[str, str] = {
    "pending": "⬜",
    "running": "⏳",
    "waiting": "⏸️",
    "completed": "✅",
    "failed": "❌",
    "skipped": "⏭️",
    "cancelled": "⏹️",
}
_LABELS: dict[str, str] = {
    "pending": "pending",
    "running": "running",
    "waiting": "waiting for approval",
    "completed": "done",
    "failed": "failed",
    "skipped": "skipped",
    "cancelled": "stopped",
}
_REPLAN_REASONS = {
    "follow_up": "a follow-up message came in",
    "low_confidence": "the results did not answer it yet",
}


class ToolLine(Protocol):
    """A tool call as the card shows it (``live_card.StepLine``)."""

    @property
    def tool(self) -> str: ...
    @property
    def arguments(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def plan_step(self) -> str | None: ...


@dataclass(slots=True)
class PlanLine:
    step_id: str
    task: str
    state: PlanLineState = "pending"
    reason: str = ""
    duration: float | None = None


@dataclass(slots=True)
class PlanView:
    """The plan as the card shows it; changed by the run's plan events."""

    phase: str = "planning"  # planning, executing, analysing, replanning, done
    round: int = 0
    detail: str = ""  # the phase's detail (for replanning: what caused it)
    steps: list[PlanLine] = field(default_factory=list)
    # Each earlier round, summed up once a re-plan replaced it ("3 of 5 done").
    earlier: list[str] = field(default_factory=list)
    # No usable plan came: the question was answered as without plan mode.
    without_plan: bool = False

    def line(self, step_id: str) -> PlanLine | None:
        return next((line for line in self.steps if line.step_id == step_id), None)

    def next_round(self, round_: int) -> None:
        """A re-plan's steps arrive: sum up the round they replace."""
        if self.steps:
            done = sum(1 for line in self.steps if line.state == "completed")
            self.earlier.append(f"plan {self.round + 1}: {done} of {len(self.steps)} done")
        self.round, self.steps = round_, []

    def settle_stopped(self) -> None:
        """The run was stopped: nothing runs or waits any more."""
        for line in self.steps:
            if line.state == "running":
                line.state = "cancelled"
            elif line.state == "pending":
                line.state = "skipped"


def plan_markdown(plan: PlanView, tools: Sequence[ToolLine]) -> str:
    """The checklist for ``plan``; ``tools`` are the run's tool calls (with their step)."""
    lines = [_head(plan)]
    if plan.earlier:
        lines.append(f"_Re-planned ({'; '.join(plan.earlier)})._")
    shown = plan.steps[:LINES_SHOWN]
    for number, step in enumerate(shown, 1):
        calls = [t for t in tools if t.plan_step == step.step_id]
        lines.append(_step_line(number, step, calls))
    if len(plan.steps) > len(shown):
        lines.append(f"_… and {len(plan.steps) - len(shown)} more steps_")
    return "\n".join(lines)


def _head(plan: PlanView) -> str:
    title = "🗂️ **Plan**" if plan.round == 0 else f"🗂️ **Plan {plan.round + 1}**"
    if not plan.steps:
        if plan.phase == "replanning":
            return f"{title} · _re-planning: {_replan_reason(plan.detail)}…_"
        return "🗂️ _Planning…_"
    done = sum(1 for line in plan.steps if line.state == "completed")
    progress = f"{done}/{len(plan.steps)} done"
    if plan.phase == "analysing":
        return f"{title} · {progress} · _checking the results…_"
    if plan.phase == "replanning":
        return f"{title} · {progress} · _re-planning: {_replan_reason(plan.detail)}…_"
    return f"{title} · {progress}"


def _replan_reason(detail: str) -> str:
    return _REPLAN_REASONS.get(detail, "to do better")


def _step_line(number: int, step: PlanLine, calls: Sequence[ToolLine]) -> str:
    state: str = step.state
    last = calls[-1] if calls else None
    if state == "running" and any(c.state == "waiting" for c in calls):
        state = "waiting"
        last = next(c for c in reversed(calls) if c.state == "waiting")
    line = f"{_ICONS[state]} {number}. {_text(step.task, TASK_CHARS)} · {_LABELS[state]}"
    if state in ("running", "waiting") and last is not None:
        line += f" — `{_code(last.tool)}` {_text(last.arguments, TOOL_CHARS)}"
    elif state == "completed" and step.duration is not None:
        line += f" · {step.duration:.1f} s"
    if state in ("failed", "skipped", "cancelled") and step.reason:
        line += f" — {_text(step.reason, REASON_CHARS)}"
    blocked = [c.tool for c in calls if c.state == "blocked"]
    if blocked:
        line += f" · ⛔ `{_code(blocked[-1])}` blocked"
    return line


def _text(text: str, limit: int) -> str:
    flat = visible(" ".join(text.split()))
    if len(flat) > limit:
        flat = flat[: limit - 1].rstrip() + "…"
    return escape_markdown(flat)


def _code(name: str) -> str:
    # Inside a code span only a backtick acts; tool names are ours, but cut all the same.
    return visible(name).replace("`", "ʼ")[:TOOL_CHARS]

"""A plan-mode run as an ``AgentResult``, filled as honestly as a ReAct run's.

``messages`` is what synthesis reads: the history, the question (with its images), the
follow-ups, and each plan step as a ``plan_step`` call whose result is the step's
finding, so the answer is written from the steps' results, as ReAct's is from its
tool results. ``steps`` are every tool call of every step (tagged with the plan step),
``usage`` everything but synthesis (planner, steps, analyser, mode choice), and
``plan`` the rounds as they ran.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..loop import fallback_summary
from ..messages import ImagePart, Message, ToolCall, Usage
from ..prompts import interrupt_message
from ..result import AgentResult, LoopMode, RunStatus, Step
from .report import PlanReport, RoundReport, StepReport
from .rounds import PlanRun

PLAN_STEP_TOOL = "plan_step"


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What the agent knows about the run besides the plan: its ending and identity."""

    query: str
    images: tuple[ImagePart, ...]
    history: Sequence[Message]
    status: RunStatus
    error: str | None
    elapsed: float
    run_id: str
    model: str | None
    mode: LoopMode
    tools: tuple[str, ...]


def plan_result(run: PlanRun, facts: RunFacts) -> AgentResult:
    report = PlanReport(tuple(run.rounds))
    steps = [replace(step, index=index) for index, step in enumerate(run.tool_steps)]
    status, error = _ending(report, facts)
    reports = report.steps
    return AgentResult(
        answer=_answer(report, steps, status, error),
        messages=_transcript(run, facts),
        iterations=sum(step.iterations for step in reports),
        steps=steps,
        usage=run.usage + sum((step.usage for step in reports), Usage()),
        elapsed=facts.elapsed,
        status=status,
        error=error,
        mode=facts.mode,
        tools=facts.tools,
        run_id=facts.run_id,
        model=facts.model,
        plan=report,
    )


def _ending(report: PlanReport, facts: RunFacts) -> tuple[RunStatus, str | None]:
    if facts.status != "completed" or any(step.completed for step in report.steps):
        return facts.status, facts.error
    reasons = [f"{s.step.id}: {s.reason}" for s in report.steps if s.state == "failed" and s.reason]
    detail = "; ".join(reasons[:3]) or "no step ran"
    return "error", f"no step of the plan completed ({detail})"


def _answer(report: PlanReport, steps: list[Step], status: RunStatus, error: str | None) -> str:
    """The run's own answer, shown if synthesis fails: what the last round produced."""
    if status != "completed":
        return fallback_summary(steps, status, error)
    last = report.rounds[-1]
    sinks = {step.id for step in last.plan.sinks()}
    found = [s.result for s in last.steps if s.completed and s.step.id in sinks and s.result]
    if not found:
        found = [s.result for s in report.steps if s.completed and s.result]
    return "\n\n".join(found)


def _transcript(run: PlanRun, facts: RunFacts) -> list[Message]:
    messages = list(facts.history)
    messages.append(Message.user(facts.query, pinned=True, kind="query", images=facts.images))
    for texts in run.follow_ups:
        messages.append(Message.user(interrupt_message(texts), pinned=True, kind="interrupt"))
    for round_ in run.rounds:
        messages.extend(_round_messages(round_, last=round_ is run.rounds[-1]))
    return messages


def _round_messages(round_: RoundReport, *, last: bool) -> list[Message]:
    messages = []
    for report in round_.steps:
        if report.state == "skipped" and not last:
            continue  # a later plan took over: what it skipped is not worth telling
        arguments = {"id": report.step.id, "task": report.step.task}
        call = ToolCall(
            f"plan_{round_.round}_{report.step.id}",
            PLAN_STEP_TOOL,
            arguments,
            json.dumps(arguments, ensure_ascii=False),
        )
        messages.append(Message.assistant("", (call,)))
        messages.append(Message.tool(call, _step_text(report)))
    return messages


def _step_text(report: StepReport) -> str:
    if report.completed:
        return report.result or "(no result)"
    head = f"[{report.state}: {report.reason or 'no reason given'}]"
    return f"{head} {report.result}".strip()

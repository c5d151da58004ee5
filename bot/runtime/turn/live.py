"""The bridge from a run's events to the live answer card.

The engine emits ``step`` / ``answer`` / ``done`` events; ``LiveAnswer`` turns them
into the card's view (a line per tool call, the answer text) and nudges the writer.
In plan mode, ``phase`` and ``plan_step`` events build the plan's checklist, and each
tool call is filed under its plan step. Every event only changes the view: the writer
sends the latest view at its own cadence, however many events came in between.
Hooks that make a tool wait (approvals) call ``waiting(call_id)`` so the card says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from bot.engine import (
    AnswerEvent,
    AnswerWithdrawnEvent,
    PhaseEvent,
    PlanStepEvent,
    RunEvent,
    Step,
    StepEvent,
)
from bot.feishu.card_writer import LiveReply
from bot.feishu.live_card import StepLine, StepState, preview
from bot.feishu.live_plan import PlanLine, PlanView

_STATES: dict[str, StepState] = {
    "ok": "ok",
    "error": "error",
    "blocked": "blocked",
    "cancelled": "cancelled",
}


class LiveAnswer:
    def __init__(self, reply: LiveReply, *, on_answer: Callable[[str], None] | None = None) -> None:
        self.reply = reply
        # Told of each piece of answer text the card shows (the run event hub's ``answer``);
        # set once the run's event stream is open, which may be after the card went up.
        self.on_answer = on_answer
        # The run was saved while it waited for a person (``parking.py``): the process that
        # resumes it goes on with this card, so a stop here leaves it as it is.
        self.parked = False

    @property
    def started(self) -> bool:
        """Whether anything was shown yet (the card exists or is being created)."""
        view = self.reply.view
        return self.reply.opened or bool(view.has_progress or view.answer)

    def show_at_once(self) -> None:
        """Post the card now with its status line, before the question is read or the
        model says anything: the person sees at once that the bot is on it."""
        self.reply.open_now()

    async def end_unanswered(self, notice: str) -> None:
        """End a card that will get no answer (stopped, or the turn failed): it says
        ``notice`` and its streaming is turned off. Nothing when nothing was shown."""
        if not self.started:
            return
        self.stopped(notice)
        await self.reply.finish()

    def restore(self, steps: Sequence[Step]) -> None:
        """A resumed run's card: the steps it had finished before it was saved (the calls
        it goes on with show again as they start)."""
        view = self.reply.view
        for step in steps:
            arguments = json.dumps(dict(step.arguments), ensure_ascii=False, default=str)
            line = StepLine(step.call_id, step.tool, preview(arguments))
            line.state = _STATES.get(step.status, "error")
            line.result = preview(step.observation)
            view.steps.append(line)
        self.parked = True

    def on_event(self, event: RunEvent) -> None:
        view = self.reply.view
        if isinstance(event, StepEvent):
            # The first work to show goes up at once: the card may be saying only "Thinking…".
            first = not view.has_progress
            if event.phase == "started":
                arguments = json.dumps(dict(event.arguments), ensure_ascii=False, default=str)
                view.steps.append(
                    StepLine(
                        event.call_id, event.tool, preview(arguments), plan_step=event.plan_step
                    )
                )
            else:
                line = view.step(event.call_id)
                if line is None:
                    return
                line.state = _STATES.get(event.status or "", "error")
                line.result = preview(event.observation or "")
            self.reply.touch(urgent=first)
        elif isinstance(event, AnswerEvent):
            self.add_answer(event.delta)
        elif isinstance(event, AnswerWithdrawnEvent):
            self.withdraw_answer(event.text)
        elif isinstance(event, PhaseEvent):
            self._phase(event)
        elif isinstance(event, PlanStepEvent):
            self._plan_step(event)

    def _phase(self, event: PhaseEvent) -> None:
        view = self.reply.view
        first = view.plan is None
        if view.plan is None:
            if event.phase != "planning":
                return  # a plan's closing events after it was given up: nothing to show
            view.plan = PlanView()
        plan = view.plan
        if event.phase == "executing" and not plan.steps and event.round == 0:
            plan.without_plan = True  # no usable plan: the tool calls that follow are ReAct's
        plan.phase, plan.detail = event.phase, event.detail or ""
        self.reply.touch(urgent=first)

    def _plan_step(self, event: PlanStepEvent) -> None:
        view = self.reply.view
        plan = view.plan = view.plan or PlanView()
        if event.round > plan.round:
            plan.next_round(event.round)
        elif event.round < plan.round:
            return  # a late event of a plan already replaced
        line = plan.line(event.step_id)
        if line is None:
            line = PlanLine(event.step_id, event.task)
            plan.steps.append(line)
        line.state = event.state
        line.reason = event.reason or ""
        line.duration = event.duration
        self.reply.touch()

    def add_answer(self, delta: str) -> None:
        if not delta:
            return
        first = not self.reply.view.answer
        self.reply.view.answer += delta
        if self.on_answer is not None:
            self.on_answer(delta)
        self.reply.touch(urgent=first)

    def withdraw_answer(self, text: str) -> None:
        """Take back answer text the run sent that is not the answer after all (a note
        before tool calls, a reply dropped for the user's new message): the card shows
        the answer without it from its next update on."""
        answer = self.reply.view.answer
        if text and answer.endswith(text):
            self.reply.view.answer = answer[: len(answer) - len(text)]
            self.reply.touch()

    def stopped(self, notice: str) -> None:
        """The run was stopped: calls still going were cancelled, and the card says so."""
        for line in self.reply.view.steps:
            if line.state in ("running", "waiting"):
                line.state = "cancelled"
        if self.reply.view.plan is not None:
            self.reply.view.plan.settle_stopped()
        self.reply.view.notice = notice

    def waiting(self, call_id: str) -> None:
        """A hook is holding this call (e.g. for an approval)."""
        line = self.reply.view.step(call_id)
        if line is not None and line.state == "running":
            line.state = "waiting"
            self.reply.touch()

    def resumed(self, call_id: str) -> None:
        line = self.reply.view.step(call_id)
        if line is not None and line.state == "waiting":
            line.state = "running"
            self.reply.touch()

"""The bridge from a run's events to the live answer card.

The engine emits ``step`` / ``answer`` / ``done`` events; ``LiveAnswer`` turns them
into the card's view (a line per tool call, the answer text) and nudges the writer.
Hooks that make a tool wait (approvals) call ``waiting(call_id)`` so the card says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from bot.engine import AnswerEvent, RunEvent, StepEvent
from bot.feishu.card_writer import LiveReply
from bot.feishu.live_card import StepLine, StepState, preview

_STATES: dict[str, StepState] = {
    "ok": "ok",
    "error": "error",
    "blocked": "blocked",
    "cancelled": "cancelled",
}


class LiveAnswer:
    def __init__(self, reply: LiveReply, *, on_answer: Callable[[str], None] | None = None) -> None:
        self.reply = reply
        # Told of each piece of answer text the card shows (the run event hub's ``answer``).
        self._on_answer = on_answer

    @property
    def started(self) -> bool:
        """Whether anything was shown yet (the card exists or is being created)."""
        view = self.reply.view
        return bool(view.steps or view.answer)

    def on_event(self, event: RunEvent) -> None:
        view = self.reply.view
        if isinstance(event, StepEvent):
            if event.phase == "started":
                arguments = json.dumps(dict(event.arguments), ensure_ascii=False, default=str)
                view.steps.append(StepLine(event.call_id, event.tool, preview(arguments)))
            else:
                line = view.step(event.call_id)
                if line is None:
                    return
                line.state = _STATES.get(event.status or "", "error")
                line.result = preview(event.observation or "")
            self.reply.touch()
        elif isinstance(event, AnswerEvent):
            self.add_answer(event.delta)

    def add_answer(self, delta: str) -> None:
        if not delta:
            return
        first = not self.reply.view.answer
        self.reply.view.answer += delta
        if self._on_answer is not None:
            self._on_answer(delta)
        self.reply.touch(urgent=first)

    def stopped(self, notice: str) -> None:
        """The run was stopped: calls still going were cancelled, and the card says so."""
        for line in self.reply.view.steps:
            if line.state in ("running", "waiting"):
                line.state = "cancelled"
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

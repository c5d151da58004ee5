"""A scripted model for plan-mode tests: one ``ScriptedLLM`` answering every kind of call.

Plan mode's calls run concurrently, so a script in call order would be a race. Every
entry of the ``ScriptedLLM`` is the same router instead, which answers from what the
call is: the planner's, the analyser's and the mode classifier's prompts, a step's
question (by its task), synthesis (which writes "the answer"), or a plain ReAct question.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.engine import LLMResponse, Message, ToolCall, Usage
from bot.engine.testing import ScriptedLLM

PLANNER_MARK = "Plan how to reach the goal"
ANALYZER_MARK = "Did the work below reach the goal?"
MODE_MARK = "Does this message ask for several independent things"
STEP_MARK = "You carry out one step of a plan"
SYNTHESIS_MARK = "Write the reply to the user's question from"


@dataclass
class StepPlay:
    """What a step's agent does: these tool calls in its first turn, then this answer."""

    calls: Sequence[tuple[str, Mapping[str, Any]]] = ()
    answer: str = "done"


PlanReply = Mapping[str, Any] | str | BaseException


@dataclass
class DagScript:
    """Routes each call; ``plans`` and ``verdicts`` are used in order (the last repeats)."""

    plans: Sequence[PlanReply] = ()
    steps: Mapping[str, StepPlay] = field(default_factory=dict)
    verdicts: Sequence[Mapping[str, Any]] = (
        {"achieved": True, "confidence": 0.9, "reasoning": "ok"},
    )
    mode: str | None = None
    react: Sequence[LLMResponse | str] = ()
    seen: list[str] = field(default_factory=list)
    step_questions: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._plans = list(self.plans)
        self._verdicts = list(self.verdicts)
        self._react = list(self.react)

    def llm(self, *, model: str = "scripted", calls: int = 500, **kwargs: Any) -> ScriptedLLM:
        return ScriptedLLM([self] * calls, model=model, **kwargs)

    def __call__(self, messages: list[Message]) -> LLMResponse | str | BaseException:
        if messages and SYNTHESIS_MARK in messages[0].content:
            self.seen.append("synthesis")
            return LLMResponse(content="the answer")  # reports no usage
        text = "\n".join(m.content for m in messages if m.role == "user")
        if PLANNER_MARK in text:
            self.seen.append("plan")
            entry = self._plans.pop(0) if len(self._plans) > 1 else self._plans[0]
            return _structured("plan", entry)
        if ANALYZER_MARK in text:
            self.seen.append("analyse")
            verdict = self._verdicts.pop(0) if len(self._verdicts) > 1 else self._verdicts[0]
            return _structured("judge_plan", verdict)
        if MODE_MARK in text:
            self.seen.append("mode")
            return _structured("choose_mode", {"mode": self.mode})
        if STEP_MARK in text:
            return self._step(messages, text)
        self.seen.append("react")
        return self._react.pop(0) if self._react else "react answer"

    def _step(self, messages: list[Message], text: str) -> LLMResponse | str:
        task = text.split("Your step: ", 1)[1].split("\n", 1)[0]
        play = self.steps.get(task, StepPlay(answer=f"result of {task}"))
        self.step_questions[task] = text
        if play.calls and not any(m.role == "tool" for m in messages):
            self.seen.append(f"step:{task}")
            calls = tuple(
                ToolCall(f"{task}-{i}", name, dict(args), json.dumps(args))
                for i, (name, args) in enumerate(play.calls)
            )
            return LLMResponse(tool_calls=calls, usage=Usage(10, 5, 15))
        self.seen.append(f"answer:{task}")
        return LLMResponse(content=play.answer, usage=Usage(10, 5, 15))


def _structured(name: str, entry: PlanReply) -> LLMResponse | str | BaseException:
    if isinstance(entry, BaseException | str):
        return entry
    call = ToolCall(f"call_{name}", name, dict(entry), json.dumps(entry))
    return LLMResponse(tool_calls=(call,), usage=Usage(20, 10, 30))


def plan_of(*steps: tuple[str, str, Sequence[str]]) -> dict[str, Any]:
    """``{"steps": [...]}`` from (id, task, dependencies) triples."""
    return {
        "steps": [
            {"id": i, "task": t, "dependencies": list(d), "tool_hint": None, "model_hint": None}
            for i, t, d in steps
        ]
    }


Router = Callable[[list[Message]], Any]

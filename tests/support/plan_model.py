"""Plan mode over the wire: a fake model (a ``FakeOpenAIServer`` handler) and a slow tool.

Plan mode's calls run concurrently, so the model answers each call from what it is, not
from its position: the planner's, the judge's and the mode classifier's prompts get the
scripted plan, verdict and mode as forced function calls (the native structured level);
a step's question gets that step's tool calls, then its answer; synthesis (the streamed
call) gets the step results it read; anything else is a plain ReAct turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.engine import Tool, tool_from_function

from e2e.harness import answering
from engine.dag_support import ANALYZER_MARK, MODE_MARK, PLANNER_MARK, STEP_MARK
from fakes.openai_server import Reply
from support.model_calls import is_synthesis

STEP_RESULT = "Tool result (plan_step): "
USAGE = {"prompt_tokens": 20, "completion_tokens": 5}


Call = tuple[str, Mapping[str, Any]]  # (tool, arguments)


@dataclass
class StepScript:
    """A step's agent: these tool calls, turn after turn, then ``answer`` (by default
    the task and what its tools said)."""

    turns: Sequence[Sequence[Call]] = ()
    answer: str = ""

    @classmethod
    def calling(cls, *calls: Call) -> StepScript:
        return cls(turns=[calls])


@dataclass
class PlanModel:
    plans: Sequence[Mapping[str, Any] | str] = ()
    steps: Mapping[str, StepScript] = field(default_factory=dict)
    verdict: Mapping[str, Any] = field(
        default_factory=lambda: {"achieved": True, "confidence": 0.9, "reasoning": "complete"}
    )
    mode: str = "dag"
    # Every call by kind, in arrival order: "plan", "judge", "mode", "step:<task>",
    # "answer:<task>", "synthesis", "react"; and the model each step was asked.
    seen: list[str] = field(default_factory=list)
    step_models: dict[str, str] = field(default_factory=dict)
    planned_goals: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._plans = list(self.plans)

    async def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        text = "\n".join(str(m.get("content") or "") for m in messages if m["role"] == "user")
        if is_synthesis(body):
            self.seen.append("synthesis")
            return synthesis(body, text)
        if PLANNER_MARK in text:
            self.seen.append("plan")
            self.planned_goals.append(text.rsplit("Goal: ", 1)[-1])
            plan = self._plans.pop(0) if len(self._plans) > 1 else self._plans[0]
            if isinstance(plan, str):
                return Reply(content=plan, usage=USAGE)
            return Reply(tool_calls=[("call_plan", "plan", dict(plan))], usage=USAGE)
        if ANALYZER_MARK in text:
            self.seen.append("judge")
            return Reply(tool_calls=[("call_judge", "judge_plan", dict(self.verdict))], usage=USAGE)
        if MODE_MARK in text:
            self.seen.append("mode")
            return Reply(tool_calls=[("call_mode", "choose_mode", {"mode": self.mode})])
        if STEP_MARK in text:
            return self._step(body, text)
        self.seen.append("react")
        return answering(body)

    def _step(self, body: dict[str, Any], text: str) -> Reply:
        task = text.split("Your step: ", 1)[1].split("\n", 1)[0]
        script = self.steps.get(task, StepScript())
        self.step_models[task] = body["model"]
        observations = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant" and m.get("tool_calls"))
        if turn < len(script.turns):
            self.seen.append(f"step:{task}")
            calls = [
                (f"{task[:12]}-{turn}-{i}", name, dict(args))
                for i, (name, args) in enumerate(script.turns[turn])
            ]
            return Reply(tool_calls=calls, usage=USAGE)
        self.seen.append(f"answer:{task}")
        answer = script.answer or (f"{task}: " + "; ".join(observations) if observations else task)
        return Reply(content=answer, usage=USAGE)


def synthesis(body: dict[str, Any], text: str) -> Reply:
    """The streamed answer: the step results synthesis was given, one a line (without
    any, as ``answering`` writes it)."""
    found = [
        line.removeprefix(STEP_RESULT) for line in text.splitlines() if line.startswith(STEP_RESULT)
    ]
    if not found:
        return answering(body)
    return Reply(content="Answer:\n" + "\n".join(f"- {r}" for r in found), usage=USAGE)


def plan_of(
    *steps: tuple[str, str, Sequence[str]], hints: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``{"steps": [...]}`` from (id, task, dependencies); ``hints``: id -> model hint."""
    return {
        "steps": [
            {
                "id": step_id,
                "task": task,
                "dependencies": list(deps),
                "tool_hint": None,
                "model_hint": (hints or {}).get(step_id),
            }
            for step_id, task, deps in steps
        ]
    }


class Weather:
    """``weather(city)``, a read tool that can be held: it records who asked, how many
    calls ran at once, and waits for ``release`` while ``held``."""

    def __init__(self, *, held: bool = False) -> None:
        self.asked: list[str] = []
        self.running = 0
        self.most_at_once = 0
        self.release = asyncio.Event()
        if not held:
            self.release.set()

    def tool(self) -> Tool:
        async def weather(city: str) -> str:
            """Today's weather in a city."""
            self.asked.append(city)
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            try:
                await self.release.wait()
            finally:
                self.running -= 1
            return f"{city}: sunny, 21 °C"

        return tool_from_function(weather, side_effect="read")

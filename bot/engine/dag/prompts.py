"""Every text plan mode shows a model, and the schemas of its structured calls.

They are kept short on purpose: planning, each step and the verdict add calls that
ReAct does not make, and plan mode only pays off if those calls stay small.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

PLANNER_PROMPT = """\
Plan how to reach the goal below as steps that assistants with tools carry out; steps \
that do not depend on each other run at the same time.
Today is {today}.
Tools:
{catalogue}
Rules:
- At most {max_steps} steps, as few as the goal needs: one per independent lookup or \
action, and a final step combining results only when the goal needs one.
- "dependencies": the ids of the steps whose results a step needs ([] if none). No cycles.
- A task must be self-contained: its assistant sees only the goal, its task and the \
results of its dependencies.
- Write every task in the language of the goal.
- "tool_hint": the tool the step most likely uses, or null. "model_hint": "fast" for a \
simple lookup, "reasoning" for hard analysis, or null.
{context}Goal: {goal}"""

PLANNER_HISTORY = "Earlier conversation (for context):\n{lines}\n"
PLANNER_LEARNED = (
    "An earlier plan did not fully reach the goal. What it found:\n{learned}\n"
    "Plan only what is still missing.\n"
)

PLAN_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "task": {"type": "string"},
                    "dependencies": {"type": "array", "items": {"type": "string"}},
                    "tool_hint": {"type": ["string", "null"]},
                    "model_hint": {"type": ["string", "null"], "enum": ["fast", "reasoning", None]},
                },
                "required": ["id", "task", "dependencies"],
            },
        }
    },
    "required": ["steps"],
}

STEP_PROMPT = """\
You carry out one step of a plan towards this goal: {goal}
Your step: {task}
{inputs}Do only your step, then state its result briefly."""

STEP_INPUTS = "Results of the steps yours depends on:\n{results}\n"

ANALYZER_PROMPT = """\
Did the work below reach the goal? Judge from the results only.
Goal: {goal}
Results:
{results}"""

VERDICT_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "achieved": {"type": "boolean"},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "reasoning": {"type": "string"},
    },
    "required": ["achieved", "confidence", "reasoning"],
}

MODE_PROMPT = """\
Does this message ask for several independent things that could be looked up or done \
separately ("dag"), or for one thing, possibly in several dependent steps ("react")?
Message: {question}"""

MODE_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {"mode": {"type": "string", "enum": ["react", "dag"]}},
    "required": ["mode"],
}

FOLLOW_UP = "\n\nThe user added while this was being worked on:\n{texts}"


def step_question(goal: str, task: str, inputs: Sequence[tuple[str, str, str]], limit: int) -> str:
    """The question a step's agent is asked; ``inputs`` are its dependencies'
    (id, task, result), each result cut to ``limit`` characters."""
    results = "\n".join(
        f"[{dep_id}] {dep_task}\n{_cut(result, limit)}" for dep_id, dep_task, result in inputs
    )
    return STEP_PROMPT.format(
        goal=goal, task=task, inputs=STEP_INPUTS.format(results=results) if inputs else ""
    )


def _cut(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + " … (cut)"

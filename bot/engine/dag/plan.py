"""A plan: steps with dependencies, as the planner wrote them and validation accepted them.

A ``Plan`` is always valid once built: unique ids, dependencies that name other steps of
the plan, no cycles. ``validation.validate_plan`` is the only way raw model output
becomes one; anything it cannot accept is a ``PlanError``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from ..messages import Usage

ModelHint = Literal["fast", "reasoning"]
MODEL_HINTS: tuple[ModelHint, ...] = ("fast", "reasoning")


class PlanError(ValueError):
    """The planner gave no usable plan; the caller answers without one (ReAct).

    ``usage`` is what the failed planning cost, so the run's totals stay honest.
    """

    def __init__(self, message: str, *, usage: Usage | None = None) -> None:
        super().__init__(message)
        self.usage = usage or Usage()


@dataclass(frozen=True, slots=True)
class PlanStep:
    id: str
    task: str
    dependencies: tuple[str, ...] = ()
    tool_hint: str | None = None
    model_hint: ModelHint | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "task": self.task,
            "dependencies": list(self.dependencies),
            "tool_hint": self.tool_hint,
            "model_hint": self.model_hint,
        }


@dataclass(frozen=True, slots=True)
class Plan:
    steps: tuple[PlanStep, ...]
    _by_id: Mapping[str, PlanStep] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {step.id: step for step in self.steps})

    def __iter__(self) -> Iterator[PlanStep]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def get(self, step_id: str) -> PlanStep | None:
        return self._by_id.get(step_id)

    def ids(self) -> tuple[str, ...]:
        return tuple(step.id for step in self.steps)

    def dependants(self, step_id: str) -> tuple[PlanStep, ...]:
        return tuple(step for step in self.steps if step_id in step.dependencies)

    def sinks(self) -> tuple[PlanStep, ...]:
        """The steps nothing depends on: together, what the plan produces."""
        needed = {dep for step in self.steps for dep in step.dependencies}
        return tuple(step for step in self.steps if step.id not in needed)

    def as_dict(self) -> dict[str, object]:
        return {"steps": [step.as_dict() for step in self.steps]}


def find_cycle(steps: Mapping[str, tuple[str, ...]]) -> list[str] | None:
    """A dependency cycle among ``steps`` (id -> dependencies) as a list of ids, or None.

    Iterative (a model may write a long chain; recursion depth is not its to choose).
    """
    state: dict[str, int] = {}  # 1: on the current path, 2: fully explored
    for root in steps:
        if state.get(root):
            continue
        path: list[str] = []
        stack: list[tuple[str, Iterator[str]]] = [(root, iter(steps.get(root, ())))]
        state[root] = 1
        path.append(root)
        while stack:
            node, deps = stack[-1]
            dep = next(deps, None)
            if dep is None:
                stack.pop()
                path.pop()
                state[node] = 2
            elif state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            elif not state.get(dep) and dep in steps:
                state[dep] = 1
                path.append(dep)
                stack.append((dep, iter(steps[dep])))
    return None

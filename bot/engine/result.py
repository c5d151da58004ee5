"""What a run produced: the answer, the full transcript and a record of every tool call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .events import StepStatus
from .messages import Message, Usage
from .tools import Artifact

if TYPE_CHECKING:
    from .dag.report import PlanReport

RunStatus = Literal["completed", "max_iterations", "cycle_stopped", "cancelled", "error"]
LoopMode = Literal["native", "json"]


@dataclass(frozen=True, slots=True)
class Step:
    """One tool call: what was asked, what came back, and how it went."""

    index: int
    iteration: int
    call_id: str
    tool: str
    arguments: Mapping[str, Any]
    observation: str
    status: StepStatus
    duration: float
    error: str | None = None
    artifacts: tuple[Artifact, ...] = ()
    # In plan mode: the id of the plan step whose agent made this call.
    plan_step: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(slots=True)
class AgentResult:
    """The outcome of ``ReActAgent.run``; always consistent, whatever ended the run.

    ``messages`` is the full, uncompacted transcript (system prompt, history, question,
    every assistant turn and observation), which synthesis reads. ``answer_streamed``:
    ``answer`` is the final reply the run streamed, the answer as the user saw it.
    ``plan`` is set by plan mode (``DAGAgent``): the plans, their steps' states and
    results, and the verdicts.
    """

    answer: str
    messages: list[Message]
    iterations: int
    steps: list[Step]
    usage: Usage
    elapsed: float
    status: RunStatus = "completed"
    error: str | None = None
    mode: LoopMode = "native"
    tools: tuple[str, ...] = ()
    run_id: str = ""
    model: str | None = None
    compactions: int = 0
    synthesis_usage: Usage = field(default_factory=Usage)
    plan: PlanReport | None = None
    # The answer is the model's final reply, whose text went out as the run's ``answer``
    # events as it streamed in: no synthesis writes it again (see ``ReActAgent``).
    answer_streamed: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "completed"

    @property
    def total_usage(self) -> Usage:
        return self.usage + self.synthesis_usage

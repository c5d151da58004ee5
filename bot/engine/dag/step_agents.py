"""The ReAct agents plan mode runs: one per step, and the one it falls back to.

Every agent gets the same tools and the same hooks as the bot's ReAct agent would, so
approvals and read-only mode hold in every step; the step's model comes from the
``ModelRegistry`` by its ``model_hint`` (the default model when it has none, or when
nothing is registered for it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict, Unpack

from ..agent import ReActAgent, SynthesisMode
from ..hooks import Hook
from ..interrupts import InterruptLimits
from ..model_registry import DEFAULT, ModelRegistry
from ..tools import ToolRegistry
from .plan import PlanStep
from .step_clock import HeldHooks, StepClock


class ReActOptions(TypedDict, total=False):
    """``ReActAgent``'s keyword options (all but ``hooks``), passed to every agent built."""

    max_iterations: int
    use_native_tools: bool
    completion_check: bool
    completion_check_min_tools: int
    cycle_threshold: int
    cycle_stop_after: int
    reflection_interval: int
    max_reformat_retries: int
    system_prompt: str | None
    instructions: str | None
    context_budget: int | None
    tool_timeout: float
    max_parallel_tools: int
    max_observation_chars: int
    selection_threshold: int
    max_selected_tools: int
    interrupt_limits: InterruptLimits | None
    synthesis: SynthesisMode
    tool_menu: bool
    # Plan mode's fallback agent only: a step's agent has none (``checkpoint.py``).
    checkpoints: bool


class StepAgents:
    """Builds the ReAct agents of a plan-mode run from the bot's pieces."""

    def __init__(
        self,
        models: ModelRegistry,
        tools: ToolRegistry,
        hooks: Sequence[Hook],
        **options: Unpack[ReActOptions],
    ) -> None:
        self.models = models
        self.tools = tools
        self.hooks = tuple(hooks)
        self.options = options

    def fallback(self) -> ReActAgent:
        """A plain ReAct agent on the default model, as the bot would run without plans."""
        return ReActAgent(self.models.default, self.tools, hooks=self.hooks, **self.options)

    def for_step(self, step: PlanStep, clock: StepClock, query: str) -> ReActAgent:
        """A fresh agent for ``step`` asked ``query``; its hooks stop ``clock`` while they
        hold a call."""
        hooks: tuple[Hook, ...] = (HeldHooks(self.hooks, clock),) if self.hooks else ()
        llm = self.models.get(step.model_hint or DEFAULT)
        options: ReActOptions = {
            **self.options,
            "interrupt_limits": _limits_for(query, self.options),
            # A step alone cannot go on with the plan: its hooks get no checkpoint.
            "checkpoints": False,
        }
        return ReActAgent(llm, self.tools, hooks=hooks, **options)


def _limits_for(query: str, options: ReActOptions) -> InterruptLimits:
    """The run's limits, widened to take the whole step question.

    The step question is ours, already bounded (goal, task, dependencies' results each
    cut): cutting it again at the user-message cap would lose the middle dependency.
    A step reads no interrupts, so only the cap on its question changes.
    """
    base = options.get("interrupt_limits") or InterruptLimits()
    cap = max(base.max_message_chars, len(query))
    return InterruptLimits(base.max_messages, max(base.max_chars, cap), cap)

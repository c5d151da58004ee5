"""Plan mode: a planner writes steps with dependencies, independent steps run in parallel
(each a fresh ReAct agent), an analyser judges the result and may re-plan.

``DAGAgent`` is the drop-in for ``ReActAgent``; the pieces are public for tests, the
benchmark and callers that assemble their own run.
"""

from __future__ import annotations

from .agent import AgentMode, DAGAgent
from .analyzer import PlanAnalyzer
from .executor import DAGExecutor
from .mode import Mode, ModeChoice, ModeSelector, choose_mode, rule_mode
from .plan import Plan, PlanError, PlanStep
from .planner import DAGPlanner, PlannedSteps
from .report import PlanReport, RoundReport, StepReport, Verdict
from .settings import DAGSettings
from .step_agents import ReActOptions
from .validation import validate_plan

__all__ = [
    "AgentMode",
    "DAGAgent",
    "DAGExecutor",
    "DAGPlanner",
    "DAGSettings",
    "Mode",
    "ModeChoice",
    "ModeSelector",
    "Plan",
    "PlanAnalyzer",
    "PlanError",
    "PlanReport",
    "PlanStep",
    "PlannedSteps",
    "ReActOptions",
    "RoundReport",
    "StepReport",
    "Verdict",
    "choose_mode",
    "rule_mode",
    "validate_plan",
]

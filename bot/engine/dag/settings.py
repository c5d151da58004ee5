"""The knobs of plan mode, with the defaults the design names."""

from __future__ import annotations

from dataclasses import dataclass

from ..model_registry import DEFAULT, FAST
from .analyzer import DEFAULT_THRESHOLD
from .executor import DEFAULT_DEPENDENCY_CHARS, DEFAULT_MAX_CONCURRENCY
from .rounds import DEFAULT_MAX_REPLANS
from .validation import DEFAULT_MAX_STEPS

DEFAULT_STEP_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class DAGSettings:
    """``step_timeout`` counts a step's own work, not the time hooks hold its calls
    (an approval); ``*_hint`` name the registry's models for planning, judging and the
    auto-mode classification (steps choose theirs by their ``model_hint``)."""

    max_steps: int = DEFAULT_MAX_STEPS
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    step_timeout: float = DEFAULT_STEP_TIMEOUT
    max_replans: int = DEFAULT_MAX_REPLANS
    confidence_threshold: float = DEFAULT_THRESHOLD
    dependency_chars: int = DEFAULT_DEPENDENCY_CHARS
    planner_hint: str = DEFAULT
    analyzer_hint: str = FAST
    selector_hint: str = FAST

    def __post_init__(self) -> None:
        if self.step_timeout <= 0:
            raise ValueError("step_timeout must be positive")
        if self.max_replans < 0:
            raise ValueError("max_replans must be at least 0")

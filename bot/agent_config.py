"""How questions are answered: the agent mode, plan mode's knobs, and models by hint.

``LARKGATE_MODE`` picks the mode (``react``: one agent in a tool loop; ``dag``: a plan
of steps, independent ones in parallel; ``auto``: chosen per question). The rest comes
from optional tables of ``larkgate.toml``::

    [models.fast]                 # cheap calls: plan mode's judge and mode choice, quick steps
    model = "gpt-4o-mini"
    # base_url = "https://..."    # default: LLM_BASE_URL
    # api_key_env = "FAST_KEY"    # the environment variable holding its key; default LLM_API_KEY

    [models.reasoning]            # steps the planner marks as hard analysis
    model = "o3-mini"

    [plan]
    max_steps = 10                # steps one plan may have
    max_concurrency = 5           # steps running at once
    step_timeout_seconds = 120    # a step's own work (an approval wait does not count)
    max_replans = 2               # re-plans after the first plan
    confidence_threshold = 0.6    # the judge's confidence under which a plan is redone

A hint without a table uses the main model (``LLM_MODEL``), so none is required.
Read once at the composition root (``Settings.agent()``) and injected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

RunMode = Literal["react", "dag", "auto"]
RUN_MODES: tuple[RunMode, ...] = ("react", "dag", "auto")
MODEL_HINTS = ("fast", "reasoning")

_MODEL_KEYS = {"model", "base_url", "api_key_env"}
_PLAN_LIMITS: dict[str, tuple[type, float, float]] = {
    # key: (type, lowest, highest)
    "max_steps": (int, 1, 50),
    "max_concurrency": (int, 1, 32),
    "step_timeout_seconds": (float, 1.0, 3_600.0),
    "max_replans": (int, 0, 5),
    "confidence_threshold": (float, 0.0, 1.0),
}


class AgentConfigError(ValueError):
    """A [models] or [plan] table of larkgate.toml is wrong; the message says where."""


@dataclass(frozen=True, slots=True)
class ModelEndpoint:
    """A model other than the main one, for a hint; empty fields mean the main one's."""

    model: str
    base_url: str = ""
    api_key: str = field(default="", repr=False)


@dataclass(frozen=True, slots=True)
class PlanKnobs:
    max_steps: int = 10
    max_concurrency: int = 5
    step_timeout_seconds: float = 120.0
    max_replans: int = 2
    confidence_threshold: float = 0.6


@dataclass(frozen=True, slots=True)
class AgentConfig:
    mode: RunMode = "react"
    # "fast" / "reasoning" -> its endpoint; a hint missing here uses the main model.
    models: Mapping[str, ModelEndpoint] = field(default_factory=dict)
    plan: PlanKnobs = field(default_factory=PlanKnobs)


def load_agent_config(
    mode: RunMode,
    data: Mapping[str, Any],
    *,
    path: Path | None,
    environ: Mapping[str, str],
) -> AgentConfig:
    """The agent config from ``LARKGATE_MODE`` and larkgate.toml as parsed (``data``).

    ``environ`` resolves ``api_key_env``; raises ``AgentConfigError`` naming the file.
    """
    where = str(path) if path is not None else "larkgate.toml"
    return AgentConfig(
        mode=mode,
        models=_models(data.get("models", {}), where, environ),
        plan=_plan(data.get("plan", {}), where),
    )


def _models(section: object, where: str, environ: Mapping[str, str]) -> dict[str, ModelEndpoint]:
    if not isinstance(section, dict):
        raise AgentConfigError(f"{where}: [models] must hold one table per hint")
    models: dict[str, ModelEndpoint] = {}
    for hint, table in section.items():
        if hint not in MODEL_HINTS:
            raise AgentConfigError(
                f"{where}: unknown model hint models.{hint} (use {' or '.join(MODEL_HINTS)})"
            )
        if not isinstance(table, dict):
            raise AgentConfigError(f"{where}: [models.{hint}] must be a table")
        unknown = sorted(set(table) - _MODEL_KEYS)
        if unknown:
            raise AgentConfigError(
                f"{where}: unknown key models.{hint}.{unknown[0]} "
                "(use model, base_url and api_key_env)"
            )
        models[hint] = _endpoint(hint, table, where, environ)
    return models


def _endpoint(
    hint: str, table: dict[str, Any], where: str, environ: Mapping[str, str]
) -> ModelEndpoint:
    model, base_url, key_env = (table.get(k, "") for k in ("model", "base_url", "api_key_env"))
    if not isinstance(model, str) or not model.strip():
        raise AgentConfigError(f"{where}: models.{hint}.model must name a model")
    if not isinstance(base_url, str) or (
        base_url and not base_url.startswith(("http://", "https://"))
    ):
        raise AgentConfigError(f"{where}: models.{hint}.base_url must be an http(s) URL")
    if not isinstance(key_env, str):
        raise AgentConfigError(f"{where}: models.{hint}.api_key_env must be a variable name")
    api_key = ""
    if key_env:
        api_key = environ.get(key_env, "")
        if not api_key:
            raise AgentConfigError(
                f"{where}: models.{hint}.api_key_env names {key_env}, which is not set"
            )
    return ModelEndpoint(model.strip(), base_url.rstrip("/"), api_key)


def _plan(section: object, where: str) -> PlanKnobs:
    if not isinstance(section, dict):
        raise AgentConfigError(f"{where}: [plan] must be a table")
    values: dict[str, Any] = {}
    for key, value in section.items():
        if key not in _PLAN_LIMITS:
            raise AgentConfigError(
                f"{where}: unknown key plan.{key} (use {', '.join(_PLAN_LIMITS)})"
            )
        kind, lowest, highest = _PLAN_LIMITS[key]
        number_ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not number_ok or (kind is int and not isinstance(value, int)):
            what = "an integer" if kind is int else "a number"
            raise AgentConfigError(f"{where}: plan.{key} must be {what}")
        if not lowest <= value <= highest:
            raise AgentConfigError(
                f"{where}: plan.{key} must be between {lowest:g} and {highest:g}"
            )
        values[key] = kind(value)
    return PlanKnobs(**values)

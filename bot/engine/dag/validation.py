"""Raw planner output to a ``Plan``, or a ``PlanError`` saying why not.

What a model gets slightly wrong is repaired where the intent is clear: numeric ids
become strings, a dependency on an unknown step or on the step itself is dropped (with
a warning), an unknown tool or model hint is forgotten. What cannot be repaired without
guessing is rejected: no steps, a step without a task, duplicate ids, a cycle, more
steps than the limit. Nothing here raises anything but ``PlanError``, whatever the input.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from .plan import MODEL_HINTS, ModelHint, Plan, PlanError, PlanStep, find_cycle

logger = logging.getLogger(__name__)

DEFAULT_MAX_STEPS = 10
# Ids and tasks are shown to models and on cards: bounded like any model-written text.
MAX_ID_CHARS = 64
MAX_TASK_CHARS = 2_000


def validate_plan(
    data: object,
    *,
    known_tools: Collection[str] | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
) -> Plan:
    """The plan in ``data`` (``{"steps": [...]}``), repaired or rejected as described above.

    ``known_tools``: the tools a tool hint may name (None: any name is kept).
    """
    if not isinstance(data, dict):
        raise PlanError(f"a plan must be a JSON object, not {type(data).__name__}")
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise PlanError("a plan needs a non-empty list of steps")
    if len(raw_steps) > max_steps:
        raise PlanError(f"the plan has {len(raw_steps)} steps; at most {max_steps} are allowed")
    drafts = [_draft(raw, position, known_tools) for position, raw in enumerate(raw_steps)]
    ids = [step.id for step in drafts]
    duplicates = sorted({step_id for step_id in ids if ids.count(step_id) > 1})
    if duplicates:
        raise PlanError(f"duplicate step ids: {', '.join(duplicates)}")
    steps = tuple(_known_dependencies(step, set(ids)) for step in drafts)
    cycle = find_cycle({step.id: step.dependencies for step in steps})
    if cycle is not None:
        raise PlanError(f"the plan's dependencies form a cycle: {' -> '.join(cycle)}")
    return Plan(steps)


def _draft(raw: object, position: int, known_tools: Collection[str] | None) -> PlanStep:
    if not isinstance(raw, dict):
        raise PlanError(f"step {position + 1} is not an object")
    step_id = _identifier(raw.get("id"))
    if step_id is None:
        raise PlanError(f"step {position + 1} has no usable id")
    task = raw.get("task")
    if not isinstance(task, str) or not task.strip():
        raise PlanError(f"step {step_id} has no task")
    return PlanStep(
        id=step_id,
        task=task.strip()[:MAX_TASK_CHARS],
        dependencies=_dependency_ids(step_id, raw.get("dependencies")),
        tool_hint=_tool_hint(raw.get("tool_hint"), known_tools),
        model_hint=_model_hint(raw.get("model_hint")),
    )


def _identifier(value: object) -> str | None:
    # bool is an int: True would become the id "True"
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = str(value).strip()
    return text[:MAX_ID_CHARS] if text else None


def _dependency_ids(step_id: str, value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    items: list[Any] = value if isinstance(value, list) else [value]
    found: list[str] = []
    for item in items:
        dep = _identifier(item)
        if dep is None:
            logger.warning("plan step %s: ignoring dependency %.80r", step_id, item)
        elif dep == step_id:
            logger.warning("plan step %s: dropping its dependency on itself", step_id)
        elif dep not in found:
            found.append(dep)
    return tuple(found)


def _known_dependencies(step: PlanStep, ids: set[str]) -> PlanStep:
    unknown = [dep for dep in step.dependencies if dep not in ids]
    if not unknown:
        return step
    logger.warning("plan step %s: dropping unknown dependencies %s", step.id, ", ".join(unknown))
    kept = tuple(dep for dep in step.dependencies if dep in ids)
    return PlanStep(step.id, step.task, kept, step.tool_hint, step.model_hint)


def _tool_hint(value: object, known_tools: Collection[str] | None) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    if known_tools is not None and value not in known_tools:
        logger.info("plan: ignoring unknown tool hint %.80r", value)
        return None
    return value


def _model_hint(value: object) -> ModelHint | None:
    for hint in MODEL_HINTS:
        if value == hint:
            return hint
    return None

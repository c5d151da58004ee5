"""The agent of each run: ReAct or plan mode, with the same tools, hooks and models.

``LARKGATE_MODE`` decides (``react``, ``dag``, ``auto``); ``/plan <question>`` forces
``dag`` for one question. Whatever the mode, the agent gets the tools the org's mode
allows for this run, every hook (read-only guard, approvals, audit, call log) and the
``ModelRegistry``: a plan step marked ``fast`` or ``reasoning`` runs on that model when
one is configured, else on the main one. A chat's profile (``bot.profiles``) narrows the
tools, adds its instructions, and may change the model and the mode.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

from bot.agent_config import MODEL_HINTS, PlanKnobs, RunMode
from bot.engine import (
    LLM,
    ChatAgent,
    DAGAgent,
    DAGSettings,
    Hook,
    HookChain,
    ModelRegistry,
    ReActAgent,
    ReActOptions,
    ToolRegistry,
)
from bot.profiles import Profile


def plan_settings(knobs: PlanKnobs) -> DAGSettings:
    return DAGSettings(
        max_steps=knobs.max_steps,
        max_concurrency=knobs.max_concurrency,
        step_timeout=knobs.step_timeout_seconds,
        max_replans=knobs.max_replans,
        confidence_threshold=knobs.confidence_threshold,
    )


class AgentBuilder:
    """Builds the agent of a run; ``await builder(forced)`` with ``forced`` a mode that
    wins over the configured one (``/plan``), or None."""

    def __init__(
        self,
        *,
        models: ModelRegistry,
        profile_models: Mapping[str, LLM] | None = None,
        tools_for_run: Callable[[], Awaitable[ToolRegistry]],
        hooks: Sequence[Hook],
        mode: RunMode = "react",
        plan: PlanKnobs | None = None,
        options: ReActOptions | None = None,
        context_budget: Callable[[], int] | None = None,
    ) -> None:
        self.models = models
        self._profile_models = dict(profile_models or {})
        self.mode = mode
        self._tools_for_run = tools_for_run
        self._hooks = tuple(hooks)
        self._hook_chain = HookChain(self._hooks)  # what each ReAct agent runs, built once
        self._plan = plan_settings(plan or PlanKnobs())
        self._options: ReActOptions = options or {}
        # Read per run: the model's probe may learn its context length after start-up.
        self._context_budget = context_budget

    async def __call__(
        self, forced: RunMode | None = None, profile: Profile | None = None, memories: str = ""
    ) -> ChatAgent:
        """``profile``: the chat's (its tools offered, its instructions, model and mode);
        ``memories``: the recalled memories' section, after the instructions."""
        tools = await self._tools_for_run()
        mode = forced or (profile.mode if profile is not None and profile.mode else self.mode)
        options = self._options
        if self._context_budget is not None:
            options = {**options, "context_budget": self._context_budget()}
        models = self.models
        if profile is not None:
            tools = profile.offer(tools)
            models = self.models_of(profile)
            if profile.instructions:
                options = {**options, "instructions": profile.instructions}
        if memories:
            before = options.get("instructions") or ""
            options = {**options, "instructions": f"{before}\n\n{memories}".strip()}
        if mode == "react":
            return ReActAgent(models.default, tools, hooks=self._hook_chain, **options)
        return DAGAgent(models, tools, hooks=self._hooks, mode=mode, settings=self._plan, **options)

    def models_of(self, profile: Profile) -> ModelRegistry:
        """The models of ``profile``'s runs: its model (a hint's, or one named) in place of
        the main one, the hints as configured."""
        if not profile.model:
            return self.models
        if profile.model in self.models or profile.model in MODEL_HINTS:
            main = self.models.get(profile.model)  # a hint without a table: the main one
        else:  # a model of its own (none when a test gave the bot one model object)
            main = self._profile_models.get(profile.model, self.models.default)
        hints = {h: self.models.get(h) for h in self.models.hints() if h != "default"}
        return ModelRegistry(main, **hints)

"""Which model answers which kind of request.

Callers ask by hint — ``"default"``, ``"fast"`` (cheap turns: titles, routing,
summaries), ``"reasoning"`` (hard multi-step questions) or any hint a deployment
registers — and always get a model back: a hint nobody registered falls back to the
default, so configuring only one model is a complete configuration.

    registry = ModelRegistry(main_llm, fast=small_llm)
    registry.get("fast")        # small_llm
    registry.get("reasoning")   # main_llm, as nothing was registered for it
"""

from __future__ import annotations

from .llm import LLM

DEFAULT = "default"
FAST = "fast"
REASONING = "reasoning"


class ModelRegistry:
    """LLMs by hint, with the default one as the fallback for every other hint."""

    def __init__(self, default: LLM, **by_hint: LLM) -> None:
        self._models: dict[str, LLM] = {DEFAULT: default}
        for hint, llm in by_hint.items():
            self.register(hint, llm)

    @property
    def default(self) -> LLM:
        return self._models[DEFAULT]

    def get(self, hint: str = DEFAULT) -> LLM:
        """The model registered for ``hint``, or the default when there is none."""
        return self._models.get(hint, self._models[DEFAULT])

    def register(self, hint: str, llm: LLM) -> None:
        """Register (or replace) the model for ``hint``; ``"default"`` replaces the fallback."""
        if not hint:
            raise ValueError("a model hint must be a non-empty string")
        self._models[hint] = llm

    def hints(self) -> tuple[str, ...]:
        """The registered hints, ``"default"`` first."""
        return tuple(self._models)

    def __contains__(self, hint: object) -> bool:
        return hint in self._models

    def __repr__(self) -> str:
        models = ", ".join(
            f"{hint}={getattr(llm, 'model', llm)!r}" for hint, llm in self._models.items()
        )
        return f"ModelRegistry({models})"

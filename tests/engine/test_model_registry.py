"""ModelRegistry: models by hint, falling back to the default."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from bot.engine.model_registry import ModelRegistry


@dataclass
class NamedModel:
    """Stands in for an LLM: the registry only stores and returns it."""

    model: str


MAIN = NamedModel("main")
SMALL = NamedModel("small")
DEEP = NamedModel("deep")


def test_default_is_returned_without_a_hint() -> None:
    registry = ModelRegistry(MAIN)
    assert registry.get() is MAIN
    assert registry.get("default") is MAIN
    assert registry.default is MAIN


def test_registered_hints_return_their_models() -> None:
    registry = ModelRegistry(MAIN, fast=SMALL, reasoning=DEEP)
    assert registry.get("fast") is SMALL
    assert registry.get("reasoning") is DEEP
    assert registry.get() is MAIN


@pytest.mark.parametrize("hint", ["fast", "reasoning", "vision", ""])
def test_unregistered_hints_fall_back_to_the_default(hint: str) -> None:
    registry = ModelRegistry(MAIN)
    assert registry.get(hint) is MAIN


def test_register_adds_and_replaces() -> None:
    registry = ModelRegistry(MAIN, fast=SMALL)
    registry.register("summary", DEEP)
    registry.register("fast", DEEP)
    assert registry.get("summary") is DEEP
    assert registry.get("fast") is DEEP


def test_registering_default_replaces_the_fallback() -> None:
    registry = ModelRegistry(MAIN)
    registry.register("default", SMALL)
    assert registry.get() is SMALL
    assert registry.get("reasoning") is SMALL


def test_hints_lists_default_first_then_registration_order() -> None:
    registry = ModelRegistry(MAIN, reasoning=DEEP)
    registry.register("fast", SMALL)
    assert registry.hints() == ("default", "reasoning", "fast")
    assert "fast" in registry
    assert "vision" not in registry


def test_empty_hint_cannot_be_registered() -> None:
    registry = ModelRegistry(MAIN)
    with pytest.raises(ValueError, match="non-empty"):
        registry.register("", SMALL)

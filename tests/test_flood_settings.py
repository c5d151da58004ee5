"""The flood bounds and the default rate limit, as settings: defaults, overrides, errors."""

from __future__ import annotations

import pytest

from bot.config import SettingsError, load_settings

from support.env import clear_settings

FLOOD_VARS = (
    "LARKGATE_INTERRUPTS_PER_RUN",
    "LARKGATE_INTERRUPT_CHARS_PER_RUN",
    "LARKGATE_PINNED_MESSAGE_CHARS",
    "LARKGATE_QUEUED_MESSAGES_PER_CONVERSATION",
    "LARKGATE_RATE_LIMIT_PER_MINUTE",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    clear_settings(monkeypatch, tmp_path, FLOOD_VARS)


def test_the_defaults():
    settings = load_settings()
    runtime = settings.runtime()
    assert (runtime.interrupts_per_run, runtime.interrupt_chars_per_run) == (10, 8_000)
    assert runtime.pinned_message_chars == 8_000
    assert runtime.queued_messages_per_conversation == 20
    assert settings.governance().budgets.messages_per_minute == 20


def test_the_environment_overrides_them_and_zero_turns_the_rate_limit_off(monkeypatch):
    monkeypatch.setenv("LARKGATE_INTERRUPTS_PER_RUN", "3")
    monkeypatch.setenv("LARKGATE_INTERRUPT_CHARS_PER_RUN", "4000")
    monkeypatch.setenv("LARKGATE_PINNED_MESSAGE_CHARS", "2000")
    monkeypatch.setenv("LARKGATE_QUEUED_MESSAGES_PER_CONVERSATION", "0")
    monkeypatch.setenv("LARKGATE_RATE_LIMIT_PER_MINUTE", "0")
    settings = load_settings()
    runtime = settings.runtime()
    assert (runtime.interrupts_per_run, runtime.interrupt_chars_per_run) == (3, 4_000)
    assert runtime.pinned_message_chars == 2_000
    assert runtime.queued_messages_per_conversation == 0  # no limit
    assert not settings.governance().budgets.any


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LARKGATE_INTERRUPTS_PER_RUN", "0"),
        ("LARKGATE_INTERRUPT_CHARS_PER_RUN", "50"),
        ("LARKGATE_PINNED_MESSAGE_CHARS", "10"),
        ("LARKGATE_QUEUED_MESSAGES_PER_CONVERSATION", "-1"),
    ],
)
def test_a_bound_too_small_to_work_is_a_clear_error(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=name):
        load_settings()

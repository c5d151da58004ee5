"""The bot's settings taken out of the environment, so a test sees only what it sets."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from bot.config import Settings, load_settings

# What the bot reads from the environment.
SETTINGS_PREFIXES = ("FEISHU_", "LLM_", "LARKGATE_", "DATABASE_URL")


def clear_settings(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    names: Iterable[str] | None = None,
    *,
    keep: Iterable[str] = (),
) -> None:
    """Unset ``names`` (by default every setting in the environment, but those in ``keep``)
    for the test, and run it in ``tmp_path``, where no stray .env is read."""
    if names is None:
        kept = set(keep)
        names = [n for n in os.environ if n.startswith(SETTINGS_PREFIXES) and n not in kept]
    for name in list(names):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


# Enough for ``larkgate serve`` to get past its required settings (nothing is reached).
SERVABLE = {
    "FEISHU_APP_ID": "cli_test",
    "FEISHU_APP_SECRET": "secret",
    "FEISHU_VERIFICATION_TOKEN": "vt",
    "FEISHU_ENCRYPT_KEY": "ek",
    "LLM_BASE_URL": "http://127.0.0.1:9/v1",
    "LLM_MODEL": "m",
}


def servable(monkeypatch: pytest.MonkeyPatch, **more: str) -> None:
    """Set the settings ``larkgate serve`` requires, and ``more``, for the test."""
    for name, value in {**SERVABLE, **more}.items():
        monkeypatch.setenv(name, value)


def checkable(feishu: Any, llm: Any, config: Path) -> Settings:
    """Settings ``larkgate check`` can run with against the fake Feishu and the fake model,
    with ``config`` as larkgate.toml."""
    return load_settings(
        feishu_app_id=feishu.app_id,
        feishu_app_secret=feishu.app_secret,
        feishu_verification_token="vt",
        feishu_encrypt_key="ek",
        feishu_domain=feishu.domain,
        llm_base_url=llm.base_url,
        llm_model="fake-model",
        larkgate_config=config,
    )

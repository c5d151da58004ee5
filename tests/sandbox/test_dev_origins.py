"""``larkgate dev`` says at start which settings it took from where: the environment, the
.env file, or its own defaults; a secret only as set, never its value."""

from __future__ import annotations

import pytest

import bot.cli
import bot.sandbox.runner
from bot.cli import main
from bot.config import load_settings
from bot.sandbox.origins import settings_report
from bot.sandbox.runner import DEV_DATABASE_URL, EMULATOR_SETTINGS, dev_settings

from support.env import clear_settings

SECRETS = ("sk-file-secret-value", "feishu-env-secret", "db-file-password", "key-env-secret")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    clear_settings(monkeypatch, tmp_path)


class Started(Exception):
    """Raised where the sandbox would start: the test needs only what is said before."""


class NoSandbox:
    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    async def __aenter__(self) -> None:
        raise Started

    async def __aexit__(self, *exc_info: object) -> None:
        pass


def block(out: str) -> dict[str, str]:
    """The printed block's rows: setting → the rest of its line."""
    lines = out.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("larkgate dev settings"))
    rows = {}
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        name, _, rest = line.strip().partition(" ")
        rows[name] = rest.strip()
    return rows


def test_dev_says_where_each_setting_came_from_and_never_a_secret(monkeypatch, tmp_path, capsys):
    (tmp_path / ".env").write_text(
        "LLM_MODEL=model-from-file\n"
        "LLM_API_KEY=sk-file-secret-value\n"
        "DATABASE_URL=postgresql+asyncpg://reader:db-file-password@db.internal/dev\n"
        "FEISHU_APP_ID=cli_from_file\n"
        # The environment wins over the file, and says so.
        "LLM_BASE_URL=http://127.0.0.1:1/file/v1\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/env/v1")
    monkeypatch.setenv("FEISHU_APP_SECRET", "feishu-env-secret")
    monkeypatch.setenv("LARKGATE_TOKEN_KEY", "key-env-secret")
    monkeypatch.setattr(bot.sandbox.runner, "Sandbox", NoSandbox)
    monkeypatch.setattr(bot.cli, "_configure_logging", lambda settings: None)

    with pytest.raises(Started):
        main(["dev", "--port", "0"])
    out = capsys.readouterr().out

    assert str(tmp_path / ".env") in out.splitlines()[0]
    rows = block(out)
    assert rows["LLM_BASE_URL"] == "http://127.0.0.1:9/env/v1  [from the environment]"
    assert rows["LLM_MODEL"] == "model-from-file  [from .env]"
    assert rows["LLM_API_KEY"] == "set (not shown)  [from .env]"
    assert rows["DATABASE_URL"] == ("postgresql+asyncpg://reader:***@db.internal/dev  [from .env]")
    assert rows["LARKGATE_CONFIG"].endswith("[in neither the environment nor .env]")
    assert rows["LARKGATE_TOKEN_KEY"] == "set (not shown)  [from the environment]"
    feishu = rows["FEISHU_*"]
    assert "the emulator's app" in feishu
    assert "FEISHU_APP_ID (.env)" in feishu and "FEISHU_APP_SECRET (the environment)" in feishu
    for secret in SECRETS:
        assert secret not in out


def test_dev_says_its_own_defaults_and_what_is_missing(capsys):
    assert main(["dev"]) == 2
    captured = capsys.readouterr()
    rows = block(captured.out)
    assert rows["LLM_BASE_URL"].startswith("not set")
    assert rows["LLM_MODEL"].startswith("not set")
    assert rows["DATABASE_URL"] == f"{DEV_DATABASE_URL}  [dev's own default]"
    assert rows["LARKGATE_TOKEN_KEY"] == "not set: a key of this session  [dev's own default]"
    assert rows["FEISHU_*"] == "the emulator's app, keys and domain  [dev's own default]"
    assert "none at" in captured.out.splitlines()[0]
    assert "larkgate dev needs a model" in captured.err


def test_values_given_in_code_say_so():
    settings = load_settings(llm_base_url="http://127.0.0.1:9/v1", llm_model="m")
    rows = block(settings_report(settings))
    assert rows["LLM_MODEL"] == "m  [given by the caller]"


def test_the_feishu_settings_said_unused_are_the_ones_dev_replaces():
    mine = load_settings(
        llm_base_url="http://127.0.0.1:9/v1",
        llm_model="m",
        feishu_app_id="cli_mine",
        feishu_app_secret="mine",
        feishu_verification_token="mine",
        feishu_encrypt_key="mine",
        feishu_domain="https://open.larksuite.com",
        feishu_event_mode="ws",
    )
    dev = dev_settings(mine, domain="http://127.0.0.1:9", app_secret="s", token="t", key="k")
    assert [name for name in EMULATOR_SETTINGS if getattr(dev, name) == getattr(mine, name)] == []

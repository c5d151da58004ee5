"""Settings: DESIGN §4 names, defaults, typed slices, larkgate.toml, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import SettingsError, load_settings
from connectors.hub import enabled, load_connector_class

ALL_VARS = [
    "FEISHU_APP_ID", "FEISHU_APP_SECRET", "FEISHU_VERIFICATION_TOKEN", "FEISHU_ENCRYPT_KEY",
    "FEISHU_DOMAIN", "LLM_BASE_URL", "LLM_API_KEY", "LLM_MODEL", "DATABASE_URL",
    "LARKGATE_ADMINS", "LARKGATE_HOST", "LARKGATE_PORT", "LARKGATE_APPROVAL_TTL_SECONDS",
    "LARKGATE_CONSOLE_TOKEN", "FEISHU_EVENT_MODE", "LARKGATE_CONFIG",
    "LARKGATE_MAX_EVENT_AGE_SECONDS", "LARKGATE_GROUP_ALLOWLIST",
]  # fmt: skip


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in ALL_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no stray .env


def test_defaults_follow_design():
    settings = load_settings()
    assert settings.feishu_domain == "https://open.feishu.cn"
    assert settings.database_url == "sqlite+aiosqlite:///./larkgate.db"
    assert settings.larkgate_port == 8000
    assert settings.larkgate_approval_ttl_seconds == 600
    assert settings.larkgate_max_event_age_seconds == 900
    assert settings.feishu_event_mode == "webhook"
    assert set(settings.missing_for_serve()) == {
        "FEISHU_APP_ID", "FEISHU_APP_SECRET", "LLM_BASE_URL", "LLM_MODEL",
        "FEISHU_VERIFICATION_TOKEN",
    }  # fmt: skip


def test_environment_and_dotenv(monkeypatch, tmp_path):
    (tmp_path / ".env").write_text("FEISHU_APP_ID=cli_from_dotenv\nLLM_MODEL=qwen\n")
    monkeypatch.setenv("LLM_MODEL", "from-env")
    monkeypatch.setenv("LARKGATE_ADMINS", "ou_a, ou_b,")
    monkeypatch.setenv("FEISHU_DOMAIN", "http://127.0.0.1:9999/")
    settings = load_settings()
    assert settings.feishu_app_id == "cli_from_dotenv"
    assert settings.llm_model == "from-env"  # the environment wins over .env
    assert settings.larkgate_admins == ("ou_a", "ou_b")
    assert settings.feishu().domain == "http://127.0.0.1:9999"


def test_secrets_stay_out_of_reprs(monkeypatch):
    monkeypatch.setenv("FEISHU_APP_SECRET", "s3cr3t-value")
    monkeypatch.setenv("LLM_API_KEY", "sk-s3cr3t")
    settings = load_settings()
    assert "s3cr3t" not in repr(settings)
    assert "s3cr3t" not in repr(settings.feishu())
    assert "s3cr3t" not in repr(settings.llm())
    assert settings.feishu().app_secret == "s3cr3t-value"


def test_invalid_values_give_a_clear_error(monkeypatch):
    monkeypatch.setenv("LARKGATE_PORT", "eighty")
    monkeypatch.setenv("FEISHU_EVENT_MODE", "carrier-pigeon")
    with pytest.raises(SettingsError) as error:
        load_settings()
    assert "LARKGATE_PORT" in str(error.value)
    assert "FEISHU_EVENT_MODE" in str(error.value)


def test_group_rules_from_larkgate_toml(monkeypatch, tmp_path):
    config = tmp_path / "larkgate.toml"
    config.write_text(
        '[groups]\nallowlist = ["oc_a"]\n\n'
        '[groups."oc_a"]\nrequire_mention = false\nscope = "topic"\n'
    )
    monkeypatch.setenv("LARKGATE_CONFIG", str(config))
    monkeypatch.setenv("LARKGATE_GROUP_ALLOWLIST", "oc_b")
    policy = load_settings().policy()
    assert policy.group_allowed("oc_a") and policy.group_allowed("oc_b")
    assert not policy.group_allowed("oc_c")
    assert policy.mention_required("oc_a") is False
    assert policy.mention_required("oc_b") is True
    assert policy.group_scope("oc_a") == "topic"
    assert policy.group_scope("oc_b") == "chat"


@pytest.mark.parametrize(
    "text",
    ['[groups."oc_a"]\nscope = "galaxy"\n', "[groups\n", '[groups]\nallowlist = "oc_a"\n'],
)
def test_bad_larkgate_toml_is_a_clear_error(monkeypatch, tmp_path, text):
    config = tmp_path / "larkgate.toml"
    config.write_text(text)
    monkeypatch.setenv("LARKGATE_CONFIG", str(config))
    with pytest.raises(SettingsError, match=r"larkgate\.toml"):
        load_settings().policy()


def test_the_example_larkgate_toml_is_valid(monkeypatch):
    example = Path(__file__).parent.parent / "larkgate.example.toml"
    monkeypatch.setenv("LARKGATE_CONFIG", str(example))
    settings = load_settings()
    settings.policy()
    config = settings.connectors(environ={})
    assert config.explicit
    assert set(config.sections) == {"utilities", "feishu", "sql", "http", "mcp"}
    # Every section, disabled ones included, validates against its connector's settings.
    for name, section in config.sections.items():
        values = {k: v for k, v in section.items() if k != "enabled"}
        load_connector_class(name).Settings.model_validate(values)
    assert set(enabled(config, feishu_credentials=True)) == {"utilities", "feishu", "http"}

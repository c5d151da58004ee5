"""Settings: DESIGN §4 names, defaults, typed slices, larkgate.toml, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import SettingsError, load_settings
from connectors.hub import enabled, load_connector_class

from support.env import clear_settings

ALL_VARS = [
    "FEISHU_APP_ID", "FEISHU_APP_SECRET", "FEISHU_VERIFICATION_TOKEN", "FEISHU_ENCRYPT_KEY",
    "FEISHU_DOMAIN", "LLM_BASE_URL", "LLM_API_KEY", "LLM_MODEL", "DATABASE_URL",
    "LARKGATE_ADMINS", "LARKGATE_HOST", "LARKGATE_PORT", "LARKGATE_APPROVAL_TTL_SECONDS",
    "LARKGATE_CONSOLE_TOKEN", "FEISHU_EVENT_MODE", "LARKGATE_CONFIG",
    "LARKGATE_MAX_EVENT_AGE_SECONDS", "LARKGATE_GROUP_ALLOWLIST",
]  # fmt: skip


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    clear_settings(monkeypatch, tmp_path, ALL_VARS)


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


# -- governance: [approvals] rules, approvers, time zone, budgets --------------------------

GOVERNANCE_VARS = [
    "LARKGATE_APPROVERS", "LARKGATE_TIMEZONE", "LARKGATE_RATE_LIMIT_PER_MINUTE",
    "LARKGATE_USER_DAILY_TOKENS", "LARKGATE_GROUP_DAILY_TOKENS",
]  # fmt: skip


@pytest.fixture(autouse=True)
def clean_governance_env(monkeypatch):
    for name in GOVERNANCE_VARS:
        monkeypatch.delenv(name, raising=False)


def _with_config(monkeypatch, tmp_path, text: str) -> Path:
    config = tmp_path / "larkgate.toml"
    config.write_text(text, encoding="utf-8")
    monkeypatch.setenv("LARKGATE_CONFIG", str(config))
    return config


def test_governance_defaults():
    from bot.governance.config import ApprovalRules, ApproverRule, BudgetConfig

    governance = load_settings().governance()
    assert governance.rules == ApprovalRules()
    assert governance.rules.default == "write"
    assert governance.approvers == ApproverRule("auto")
    # The rate limit is on by default (20 messages a minute per user); token budgets are off.
    assert governance.budgets == BudgetConfig(messages_per_minute=20)
    assert governance.budgets.any
    assert governance.timezone == "UTC"
    assert governance.approval_ttl_seconds == 600.0
    assert governance.admins == frozenset()


def test_budgets_and_time_zone_from_the_environment(monkeypatch):
    monkeypatch.setenv("LARKGATE_RATE_LIMIT_PER_MINUTE", "6")
    monkeypatch.setenv("LARKGATE_USER_DAILY_TOKENS", "50000")
    monkeypatch.setenv("LARKGATE_GROUP_DAILY_TOKENS", "200000")
    monkeypatch.setenv("LARKGATE_TIMEZONE", "Asia/Shanghai")
    monkeypatch.setenv("LARKGATE_ADMINS", "ou_a")
    governance = load_settings().governance()
    assert governance.budgets.messages_per_minute == 6
    assert governance.budgets.user_daily_tokens == 50_000
    assert governance.budgets.group_daily_tokens == 200_000
    assert governance.budgets.any
    assert governance.timezone == "Asia/Shanghai"
    assert governance.is_admin("ou_a") and not governance.is_admin("ou_b")


def test_a_negative_budget_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("LARKGATE_USER_DAILY_TOKENS", "-1")
    with pytest.raises(SettingsError, match="LARKGATE_USER_DAILY_TOKENS"):
        load_settings()


def test_approval_rules_from_larkgate_toml(monkeypatch, tmp_path):
    _with_config(
        monkeypatch,
        tmp_path,
        '[approvals]\ndefault = "never"\n\n'
        '[approvals.tools]\nsql_execute = "always"\nhttp_get = "never"\n\n'
        '[approvals.connectors]\nsql = "write"\nhttp = "always"\n',
    )
    rules = load_settings().governance().rules
    assert rules.default == "never"
    assert dict(rules.tools) == {"sql_execute": "always", "http_get": "never"}
    assert dict(rules.connectors) == {"sql": "write", "http": "always"}
    # A tool's own rule wins over its connector's, which wins over the default.
    assert rules.mode_for("sql_execute", "sql") == "always"
    assert rules.mode_for("http_get", "http") == "never"
    assert rules.mode_for("sql_query", "sql") == "write"
    assert rules.mode_for("http_post", "http") == "always"
    assert rules.mode_for("calculator", "utilities") == "never"
    assert rules.mode_for("custom", None) == "never"


def test_session_grants_can_be_switched_off(monkeypatch, tmp_path):
    assert load_settings().governance().rules.session_grants is True
    _with_config(monkeypatch, tmp_path, "[approvals]\nsession_grants = false\n")
    assert load_settings().governance().rules.session_grants is False


def test_the_console_link_on_cards(monkeypatch):
    assert load_settings().governance().console_url is None  # no console: no link
    on = load_settings(larkgate_console_token="t")
    assert on.governance().console_url == ""  # on, but its address is unknown
    linked = load_settings(larkgate_console_token="t", larkgate_public_url="https://b.example/")
    assert linked.governance().console_url == "https://b.example/console"
    with pytest.raises(SettingsError, match="LARKGATE_PUBLIC_URL"):
        load_settings(larkgate_public_url="bot.example.com")


def test_buttons_are_sealed_with_a_key_every_replica_derives_alike():
    one = load_settings(feishu_app_secret="s3cret").governance().button_key
    assert one == load_settings(feishu_app_secret="s3cret").governance().button_key
    assert one != load_settings(feishu_app_secret="other").governance().button_key
    assert "s3cret" not in repr(load_settings(feishu_app_secret="s3cret").governance())


def test_approval_rules_when_the_file_has_none(monkeypatch, tmp_path):
    from bot.governance.config import ApprovalRules

    _with_config(monkeypatch, tmp_path, '[groups]\nallowlist = ["oc_a"]\n')
    assert load_settings().governance().rules == ApprovalRules()
    _with_config(monkeypatch, tmp_path, '[approvals.tools]\nsql_execute = "always"\n')
    rules = load_settings().governance().rules
    assert rules.default == "write"
    assert dict(rules.tools) == {"sql_execute": "always"}
    assert dict(rules.connectors) == {}


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[approvals]\ndefault = "sometimes"\n', "approvals.default"),
        ('[approvals.tools]\nsql_execute = "Always"\n', "approvals.tools.sql_execute"),
        ("[approvals.connectors]\nhttp = true\n", "approvals.connectors.http"),
        ('[approvals]\ntools = "sql_execute"\n', "[approvals.tools]"),
        ("approvals = 3\n", "[approvals]"),
        # A misspelt table would silently drop its rules.
        ('[approvals.tool]\nsql_execute = "always"\n', "approvals.tool"),
        ('[approvals]\nsession_grants = "no"\n', "approvals.session_grants"),
    ],
)
def test_a_bad_approval_rule_is_a_settings_error_naming_the_key(monkeypatch, tmp_path, text, named):
    _with_config(monkeypatch, tmp_path, text)
    settings = load_settings()
    with pytest.raises(SettingsError) as error:
        settings.governance()
    assert named in str(error.value)
    assert "larkgate.toml" in str(error.value)


@pytest.mark.parametrize(
    ("value", "admins", "expected"),
    [
        ("auto", "ou_b,ou_a", ("ou_a", "ou_b")),
        ("auto", "", ("ou_req",)),
        ("", "ou_a", ("ou_a",)),  # empty: auto
        ("requester", "ou_a", ("ou_req",)),
        ("admins", "ou_b, ou_a", ("ou_a", "ou_b")),
        ("admins", "", ("ou_req",)),  # nobody else could decide
        (" Admins ", "ou_a", ("ou_a",)),
        ("ou_x", "ou_a", ("ou_x",)),
        ("ou_x, ou_y,", "ou_a", ("ou_x", "ou_y")),
        (" , ", "ou_a", ("ou_a",)),  # no ids at all: auto
    ],
)
def test_approvers_setting(monkeypatch, value, admins, expected):
    monkeypatch.setenv("LARKGATE_APPROVERS", value)
    monkeypatch.setenv("LARKGATE_ADMINS", admins)
    governance = load_settings().governance()
    assert governance.approvers.approvers("ou_req", governance.admins) == expected


@pytest.mark.parametrize("zone", ["Mars/Olympus", "utc", "America", "Etc", "../UTC", "/UTC"])
def test_an_unknown_time_zone_is_a_settings_error(monkeypatch, zone):
    monkeypatch.setenv("LARKGATE_TIMEZONE", zone)
    with pytest.raises(SettingsError) as error:
        load_settings()
    assert "LARKGATE_TIMEZONE" in str(error.value)
    assert "time zone" in str(error.value)


def test_the_example_larkgate_toml_approvals_parse(monkeypatch):
    from bot.governance.config import ApprovalRules

    example = Path(__file__).parent.parent / "larkgate.example.toml"
    monkeypatch.setenv("LARKGATE_CONFIG", str(example))
    rules = load_settings().governance().rules
    assert rules == ApprovalRules(
        default="write", tools={"sql_execute": "always"}, connectors={"utilities": "never"}
    )
    assert rules.needs_approval("sql_execute", "sql", "read")
    assert not rules.needs_approval("calculator", "utilities", "write")
    assert rules.needs_approval("http_post", "http", "write")
    assert not rules.needs_approval("http_get", "http", "read")


def test_the_react_knobs_are_settings_the_bot_passes_to_the_engine(monkeypatch):
    monkeypatch.setenv("REACT_CYCLE_DETECTION_THRESHOLD", "5")
    monkeypatch.setenv("REACT_COMPLETION_CHECK_MIN_TOOLS", "2")
    settings = load_settings()
    assert settings.react_cycle_detection_threshold == 5
    assert settings.react_completion_check_min_tools == 2
    monkeypatch.setenv("REACT_CYCLE_DETECTION_THRESHOLD", "zero")
    with pytest.raises(SettingsError, match="REACT_CYCLE_DETECTION_THRESHOLD"):
        load_settings()


def test_larkgate_toml_is_read_once_and_every_part_sees_the_same_rules(monkeypatch, tmp_path):
    config = tmp_path / "larkgate.toml"
    config.write_text(
        '[groups]\nallowlist = ["oc_a"]\n\n[approvals]\ndefault = "always"\n\n'
        "[connectors.utilities]\n"
    )
    monkeypatch.setenv("LARKGATE_CONFIG", str(config))
    settings = load_settings()
    assert settings.policy().group_allowed("oc_a")
    # Changed (or gone) after the start: this process keeps the rules it started with.
    config.unlink()
    assert settings.governance().rules.default == "always"
    assert settings.connectors().explicit
    assert settings.policy().group_allowed("oc_a")
    assert settings.feishu() is settings.feishu()


# -- the agent: LARKGATE_MODE, [models] and [plan] -----------------------------------------


def test_the_agent_mode_is_react_by_default_and_takes_the_three_design_names(monkeypatch):
    monkeypatch.delenv("LARKGATE_MODE", raising=False)
    assert load_settings().agent().mode == "react"
    for mode in ("react", "dag", "auto"):
        monkeypatch.setenv("LARKGATE_MODE", mode)
        assert load_settings().agent().mode == mode
    monkeypatch.setenv("LARKGATE_MODE", "plan")
    with pytest.raises(SettingsError, match="LARKGATE_MODE"):
        load_settings()


def test_without_larkgate_toml_no_hint_has_a_model_of_its_own_and_plans_have_defaults():
    from bot.agent_config import PlanKnobs

    settings = load_settings()
    assert settings.agent().models == {}
    assert settings.hint_models() == {}
    assert settings.agent().plan == PlanKnobs()


def test_models_by_hint_from_larkgate_toml_default_to_the_main_endpoint(monkeypatch, tmp_path):
    monkeypatch.setenv("LLM_BASE_URL", "https://main.example.com/v1")
    monkeypatch.setenv("LLM_API_KEY", "sk-main")
    monkeypatch.setenv("DEEP_KEY", "sk-deep")
    _with_config(
        monkeypatch,
        tmp_path,
        '[models.fast]\nmodel = "small"\n\n'
        '[models.reasoning]\nmodel = "deep"\nbase_url = "https://deep.example.com/v1/"\n'
        'api_key_env = "DEEP_KEY"\n',
    )
    settings = load_settings()
    fast, reasoning = settings.hint_models()["fast"], settings.hint_models()["reasoning"]
    assert (fast.model, fast.base_url, fast.api_key) == (
        "small", "https://main.example.com/v1", "sk-main"
    )  # fmt: skip
    assert (reasoning.model, reasoning.base_url, reasoning.api_key) == (
        "deep", "https://deep.example.com/v1", "sk-deep"
    )  # fmt: skip
    assert "sk-deep" not in repr(settings.agent()) and "sk-deep" not in repr(reasoning)


def test_plan_knobs_from_larkgate_toml(monkeypatch, tmp_path):
    _with_config(
        monkeypatch,
        tmp_path,
        "[plan]\nmax_steps = 6\nmax_concurrency = 2\nstep_timeout_seconds = 30\n"
        "max_replans = 0\nconfidence_threshold = 0.75\n",
    )
    plan = load_settings().agent().plan
    assert (plan.max_steps, plan.max_concurrency, plan.max_replans) == (6, 2, 0)
    assert plan.step_timeout_seconds == 30.0 and isinstance(plan.step_timeout_seconds, float)
    assert plan.confidence_threshold == 0.75


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ('[models.cheap]\nmodel = "x"\n', "models.cheap"),
        ('[models.fast]\nmodel = ""\n', "models.fast.model"),
        ('[models.fast]\nname = "x"\n', "models.fast.name"),
        ('[models.fast]\nmodel = "x"\nbase_url = "ftp://x"\n', "models.fast.base_url"),
        ('[models.fast]\nmodel = "x"\napi_key_env = "NOT_SET_ANYWHERE"\n', "NOT_SET_ANYWHERE"),
        ('[models.fast]\nmodel = "x"\napi_key_env = 3\n', "models.fast.api_key_env"),
        ('models = "fast"\n', r"\[models\]"),
        ('[models]\nfast = "small"\n', r"\[models.fast\]"),
        ("[plan]\nmax_steps = 0\n", "plan.max_steps"),
        ("[plan]\nmax_steps = 2.5\n", "plan.max_steps"),
        ("[plan]\nmax_concurrency = true\n", "plan.max_concurrency"),
        ("[plan]\nconfidence_threshold = 1.5\n", "plan.confidence_threshold"),
        ("[plan]\nsteps = 3\n", "plan.steps"),
        ('plan = "fast"\n', r"\[plan\]"),
    ],
)
def test_a_wrong_models_or_plan_table_is_a_clear_error(monkeypatch, tmp_path, text, names):
    _with_config(monkeypatch, tmp_path, text)
    with pytest.raises(SettingsError, match=names) as error:
        load_settings().agent(environ={})
    assert "larkgate.toml" in str(error.value)


def test_the_example_larkgate_toml_has_a_valid_plan_table(monkeypatch):
    from bot.agent_config import PlanKnobs

    example = Path(__file__).parent.parent / "larkgate.example.toml"
    monkeypatch.setenv("LARKGATE_CONFIG", str(example))
    agent = load_settings().agent(environ={})
    assert agent.plan == PlanKnobs() and agent.models == {}


def test_per_user_authorisation_is_on_only_with_a_valid_token_key():
    from cryptography.fernet import Fernet

    assert load_settings().user_auth() is None
    key = Fernet.generate_key().decode()
    rotated = f"{key}, {Fernet.generate_key().decode()}"
    config = load_settings(
        larkgate_token_key=rotated,
        larkgate_public_url="https://bot.example.com/",
        larkgate_authorization_ttl_seconds=120,
    ).user_auth()
    assert config is not None and config.state_secret == key  # the sealing key signs
    assert config.redirect_uri == "https://bot.example.com/feishu/oauth/callback"
    assert config.ttl_seconds == 120.0 and config.flow == "code"
    with pytest.raises(SettingsError, match="LARKGATE_TOKEN_KEY must be url-safe base64"):
        load_settings(larkgate_token_key="not-a-key").user_auth()
    with pytest.raises(SettingsError, match="LARKGATE_AUTHORIZATION_TTL_SECONDS"):
        load_settings(larkgate_authorization_ttl_seconds=7200)


def test_a_bad_token_key_stops_the_bot_before_it_starts():
    from bot.app import create_app

    settings = load_settings(
        feishu_event_mode="ws", larkgate_token_key="not-a-key", llm_base_url="http://x"
    )
    with pytest.raises(SettingsError, match="Fernet key"):
        create_app(settings)


def test_the_model_call_timeout_is_a_setting_every_client_gets(monkeypatch, tmp_path):
    from bot.wiring.models import model_client

    assert load_settings().llm().timeout == 60.0
    monkeypatch.setenv("LLM_TIMEOUT_SECONDS", "300")
    monkeypatch.setenv("LLM_VISION_MODEL", "eyes")
    _with_config(monkeypatch, tmp_path, '[models.fast]\nmodel = "small"\n')
    settings = load_settings()
    configs = [settings.llm(), settings.vision_llm(), settings.hint_models()["fast"]]
    assert [c.timeout for c in configs if c is not None] == [300.0] * 3
    client = model_client(settings.llm(), settings.network())
    assert client._client.timeout == 300.0  # what the openai SDK waits, with its own client
    for wrong in ("0", "-1", "7200"):
        monkeypatch.setenv("LLM_TIMEOUT_SECONDS", wrong)
        with pytest.raises(SettingsError, match=r"LLM_TIMEOUT_SECONDS|llm_timeout_seconds"):
            load_settings()

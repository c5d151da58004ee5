"""``[apps.NAME]`` tables (``bot/apps.py``): what a table takes, every malformed one said
with where and why, secrets only by environment variable, and the settings each app runs
with (its credentials, admins and profile; the rest shared)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bot.apps import AppError, load_apps
from bot.checks import run_checks
from bot.cli import main
from bot.config import SettingsError, load_settings

from fakes.feishu_server import FakeFeishu
from fakes.openai_server import FakeOpenAIServer, Reply
from support.env import checkable, clear_settings, servable

ENV = {"HR_SECRET": "s3cret", "HR_TOKEN": "vt-hr", "HR_KEY": "ek-hr"}
HR = {
    "app_id": "cli_hr",
    "app_secret_env": "HR_SECRET",
    "verification_token_env": "HR_TOKEN",
    "encrypt_key_env": "HR_KEY",
}


def apps_of(tables: dict, environ: dict | None = None, **options):
    return load_apps(
        {"apps": tables}, ENV if environ is None else environ, where="larkgate.toml", **options
    )


def test_a_table_gives_an_app_with_its_secrets_from_the_environment():
    (app,) = apps_of(
        {"hr": {**HR, "profile": "hr", "admins": ["ou_a"], "accept_bots": ["ou_b"]}},
        profiles=frozenset({"hr"}),
    )
    assert (app.name, app.app_id, app.app_secret, app.verification_token) == (
        "hr", "cli_hr", "s3cret", "vt-hr",
    )  # fmt: skip
    assert (app.encrypt_key, app.event_mode, app.profile) == ("ek-hr", "webhook", "hr")
    assert (app.admins, app.accept_bots) == (("ou_a",), ("ou_b",))
    assert (app.events_path, app.card_path) == ("/feishu/hr/events", "/feishu/hr/card")
    assert "s3cret" not in repr(app) and "ek-hr" not in repr(app)


def test_long_connection_needs_no_verification_token():
    (app,) = apps_of(
        {"hr": {"app_id": "cli_hr", "app_secret_env": "HR_SECRET", "event_mode": "ws"}}
    )
    assert app.event_mode == "ws" and app.verification_token == ""


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({**HR, "app_secret": "inline"}, "app_secret does not belong in the file"),
        ({**HR, "encrypt_key": "inline"}, "encrypt_key does not belong in the file"),
        ({k: v for k, v in HR.items() if k != "app_id"}, "app_id (the app's cli_… id) is required"),
        ({k: v for k, v in HR.items() if k != "app_secret_env"}, "app_secret_env"),
        ({**HR, "app_secret_env": "UNSET_SECRET"}, "names UNSET_SECRET, which is not set"),
        ({**HR, "app_secret_env": "not a name"}, "names an environment variable"),
        ({k: v for k, v in HR.items() if k != "verification_token_env"}, "verification_token_env"),
        ({**HR, "event_mode": "push"}, "event_mode is webhook or ws"),
        ({**HR, "profile": "nobody"}, "profile 'nobody' is no [profiles.*] table"),
        ({**HR, "admins": ["cli_x"]}, "admins takes open_ids"),
        ({**HR, "accept_bots": "ou_x"}, "accept_bots is a list of open_ids"),
        ({**HR, "monthly_api_budget": -1}, "monthly_api_budget is a whole number"),
        ({**HR, "colour": "red"}, "unknown keys colour"),
    ],
)
def test_a_malformed_table_is_said_with_where_and_why(table, says):
    with pytest.raises(AppError, match=re.escape(says)) as raised:
        apps_of({"hr": table})
    assert str(raised.value).startswith("larkgate.toml: [apps.hr]")


@given(st.text(min_size=1, max_size=40))
@example("hr\n")  # a regex's "$" would let a trailing newline through
@example("../hr")
def test_a_name_is_a_route_segment_or_refused(name):
    """Whatever the name, it either is a plain path segment or is refused: a route is
    never built from ``..``, a slash, a space or upper case."""
    if not re.fullmatch(r"[a-z][a-z0-9_-]{0,31}", name):
        with pytest.raises(AppError, match="part of its routes"):
            apps_of({name: HR})
        return
    (app,) = apps_of({name: HR})
    assert app.events_path == f"/feishu/{name}/events"


def test_two_tables_for_one_app_or_the_default_app_again_are_refused():
    with pytest.raises(AppError, match=r"app_id cli_hr is already \[apps.a\]"):
        apps_of({"a": HR, "b": HR})
    with pytest.raises(AppError, match="already the default app"):
        apps_of({"hr": HR}, default_app_id="cli_hr")


def test_each_app_runs_with_its_own_feishu_settings_and_the_rest_shared(tmp_path, monkeypatch):
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    config = tmp_path / "larkgate.toml"
    config.write_text(
        '[profiles.hr]\ninstructions = "HR."\n\n[profiles.ops]\n\n'
        '[groups."oc_ops"]\nprofile = "ops"\n\n[dm]\nprofile = "ops"\n\n'
        '[apps.hr]\napp_id = "cli_hr"\napp_secret_env = "HR_SECRET"\n'
        'verification_token_env = "HR_TOKEN"\nencrypt_key_env = "HR_KEY"\n'
        'profile = "hr"\nadmins = ["ou_hr_admin"]\n',
        encoding="utf-8",
    )
    settings = load_settings(
        feishu_app_id="cli_main",
        feishu_app_secret="main-secret",
        larkgate_admins="ou_admin",
        larkgate_approvers="ou_a,ou_b",
        llm_model="m",
        larkgate_config=config,
    )
    (spec,) = settings.apps()
    hr = settings.for_app(spec)
    assert (hr.app_name, hr.feishu().app_id, hr.feishu().app_secret) == ("hr", "cli_hr", "s3cret")
    assert hr.governance().admins == frozenset({"ou_hr_admin"})
    # Approvers named by open_id are the default app's people: HR's own admins decide.
    assert hr.governance().approvers.kind == "auto"
    assert hr.governance().button_key != settings.governance().button_key
    assert hr.llm_model == "m" and hr.user_auth() is None and hr.apps() == ()
    assert hr.policy().app == "hr" and settings.policy().app == ""
    # The app's profile everywhere in its chats, but where a group route names another.
    profiles = hr.profiles()
    assert profiles.for_chat("oc_any", "group").instructions == "HR."  # type: ignore[union-attr]
    assert profiles.for_chat("ou_x", "p2p").instructions == "HR."  # type: ignore[union-attr]
    assert profiles.for_chat("oc_ops", "group") is profiles.profiles["ops"]
    # The default app's settings are what they were.
    assert settings.profiles().for_chat("oc_any", "group") is None
    assert settings.feishu().app_id == "cli_main" and settings.app_name == ""


@pytest.fixture
def cli_env(monkeypatch, tmp_path) -> Path:
    clear_settings(monkeypatch, tmp_path)
    servable(monkeypatch)
    config = tmp_path / "larkgate.toml"
    monkeypatch.setenv("LARKGATE_CONFIG", str(config))
    return config


def test_serve_stops_on_a_secret_it_cannot_find(cli_env, capsys):
    cli_env.write_text(
        '[apps.hr]\napp_id = "cli_hr"\napp_secret_env = "HR_SECRET"\nevent_mode = "ws"\n'
    )
    assert main(["serve"]) == 2
    assert "[apps.hr]: app_secret_env names HR_SECRET, which is not set" in capsys.readouterr().err


def test_serve_stops_on_a_secret_written_in_the_file(cli_env, capsys):
    cli_env.write_text('[apps.hr]\napp_id = "cli_hr"\napp_secret = "oops"\n')
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "app_secret does not belong in the file" in err and "oops" not in err


def test_serve_refuses_an_app_whose_pushes_would_come_unsigned(cli_env, monkeypatch, capsys):
    monkeypatch.setenv("HR_SECRET", "s")
    monkeypatch.setenv("HR_TOKEN", "t")
    cli_env.write_text(
        '[apps.hr]\napp_id = "cli_hr"\napp_secret_env = "HR_SECRET"\n'
        'verification_token_env = "HR_TOKEN"\n'
    )
    assert main(["serve"]) == 2
    assert "FEISHU_ENCRYPT_KEY is not set" in capsys.readouterr().err


def test_a_secret_in_dot_env_is_found(cli_env, tmp_path, monkeypatch):
    (tmp_path / ".env").write_text("HR_SECRET=from-dot-env\n")
    cli_env.write_text(
        '[apps.hr]\napp_id = "cli_hr"\napp_secret_env = "HR_SECRET"\nevent_mode = "ws"\n'
    )
    (app,) = load_settings().apps()
    assert app.app_secret == "from-dot-env"


async def test_check_describes_each_app_and_fails_one_feishu_refuses(tmp_path, monkeypatch):
    async with FakeFeishu() as feishu, FakeOpenAIServer() as llm:
        llm.handler = lambda body: Reply(content="ok")
        feishu.add_app("cli_hr", "s3cret", "ou_hr_bot", "HR bot")
        for name, value in {**ENV, "OPS_SECRET": "wrong"}.items():
            monkeypatch.setenv(name, value)
        config = tmp_path / "larkgate.toml"
        config.write_text(
            '[apps.hr]\napp_id = "cli_hr"\napp_secret_env = "HR_SECRET"\n'
            'verification_token_env = "HR_TOKEN"\nencrypt_key_env = "HR_KEY"\n\n'
            '[apps.ops]\napp_id = "cli_ops"\napp_secret_env = "OPS_SECRET"\nevent_mode = "ws"\n'
        )
        settings = checkable(feishu, llm, config)
        results = {r.name: r for r in await run_checks(settings)}
    hr, ops = results["app hr"], results["app ops"]
    assert hr.level == "ok"
    assert hr.detail == "cli_hr: HR bot (ou_hr_bot), events on /feishu/hr/events"
    assert ops.level == "FAIL" and ops.detail.startswith("cli_ops: ")


def test_a_settings_error_names_the_table(tmp_path):
    config = tmp_path / "larkgate.toml"
    config.write_text("apps = 3\n")
    with pytest.raises(SettingsError, match=r"\[apps\] must hold tables"):
        load_settings(larkgate_config=config).apps()

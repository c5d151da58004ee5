"""The larkgate command: clear errors for missing settings, migrations that apply."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bot.cli import main

from support.env import clear_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    clear_settings(monkeypatch, tmp_path)


def test_serve_without_settings_says_what_is_missing(capsys):
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    for name in ("FEISHU_APP_ID", "FEISHU_APP_SECRET", "FEISHU_VERIFICATION_TOKEN", "LLM_MODEL"):
        assert name in err


def test_invalid_settings_are_reported_not_raised(monkeypatch, capsys):
    monkeypatch.setenv("LARKGATE_PORT", "not-a-port")
    assert main(["serve"]) == 2
    assert "LARKGATE_PORT" in capsys.readouterr().err


def test_a_wrong_plan_table_stops_serve_with_a_clear_message(monkeypatch, tmp_path, capsys):
    config = tmp_path / "larkgate.toml"
    config.write_text("[plan]\nmax_concurrency = 0\n")
    for name, value in {
        "FEISHU_APP_ID": "cli_x", "FEISHU_APP_SECRET": "s", "FEISHU_VERIFICATION_TOKEN": "t",
        "FEISHU_ENCRYPT_KEY": "k", "LLM_BASE_URL": "http://127.0.0.1:9", "LLM_MODEL": "m",
        "LARKGATE_CONFIG": str(config),
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    assert main(["serve"]) == 2
    assert "plan.max_concurrency must be between 1 and 32" in capsys.readouterr().err


def test_migrate_creates_the_database(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path}/fresh.db")
    assert main(["migrate"]) == 0
    assert "database at revision" in capsys.readouterr().out
    assert (tmp_path / "fresh.db").exists()
    assert main(["migrate"]) == 0  # idempotent


def test_the_console_script_is_installed():
    result = subprocess.run(
        [sys.executable, "-m", "bot.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert "serve" in result.stdout and "migrate" in result.stdout


def test_serve_runs_on_uvloop_unless_told_otherwise(monkeypatch, caplog):
    import asyncio

    import uvloop

    from bot.cli import serving_event_loop

    for wanted, kind in (("uvloop", uvloop.Loop), ("asyncio", asyncio.SelectorEventLoop)):
        loop = serving_event_loop(wanted)
        try:
            assert isinstance(loop, kind)
        finally:
            loop.close()
    # Where uvloop is not installed (it has no Windows build), asyncio's loop, said once.
    monkeypatch.setitem(sys.modules, "uvloop", None)
    loop = serving_event_loop("uvloop")
    try:
        assert not isinstance(loop, uvloop.Loop)
        assert "uvloop is not installed" in caplog.text
    finally:
        loop.close()


def test_serve_leaves_its_start_up_objects_out_of_later_collections():
    """A full collection walking the ~490,000 objects of the imports stopped the event loop
    for 100-200 ms; after start-up they are frozen (in a process of its own: freezing is
    for the life of a process)."""
    script = """
import asyncio, gc
from aiohttp import web
from bot.cli import freeze_after_startup

app = web.Application()
freeze_after_startup(app)
app.freeze()  # as aiohttp does before it starts an app
before = len(gc.get_objects())
assert gc.get_freeze_count() == 0
asyncio.run(app.startup())
print(before, gc.get_freeze_count(), len(gc.get_objects()))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    before, frozen, tracked = map(int, result.stdout.split())
    assert frozen >= before * 0.9  # what existed at start-up (less its garbage) is frozen
    assert tracked < 1_000  # and a collection now walks only what came after

"""``larkgate audit``: the latest audit entries, oldest first, limited and filtered by action."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime

import pytest

from bot.cli import main
from bot.store import AuditEntry, AuditLog, Database
from bot.store.migrate import upgrade

START = datetime(2026, 3, 1, 9, 30, tzinfo=UTC).timestamp()

ENTRIES = [
    AuditEntry("readonly.on", actor="ou_admin", chat_id="oc_ops"),
    AuditEntry(
        "approval.approved",
        actor="ou_boss",
        target="ap_1",
        chat_id="oc_ops",
        detail={"tool": "deploy", "note": "好的"},
    ),
    AuditEntry("approval.expired", target="ap_2"),
    AuditEntry("readonly.off", actor="ou_admin", chat_id="oc_ops"),
]
LINES = [
    "2026-03-01 09:30:00  readonly.on  by ou_admin  in oc_ops",
    '2026-03-01 09:31:00  approval.approved  by ou_boss  target ap_1  in oc_ops  {"tool": '
    '"deploy", "note": "好的"}',
    "2026-03-01 09:32:00  approval.expired  by system  target ap_2",
    "2026-03-01 09:33:00  readonly.off  by ou_admin  in oc_ops",
]


@pytest.fixture
def database_url(monkeypatch, tmp_path) -> str:
    for name in list(os.environ):
        if name.startswith(("FEISHU_", "LLM_", "LARKGATE_", "DATABASE_URL")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no stray .env
    url = f"sqlite+aiosqlite:///{tmp_path}/audit.db"
    monkeypatch.setenv("DATABASE_URL", url)
    return url


def record(url: str, entries: list[AuditEntry], *, start: float = START) -> None:
    """Write ``entries`` through the audit log, a minute apart from ``start``."""

    async def write() -> None:
        times = iter(start + 60 * i for i in range(len(entries)))
        async with Database(url) as database:
            log = AuditLog(database, clock=lambda: next(times))
            for entry in entries:
                await log.record(entry)

    upgrade(url)
    asyncio.run(write())


def audit(capsys, *args: str) -> list[str]:
    assert main(["audit", *args]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return captured.out.splitlines()


def test_prints_the_entries_oldest_first(database_url, capsys):
    record(database_url, ENTRIES)
    assert audit(capsys) == LINES


def test_limit_keeps_the_latest(database_url, capsys):
    record(database_url, ENTRIES)
    assert audit(capsys, "--limit", "2") == LINES[2:]
    assert audit(capsys, "--limit", "1") == LINES[3:]
    assert audit(capsys, "--limit", "50") == LINES


def test_action_keeps_a_prefix(database_url, capsys):
    record(database_url, ENTRIES)
    assert audit(capsys, "--action", "approval.") == LINES[1:3]
    assert audit(capsys, "--action", "readonly.") == [LINES[0], LINES[3]]
    assert audit(capsys, "--action", "readonly.off") == [LINES[3]]
    assert audit(capsys, "--action", "readonly", "--limit", "1") == [LINES[3]]
    # A prefix, not a pattern: case counts and `_` / `%` are plain characters.
    assert audit(capsys, "--action", "READONLY") == ["no audit entries"]
    assert audit(capsys, "--action", "read_nly") == ["no audit entries"]
    assert audit(capsys, "--action", "%") == ["no audit entries"]


def test_no_entries(database_url, capsys, tmp_path):
    # A mistyped DATABASE_URL is reported, and no empty database is left behind.
    assert main(["audit"]) == 1
    assert "no larkgate database" in capsys.readouterr().err
    assert not (tmp_path / "audit.db").exists()
    assert main(["migrate"]) == 0
    capsys.readouterr()
    assert audit(capsys) == ["no audit entries"]
    record(database_url, ENTRIES)
    assert audit(capsys, "--action", "budget.") == ["no audit entries"]


def test_times_are_shown_in_the_configured_zone(database_url, monkeypatch, capsys):
    record(database_url, ENTRIES[:1])
    monkeypatch.setenv("LARKGATE_TIMEZONE", "Asia/Shanghai")
    assert audit(capsys) == ["2026-03-01 17:30:00  readonly.on  by ou_admin  in oc_ops"]


@pytest.mark.parametrize("limit", ["0", "-1", "many"])
def test_a_limit_below_one_is_refused(database_url, capsys, limit):
    record(database_url, ENTRIES)
    with pytest.raises(SystemExit) as exit_:
        main(["audit", "--limit", limit])
    assert exit_.value.code == 2
    assert "--limit" in capsys.readouterr().err


def test_bad_settings_are_reported(database_url, monkeypatch, capsys):
    monkeypatch.setenv("LARKGATE_TIMEZONE", "Mars/Olympus")
    assert main(["audit"]) == 2
    assert "LARKGATE_TIMEZONE" in capsys.readouterr().err

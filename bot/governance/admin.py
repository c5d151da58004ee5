"""Admin chat commands: ``/readonly on|off|status`` and ``/admin`` (the admin card).

Only admins act; anyone else gets a clear refusal, and every attempt is on record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.feishu.admin_card import READ_ONLY_SETTING, AdminCardView, admin_button_value, admin_card
from bot.store.audit import AuditEntry, AuditLog
from bot.store.org import OrgSettingsStore, ReadOnlyMode
from bot.timezones import time_zone

from . import texts
from .config import GovernanceConfig
from .readonly import ReadOnlySwitch
from .seal import ButtonSeal


@dataclass(frozen=True, slots=True)
class Toggle:
    """The outcome of a read-only toggle: refused, a no-op, stale (asked for a state that has
    changed since), or a change."""

    allowed: bool
    changed: bool = False
    mode: ReadOnlyMode | None = None
    refusal: str = ""
    stale: bool = False


@dataclass(frozen=True, slots=True)
class AdminReply:
    """A command's answer: markdown text, or a card."""

    text: str = ""
    card: dict[str, Any] | None = None


class AdminCommands:
    def __init__(
        self,
        config: GovernanceConfig,
        org: OrgSettingsStore,
        audit: AuditLog,
        switch: ReadOnlySwitch,
        seal: ButtonSeal,
    ) -> None:
        self._config = config
        self._org = org
        self._audit = audit
        self._switch = switch
        self._seal = seal

    async def readonly(self, args: list[str], *, actor: str, chat_id: str) -> AdminReply:
        what = (args[0].lower() if args else "status").strip()
        if what not in ("on", "off", "status"):
            return AdminReply(texts.READONLY_USAGE)
        refusal = await self._refuse(actor, chat_id, f"/readonly {what}", "change read-only mode")
        if refusal is not None:
            return refusal
        if what == "status":
            mode = await self._org.read_only()
            await self._audit.record(
                AuditEntry("admin.readonly_status", actor=actor, chat_id=chat_id)
            )
            return AdminReply(self._status(mode))
        toggle = await self._set(what == "on", actor=actor, chat_id=chat_id)
        if not toggle.changed or toggle.mode is None:
            return AdminReply(texts.READONLY_ALREADY.format(state=what))
        return AdminReply(announcement(toggle.mode, actor))

    async def set_read_only(
        self,
        on: bool,
        *,
        actor: str,
        chat_id: str | None,
        via: str | None = None,
        expected_version: int | None = None,
    ) -> Toggle:
        """The admin card's toggle (with the version the card showed) or the web console's
        (``via="console"``, without a chat): the same rules and records as the command."""
        command = f"/readonly {'on' if on else 'off'} ({via or 'admin card'})"
        refusal = await self._refuse(actor, chat_id or "", command, "change read-only mode")
        if refusal is not None:
            return Toggle(False, refusal=refusal.text)
        return await self._set(
            on, actor=actor, chat_id=chat_id, via=via, expected_version=expected_version
        )

    async def _set(
        self,
        on: bool,
        *,
        actor: str,
        chat_id: str | None,
        via: str | None = None,
        expected_version: int | None = None,
    ) -> Toggle:
        switch = await self._switch.set(
            on, actor=actor, chat_id=chat_id, via=via, expected_version=expected_version
        )
        if not switch.changed:  # the store audits changes only; a no-op request is on record too
            detail: dict[str, object] = {"requested": "on" if on else "off"}
            if via is not None:
                detail["via"] = via
            action = "admin.readonly_unchanged"
            if switch.stale:
                action = "admin.readonly_stale"
                detail["card_version"] = expected_version
                detail["version"] = switch.mode.version
            await self._audit.record(
                AuditEntry(action, actor=actor, chat_id=chat_id, detail=detail)
            )
        return Toggle(True, switch.changed, switch.mode, stale=switch.stale)

    def toggle_is_genuine(self, value: dict[str, object]) -> bool:
        """Whether a clicked toggle's value is one this bot rendered (its seal holds)."""
        return self._seal.valid(value)

    async def admin_card(self, *, actor: str, chat_id: str) -> AdminReply:
        refusal = await self._refuse(actor, chat_id, "/admin", "open the admin card")
        if refusal is not None:
            return refusal
        await self._audit.record(AuditEntry("admin.card", actor=actor, chat_id=chat_id))
        mode = await self._org.read_only()
        return AdminReply(self._status(mode), card=self.card(mode))

    def card(self, mode: ReadOnlyMode, notice: str | None = None) -> dict[str, Any]:
        toggle = admin_button_value(READ_ONLY_SETTING, "off" if mode.on else "on", mode.version)
        return admin_card(
            AdminCardView(
                read_only=mode.on,
                changed_by=mode.changed_by,
                changed_at=mode.changed_at,
                admins=tuple(sorted(self._config.admins)),
                timezone=self._config.timezone,
                notice=notice,
                version=mode.version,
                seal=self._seal.sealed(toggle)["seal"],
                profiles=self._profiles(),
            )
        )

    def _profiles(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        profiles = self._config.profiles
        routes = profiles.routes()
        return tuple(
            (name, tuple(where for where, used in routes if used == name))
            for name in sorted(profiles.profiles)
        )

    async def _refuse(self, actor: str, chat_id: str, command: str, what: str) -> AdminReply | None:
        if self._config.is_admin(actor):
            return None
        await self._audit.record(
            AuditEntry("admin.refused", actor=actor, chat_id=chat_id, detail={"command": command})
        )
        template = texts.ADMIN_ONLY if self._config.admins else texts.NO_ADMINS
        return AdminReply(template.format(what=what))

    def _status(self, mode: ReadOnlyMode) -> str:
        since = ""
        if mode.changed_by and mode.changed_at:
            when = datetime.fromtimestamp(mode.changed_at, time_zone(self._config.timezone))
            since = (
                f" (set by {texts.mention(mode.changed_by)} on "
                f"{when:%Y-%m-%d %H:%M} {self._config.timezone})"
            )
        return texts.READONLY_STATUS.format(state="on" if mode.on else "off", since=since)


def announcement(mode: ReadOnlyMode, actor: str) -> str:
    template = texts.READONLY_ON if mode.on else texts.READONLY_OFF
    return template.format(who=texts.mention(actor))

"""Chat commands, each declared once: its name, who may use it, its help line, its handler.

``/help`` is written from this table (a command added here is in it), and a message is a
command exactly when its first word names one here. Who may use a command is said in the
help; an admin command's handler still checks the sender itself (governance audits a
refused attempt), so the table never grants anything.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from bot.feishu.events import InboundMessage

Who = Literal["anyone", "admins"]
_NAME = re.compile(r"/[a-z]+")
# The message, and the key of its conversation.
CommandHandler = Callable[[InboundMessage, str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ChatCommand:
    """``usage`` is how /help shows it (``/readonly on|off|status``), ``help`` what it does.
    ``handler`` None: the command is a question, run as a turn (``/plan``)."""

    name: str
    usage: str
    help: str
    handler: CommandHandler | None
    who: Who = "anyone"


class ChatCommands:
    """The commands a chat message may start with."""

    def __init__(self, commands: Iterable[ChatCommand]) -> None:
        self._by_name: dict[str, ChatCommand] = {}
        for command in commands:
            if not _NAME.fullmatch(command.name):
                raise ValueError(f"a command is / and lower-case letters: {command.name!r}")
            if command.name in self._by_name:
                raise ValueError(f"{command.name} is declared twice")
            self._by_name[command.name] = command

    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def parse(self, text: str) -> ChatCommand | None:
        """The command ``text`` is, if any (the bot's mention is already removed)."""
        words = text.strip().split()
        return self._by_name.get(words[0].lower()) if words else None

    def help_lines(self) -> list[str]:
        """A line a command, those anyone may use first, then the admins' ones."""
        ordered = sorted(self._by_name.values(), key=lambda c: c.who != "anyone")
        return [f"- {'Admins: ' if c.who == 'admins' else ''}`{c.usage}` {c.help}" for c in ordered]

"""Chat commands, declared once (``bot.runtime.intake.commands``): what is a command, and /help."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.runtime import texts
from bot.runtime.intake.commands import ChatCommand, ChatCommands


async def _noop(message, key) -> None:
    return None


COMMANDS = ChatCommands(
    [
        ChatCommand("/plan", "/plan <question>", "answers with a plan.", None),
        ChatCommand("/stop", "/stop", "stops the reply in progress.", _noop),
        ChatCommand("/readonly", "/readonly on|off|status", "switches writes.", _noop, "admins"),
        ChatCommand("/help", "/help", "shows this message.", _noop),
    ]
)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("/stop", "/stop"),
        ("  /STOP  please", "/stop"),
        ("/readonly on", "/readonly"),
        ("/plan compare A and B", "/plan"),
        ("/stopped", None),  # a word that starts like a command is not one
        ("stop", None),
        ("", None),
        ("   ", None),
        ("/", None),
        ("please /stop", None),  # only the first word
    ],
)
def test_a_message_is_the_command_its_first_word_names(text, name):
    command = COMMANDS.parse(text)
    assert (command.name if command else None) == name


@given(st.text(max_size=40))
def test_any_text_is_a_declared_command_or_none(text):
    command = COMMANDS.parse(text)
    words = text.split()
    if command is None:
        assert not words or words[0].lower() not in COMMANDS.names()
    else:
        assert words[0].lower() == command.name


def test_help_lists_each_command_once_and_the_admins_ones_last():
    lines = COMMANDS.help_lines()
    assert lines == [
        "- `/plan <question>` answers with a plan.",
        "- `/stop` stops the reply in progress.",
        "- `/help` shows this message.",
        "- Admins: `/readonly on|off|status` switches writes.",
    ]
    text = texts.help_text(lines)
    assert text.startswith(texts.HELP_INTRO) and text.endswith(lines[-1])


@pytest.mark.parametrize("name", ["stop", "/Stop", "/stop now"])
def test_a_command_name_is_a_slash_and_lower_case(name):
    with pytest.raises(ValueError, match="lower-case"):
        ChatCommands([ChatCommand(name, name, "x", _noop)])


def test_a_command_is_declared_once():
    with pytest.raises(ValueError, match="declared twice"):
        ChatCommands([ChatCommand("/a", "/a", "x", _noop), ChatCommand("/a", "/a", "y", _noop)])

"""The turn's context (bot/turn_context.py): one typed, frozen object, read back from a
run by its class and never by its attribute names."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from bot.engine import RunContext
from bot.turn_context import TurnContext, current_turn, turn_of

from support.turns import look_alike, serving, turn_context


def test_a_run_whose_deps_are_a_turn_context_is_that_turn() -> None:
    turn = turn_context(joined=["ou_carol"])
    assert turn_of(RunContext("run-1", "q", turn)) is turn
    assert turn.askers().everyone == ("ou_fake_alice", "ou_carol")


@pytest.mark.parametrize(
    "deps",
    [
        None,
        object(),
        {"chat_id": "oc_1", "message_id": "om_1"},
        SimpleNamespace(chat_id="oc_1", message_id="om_1", sender_open_id="ou_fake_alice"),
        look_alike(turn_context()),
    ],
    ids=["none", "object", "dict", "some_fields", "look_alike"],
)
def test_deps_of_any_other_type_are_nobodys_turn(deps: object) -> None:
    """A look-alike has every field and method a reader uses; only the class counts."""
    assert turn_of(RunContext("run-1", "q", deps)) is None
    with serving(deps):
        assert current_turn() is None


def test_outside_a_run_there_is_no_turn() -> None:
    assert turn_of(None) is None
    assert current_turn() is None


def test_the_tool_call_in_progress_reads_its_turn() -> None:
    turn = turn_context(chat_id="oc_team", chat_type="group")
    with serving(turn):
        assert current_turn() is turn
    assert current_turn() is None


def test_a_turn_is_frozen() -> None:
    turn = turn_context()
    with pytest.raises(dataclasses.FrozenInstanceError):
        turn.chat_id = "oc_elsewhere"  # type: ignore[misc]


def test_its_joiners_are_read_as_of_now() -> None:
    joined: list[str] = []
    turn = TurnContext(
        run_id="run-1",
        conversation_id=None,
        scope_key="chat:oc_team",
        message_id="om_1",
        chat_id="oc_team",
        chat_type="group",
        sender_open_id="ou_bob",
        thread_id="",
        generation=0,
        joined_senders=lambda: tuple(joined),
    )
    assert turn.askers().sole == "ou_bob"
    joined.append("ou_carol")
    assert turn.askers().sole is None

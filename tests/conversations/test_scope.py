"""Scope keys: which messages share a conversation."""

from __future__ import annotations

import pytest

from bot.conversations import ScopeInput, scope_key


def message(chat_type="group", chat="oc_1", sender="ou_a", message_id="om_1", root=""):
    return ScopeInput(chat_type, chat, sender, message_id, root)


def test_a_direct_message_is_one_conversation_per_user_whatever_the_scope():
    for scope in ("chat", "chat_sender", "topic", "topic_sender"):
        assert scope_key(message("p2p", "oc_dm", "ou_a"), scope) == "dm:ou_a"


@pytest.mark.parametrize(
    ("scope", "same_for_other_sender", "same_for_other_topic"),
    [
        ("chat", True, True),
        ("chat_sender", False, True),
        ("topic", True, False),
        ("topic_sender", False, False),
    ],
)
def test_group_scopes(scope, same_for_other_sender, same_for_other_topic):
    base = scope_key(message(root="om_root"), scope)
    other_sender = scope_key(message(sender="ou_b", root="om_root"), scope)
    other_topic = scope_key(message(root="om_other"), scope)
    assert (base == other_sender) is same_for_other_sender
    assert (base == other_topic) is same_for_other_topic
    assert "oc_1" in base


def test_a_topic_starts_at_its_first_message_and_replies_join_it():
    starter = scope_key(message(message_id="om_start"), "topic")
    reply = scope_key(message(message_id="om_reply", root="om_start"), "topic")
    assert starter == reply

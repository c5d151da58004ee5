"""A saved run is trusted only under its seal: any change to what the database holds (the
payload, the seal, the columns that route it) is refused as an ``UnusableCheckpoint``,
never resumed and never another exception; a payload sealed right but malformed is
refused the same way."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.engine import Message, RunCheckpoint, ToolCall, Usage
from bot.feishu.card_writer import CardAnchor
from bot.runtime.turn.parking import (
    CheckpointSeal,
    JoinedMessage,
    ParkedTurn,
    UnusableCheckpoint,
    checkpoint_key,
    decode,
    encode,
)
from bot.store import StoredCheckpoint

SEAL = CheckpointSeal(checkpoint_key(b"k" * 32))


def _parked(arguments: dict[str, object] | None = None) -> ParkedTurn:
    call = ToolCall("c1", "deploy", arguments or {"service": "api"})
    messages = (
        Message.system("You are larkgate."),
        Message.user("deploy api", pinned=True, kind="query"),
        Message.assistant("", (call,)),
    )
    engine = RunCheckpoint(
        run_id="run1",
        query="deploy api",
        mode="native",
        streams=True,
        context=messages,
        transcript=messages,
        steps=(),
        usage=Usage(10, 2, 12),
        iterations=1,
        compactions=0,
        real_tool_calls=0,
        reflections=0,
        checklist_done=False,
        reformat_streak=0,
        empty_streak=0,
        cycle_counts={},
        last_cycle_counts={},
        pending_calls=(call,),
        settled=(),
        reason=None,
        tools=("deploy",),
    )
    return ParkedTurn(
        run_id="run1",
        message_id="om_1",
        scope_key="dm:ou_user",
        generation=1,
        conversation_id=None,
        chat_id="oc_dm",
        chat_type="p2p",
        sender_open_id="ou_user",
        thread_id="",
        remembered="deploy api",
        joined_before=(JoinedMessage("om_2", "ou_carol", "and the web"),),
        started_at=1000.0,
        model="m",
        card=CardAnchor("card1", "om_card", 7, True),
        engine=engine,
    )


def _stored(parked: ParkedTurn, seal: CheckpointSeal = SEAL) -> StoredCheckpoint:
    payload = encode(parked)
    return StoredCheckpoint(
        run_id=parked.run_id,
        message_id=parked.message_id,
        scope_key=parked.scope_key,
        generation=parked.generation,
        owner="p1",
        payload=payload,
        seal=seal.sign(
            run_id=parked.run_id,
            message_id=parked.message_id,
            scope_key=parked.scope_key,
            generation=parked.generation,
            payload=payload,
        ),
        created_at=1000.0,
        updated_at=1000.0,
    )


def test_a_sealed_checkpoint_reads_back_as_it_was_saved():
    parked = _parked()
    assert decode(_stored(parked), SEAL) == parked


def test_another_key_does_not_verify():
    other = CheckpointSeal(checkpoint_key(b"o" * 32))
    with pytest.raises(UnusableCheckpoint, match="did not verify"):
        decode(_stored(_parked()), other)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_change_in_the_database_is_refused(data):
    stored = _stored(_parked())
    field = data.draw(
        st.sampled_from(["payload", "seal", "run_id", "message_id", "scope_key", "generation"])
    )
    if field == "generation":
        changed = replace(stored, generation=data.draw(st.integers().filter(lambda g: g != 1)))
    else:
        original = getattr(stored, field)
        position = data.draw(st.integers(0, max(0, len(original) - 1)))
        insert = data.draw(st.text(min_size=1, max_size=8))
        value = original[:position] + insert + original[position + 1 :]
        if value == original:
            return
        changed = replace(stored, **{field: value})
    try:
        decode(changed, SEAL)
    except UnusableCheckpoint:
        return
    raise AssertionError(f"a checkpoint with its {field} changed was accepted")


@settings(max_examples=200)
@given(
    body=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_a_payload_sealed_right_but_malformed_is_refused_cleanly(body):
    """An attacker with the key is out of scope, but a bug that saves garbage must not
    crash the turn that takes the message over: it is refused with a reason."""
    payload = json.dumps(body)
    stored = replace(
        _stored(_parked()),
        payload=payload,
        seal=SEAL.sign(
            run_id="run1", message_id="om_1", scope_key="dm:ou_user", generation=1, payload=payload
        ),
    )
    try:
        decode(stored, SEAL)
    except UnusableCheckpoint:
        return
    raise AssertionError("a malformed payload was accepted")

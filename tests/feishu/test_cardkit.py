"""CardKit streaming cards: FeishuClient against the fake Feishu, through lark-oapi's builders."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.feishu import (
    FeishuCardInvalid,
    FeishuClient,
    FeishuEditWindowClosed,
    FeishuError,
    FeishuMessageGone,
    FeishuRateLimited,
    FeishuScopeMissing,
    FeishuSequenceError,
    FeishuStreamingClosed,
    FeishuTokenInvalid,
    FeishuTooLarge,
)

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config

CONTENT = r"/elements/[^/]+/content$"
SETTINGS = r"/cardkit/v1/cards/[^/]+/settings$"
CARD = r"/cardkit/v1/cards/\d+$"
REPLY = r"/reply$"


class Clock:
    """A clock the test moves by hand (the fake's card timings)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def streaming_card(
    text: str = "Thinking...", *, streaming: bool = True, summary: str = "[Generating...]"
) -> dict[str, Any]:
    return {
        "schema": "2.0",
        "config": {
            "update_multi": True,
            "streaming_mode": streaming,
            "summary": {"content": summary},
        },
        "header": {"title": {"tag": "plain_text", "content": "Agent"}},
        "body": {
            "elements": [
                {"tag": "markdown", "element_id": "answer", "content": text},
                {"tag": "hr", "element_id": "rule"},
            ]
        },
    }


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def fake(clock: Clock) -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu(clock=clock) as server:
        yield server


@pytest.fixture
async def client(fake: FakeFeishu) -> AsyncIterator[FeishuClient]:
    async with FeishuClient(feishu_config(fake), timeout=5.0) as feishu:
        yield feishu


async def new_card(client: FeishuClient, fake: FakeFeishu, **kwargs: Any) -> str:
    """A streaming card already sent as a reply to a user's message."""
    fake.add_message("om_user", chat_id="oc_42", chat_type="group")
    card_id = await client.create_card(streaming_card(**kwargs))
    await client.reply_card_entity("om_user", card_id)
    return card_id


# -- the whole flow ---------------------------------------------------------------------


async def test_streaming_flow_end_to_end(fake, client, clock):
    fake.add_message("om_user", chat_id="oc_42", chat_type="group")

    card_id = await client.create_card(streaming_card())
    sent = await client.reply_card_entity("om_user", card_id, uuid="r-1", reply_in_thread=True)
    texts = ["Hel", "Hello wor", "Hello world, 你好!"]
    for sequence, text in enumerate(texts, start=1):
        clock.now += 0.1
        await client.stream_element_content(card_id, "answer", text, sequence=sequence)
    done = {"config": {"streaming_mode": False, "summary": {"content": "Hello world"}}}
    await client.update_card_settings(card_id, done, sequence=4)
    assert fake.cards[card_id].summary == "Hello world"
    final = streaming_card("Hello world, 你好!\n\n*done*", streaming=False, summary="Done")
    await client.update_card(card_id, final, sequence=5, uuid="u-final")

    card = fake.cards[card_id]
    assert card_id.isdigit()
    assert card.message_id == sent.message_id
    assert fake.sent[-1].card_id == card_id
    assert fake.sent[-1].msg_type == "interactive"
    assert fake.sent[-1].content == {"type": "card", "data": {"card_id": card_id}}
    assert sent.chat_id == "oc_42" and sent.thread_id is not None
    assert fake.card_text(card_id, "answer") == "Hello world, 你好!\n\n*done*"
    assert card.last_sequence == 5
    assert card.streaming_mode is False
    assert card.summary == "Done"  # the full update replaced the config
    assert [op.op for op in card.timeline] == [
        "create",
        "send",
        "content",
        "content",
        "content",
        "settings",
        "update",
    ]
    streamed = [(op.sequence, op.text) for op in card.timeline if op.op == "content"]
    assert streamed == list(enumerate(texts, start=1))
    assert all(op.code == 0 for op in card.timeline)
    assert client.call_counts == {
        "auth.tenant_token": 1,
        "cardkit.card.create": 1,
        "im.message.reply": 1,
        "cardkit.element.content": 3,
        "cardkit.card.settings": 1,
        "cardkit.card.update": 1,
    }


async def test_wire_formats_match_the_sdk_builders(fake, client):
    card_id = await new_card(client, fake)
    await client.stream_element_content(card_id, "answer", "Hi", sequence=1, uuid="s-1")
    summary = {"config": {"streaming_mode": False, "summary": {"content": "Hi"}}}
    await client.update_card_settings(card_id, summary, sequence=2)
    assert fake.cards[card_id].summary == "Hi"
    await client.update_card(card_id, streaming_card("Hi", streaming=False), sequence=3)

    create, reply, content, settings, update = (
        r for r in fake.requests if "/cardkit/" in r.path or r.path.endswith("/reply")
    )
    assert (create.method, create.path) == ("POST", "/open-apis/cardkit/v1/cards")
    assert create.json["type"] == "card_json"
    assert json.loads(create.json["data"]) == streaming_card()
    assert json.loads(reply.json["content"]) == {"type": "card", "data": {"card_id": card_id}}
    assert reply.json["msg_type"] == "interactive"
    assert (content.method, content.path) == (
        "PUT",
        f"/open-apis/cardkit/v1/cards/{card_id}/elements/answer/content",
    )
    assert content.json == {"content": "Hi", "sequence": 1, "uuid": "s-1"}
    assert (settings.method, settings.path) == (
        "PATCH",
        f"/open-apis/cardkit/v1/cards/{card_id}/settings",
    )
    assert set(settings.json) == {"settings", "sequence"}  # no uuid when none is given
    assert json.loads(settings.json["settings"]) == summary
    assert (update.method, update.path) == ("PUT", f"/open-apis/cardkit/v1/cards/{card_id}")
    assert update.json["card"]["type"] == "card_json"
    assert json.loads(update.json["card"]["data"]) == streaming_card("Hi", streaming=False)
    assert update.json["sequence"] == 3
    assert fake.cards[card_id].settings_history == [summary]


async def test_bad_sequence_is_refused_before_any_call(fake, client):
    with pytest.raises(ValueError, match="outside"):
        await client.stream_element_content("1", "answer", "x", sequence=0)
    with pytest.raises(TypeError):
        await client.update_card_settings("1", {}, sequence=True)
    assert client.call_counts == {}


# -- sequence and streaming mode ----------------------------------------------------------


async def test_sequence_must_strictly_increase_across_all_ops(fake, client):
    card_id = await new_card(client, fake)
    await client.stream_element_content(card_id, "answer", "one", sequence=5)

    for stale in (5, 4):
        with pytest.raises(FeishuSequenceError) as caught:
            await client.stream_element_content(card_id, "answer", "stale", sequence=stale)
        assert caught.value.code == 300317
    with pytest.raises(FeishuSequenceError):
        await client.update_card_settings(card_id, {"config": {}}, sequence=5)
    await client.update_card_settings(
        card_id, {"config": {"summary": {"content": "s"}}}, sequence=6
    )
    with pytest.raises(FeishuSequenceError):
        await client.update_card(card_id, streaming_card(), sequence=6)

    assert fake.card_text(card_id, "answer") == "one"
    assert fake.cards[card_id].last_sequence == 6
    refused = [op.code for op in fake.cards[card_id].timeline if op.code]
    assert refused == [300317, 300317, 300317, 300317]


async def test_content_after_streaming_closed_raises(fake, client):
    card_id = await new_card(client, fake)
    await client.stream_element_content(card_id, "answer", "part", sequence=1)
    await client.update_card_settings(card_id, {"config": {"streaming_mode": False}}, sequence=2)

    with pytest.raises(FeishuStreamingClosed) as caught:
        await client.stream_element_content(card_id, "answer", "part two", sequence=3)
    assert caught.value.code == 300309

    # Re-enabling streaming through settings opens it again.
    await client.update_card_settings(card_id, {"config": {"streaming_mode": True}}, sequence=4)
    await client.stream_element_content(card_id, "answer", "part two", sequence=5)
    assert fake.card_text(card_id, "answer") == "part two"


async def test_settings_without_the_config_wrapper_do_nothing(fake, client):
    # openhanako #2335: a bare {"streaming_mode": ...} is accepted and ignored.
    card_id = await new_card(client, fake, streaming=False)
    await client.update_card_settings(card_id, {"streaming_mode": True}, sequence=1)

    assert fake.cards[card_id].streaming_mode is False
    with pytest.raises(FeishuStreamingClosed):
        await client.stream_element_content(card_id, "answer", "text", sequence=2)


async def test_streaming_times_out_after_ten_minutes(fake, client, clock):
    card_id = await new_card(client, fake)
    await client.stream_element_content(card_id, "answer", "early", sequence=1)
    clock.now += 600

    with pytest.raises(FeishuStreamingClosed) as caught:
        await client.stream_element_content(card_id, "answer", "late", sequence=2)
    assert caught.value.code == 200850
    with pytest.raises(FeishuStreamingClosed) as caught:
        await client.stream_element_content(card_id, "answer", "late", sequence=3)
    assert caught.value.code == 300309
    # Finishing with a full update still works.
    await client.update_card(card_id, streaming_card("late", streaming=False), sequence=4)
    assert fake.card_text(card_id, "answer") == "late"


async def test_update_card_replaces_config_and_elements(fake, client):
    card_id = await new_card(client, fake, streaming=False)
    await client.update_card(card_id, streaming_card("new"), sequence=1)

    assert fake.cards[card_id].streaming_mode is True
    await client.stream_element_content(card_id, "answer", "new text", sequence=2)
    assert fake.card_text(card_id, "answer") == "new text"


async def test_content_uuid_makes_a_resend_harmless(fake, client):
    card_id = await new_card(client, fake)
    await client.stream_element_content(card_id, "answer", "abc", sequence=1, uuid="c-1")
    await client.stream_element_content(card_id, "answer", "abc", sequence=1, uuid="c-1")

    with pytest.raises(FeishuError) as caught:
        await client.stream_element_content(card_id, "answer", "abd", sequence=1, uuid="c-1")
    assert caught.value.code == 200770
    ops = [op for op in fake.cards[card_id].timeline if op.op == "content"]
    assert [(op.duplicate, op.code) for op in ops] == [(False, 0), (True, 0), (False, 200770)]


async def test_element_and_card_checks(fake, client):
    card_id = await new_card(client, fake)
    cases = [
        (card_id, "nope", 300313),
        (card_id, "rule", 300310),  # an hr cannot take text
        ("7000000000000000000", "answer", 200740),
    ]
    for cid, element_id, code in cases:
        with pytest.raises(FeishuError) as caught:
            await client.stream_element_content(cid, element_id, "x", sequence=1)
        assert caught.value.code == code
    with pytest.raises(FeishuError) as caught:
        await client.stream_element_content(card_id, "answer", "", sequence=1)
    assert caught.value.code == 99992402
    assert fake.cards[card_id].last_sequence == 0


def padded(size: int) -> dict[str, Any]:
    card = streaming_card()
    card["body"]["elements"][0]["content"] = "x" * size
    return card


def many_elements(count: int) -> dict[str, Any]:
    card = streaming_card()
    card["body"]["elements"] = [{"tag": "markdown", "content": str(i)} for i in range(count)]
    return card


def duplicate_ids() -> dict[str, Any]:
    card = streaming_card()
    card["body"]["elements"][1]["element_id"] = "answer"
    return card


@pytest.mark.parametrize(
    ("card", "code"),
    [
        ({**streaming_card(), "schema": "1.0"}, 300303),
        (duplicate_ids(), 300301),
        (padded(31 * 1024), 200860),
        (many_elements(201), 300305),
        ({}, 300307),
        ({**streaming_card(), "config": {"update_multi": False}}, 300302),
    ],
)
async def test_create_validates_the_card(fake, client, card, code):
    with pytest.raises(FeishuError) as caught:
        await client.create_card(card)
    assert caught.value.code == code
    assert fake.cards == {}


async def test_create_accepts_a_card_at_the_limits(fake, client):
    card_id = await client.create_card(many_elements(200))
    assert len(fake.cards[card_id].card["body"]["elements"]) == 200


# -- sending the entity -----------------------------------------------------------------


async def test_a_card_entity_can_be_sent_only_once(fake, client):
    fake.add_message("om_user", chat_id="oc_42")
    card_id = await client.create_card(streaming_card())
    first = await client.reply_card_entity("om_user", card_id, uuid="r-1")

    # A resend with the same uuid is the same message, not a second send.
    assert await client.reply_card_entity("om_user", card_id, uuid="r-1") == first
    with pytest.raises(FeishuCardInvalid) as caught:
        await client.reply_card_entity("om_user", card_id)
    assert caught.value.code == 230099
    content = json.dumps({"type": "card", "data": {"card_id": card_id}})
    with pytest.raises(FeishuCardInvalid):
        await client.send_message("chat_id", "oc_42", msg_type="interactive", content=content)
    with pytest.raises(FeishuCardInvalid):
        await client.reply_card_entity("om_user", "7000000000000000000")

    assert [m.card_id for m in fake.sent] == [card_id]
    assert fake.cards[card_id].message_id == first.message_id


async def test_send_message_can_carry_a_card_entity(fake, client):
    card_id = await client.create_card(streaming_card())
    content = json.dumps({"type": "card", "data": {"card_id": card_id}})
    sent = await client.send_message("chat_id", "oc_7", msg_type="interactive", content=content)
    assert fake.cards[card_id].message_id == sent.message_id
    assert fake.message_by_id[sent.message_id].card_id == card_id


# -- rate limit ---------------------------------------------------------------------------


async def test_eleventh_op_within_a_second_is_rate_limited(fake, client, clock):
    card_id = await new_card(client, fake)
    step = 1 / 16  # exact in binary: no float fuzz at the window's edge
    for sequence in range(1, 11):
        clock.now += step
        await client.stream_element_content(card_id, "answer", "x" * sequence, sequence=sequence)

    clock.now += step
    with pytest.raises(FeishuRateLimited) as caught:
        await client.stream_element_content(card_id, "answer", "x" * 11, sequence=11)
    assert caught.value.code == 230020 and caught.value.retryable
    # Settings count too, and the refused op left the sequence alone.
    with pytest.raises(FeishuRateLimited):
        await client.update_card_settings(card_id, {"config": {}}, sequence=11)
    assert fake.cards[card_id].last_sequence == 10
    assert [op.op for op in fake.rate_limited] == ["content", "settings"]
    assert fake.max_ops_per_second(card_id) == 12

    clock.now += 6 * step  # the first op has left the window (refused ones do not count)
    await client.stream_element_content(card_id, "answer", "x" * 11, sequence=11)
    assert fake.card_text(card_id, "answer") == "x" * 11


async def test_ten_ops_a_second_are_fine(fake, client, clock):
    card_id = await new_card(client, fake)
    for sequence in range(1, 31):
        clock.now += 0.1
        await client.stream_element_content(card_id, "answer", "y" * sequence, sequence=sequence)
    assert fake.max_ops_per_second(card_id) == 10
    assert fake.rate_limited == []


async def test_rate_limit_is_per_card_and_configurable(fake, client):
    fake.card_ops_limit = 2
    first = await new_card(client, fake)
    second = await client.create_card(streaming_card())
    await client.stream_element_content(first, "answer", "a", sequence=1)
    await client.stream_element_content(first, "answer", "ab", sequence=2)
    await client.stream_element_content(second, "answer", "a", sequence=1)
    with pytest.raises(FeishuRateLimited):
        await client.stream_element_content(first, "answer", "abc", sequence=3)


# -- injected faults and the error mapping -------------------------------------------------

INJECTED = [
    ("POST", REPLY, 230011, FeishuMessageGone, "reply"),
    ("PATCH", r"/im/v1/messages/[^/]+$", 230031, FeishuEditWindowClosed, "patch"),
    ("POST", REPLY, 230099, FeishuCardInvalid, "reply"),
    ("POST", REPLY, 11310, FeishuCardInvalid, "reply"),
    ("PUT", CARD, 230025, FeishuTooLarge, "update"),
    ("POST", r"/cardkit/v1/cards$", 99991672, FeishuScopeMissing, "create"),
    ("PUT", CONTENT, 230020, FeishuRateLimited, "content"),
    ("PUT", CONTENT, 300317, FeishuSequenceError, "content"),
    ("PATCH", SETTINGS, 300309, FeishuStreamingClosed, "settings"),
]


@pytest.mark.parametrize(("method", "path", "code", "expected", "call"), INJECTED)
async def test_injected_errors_map_to_exceptions(fake, client, method, path, code, expected, call):
    fake.add_message("om_user", chat_id="oc_42")
    card_id = await client.create_card(streaming_card())
    patchable = await client.send_message(
        "chat_id", "oc_42", msg_type="interactive", content=json.dumps(streaming_card())
    )
    calls = {
        "reply": lambda: client.reply_card_entity("om_user", card_id),
        "patch": lambda: client.patch_message(patchable.message_id, json.dumps(streaming_card())),
        "update": lambda: client.update_card(card_id, streaming_card(), sequence=1),
        "create": lambda: client.create_card(streaming_card()),
        "content": lambda: client.stream_element_content(card_id, "answer", "x", sequence=1),
        "settings": lambda: client.update_card_settings(card_id, {"config": {}}, sequence=1),
    }
    fake.fail(method, path, code)

    with pytest.raises(FeishuError) as caught:
        await calls[call]()

    assert type(caught.value) is expected
    assert caught.value.code == code
    assert client.error_counts[(caught.value.endpoint, code)] == 1
    if code == 99991672:
        assert caught.value.scopes  # the admin is told which scope to grant
    # An injected fault never reaches the card, and the same call then succeeds.
    assert fake.cards[card_id].last_sequence == 0
    await calls[call]()


async def test_im_patch_refuses_old_messages(fake, client):
    card = json.dumps(streaming_card())
    fake.add_message(
        "om_old", chat_id="oc_42", msg_type="interactive", content={}, create_time_ms=0
    )
    with pytest.raises(FeishuEditWindowClosed):
        await client.patch_message("om_old", card)


async def test_token_error_refreshes_once_then_retries(fake, client):
    card_id = await new_card(client, fake)
    fake.fail("PUT", CONTENT, 99991663)

    await client.stream_element_content(card_id, "answer", "after refresh", sequence=1)

    assert fake.card_text(card_id, "answer") == "after refresh"
    assert fake.token_requests == 2
    assert client.call_counts["cardkit.element.content"] == 2
    assert client.error_counts[("cardkit.element.content", 99991663)] == 1

    fake.fail("PATCH", SETTINGS, 99991663, times=2)
    with pytest.raises(FeishuTokenInvalid):
        await client.update_card_settings(card_id, {"config": {}}, sequence=2)
    assert client.call_counts["cardkit.card.settings"] == 2
    assert fake.token_requests == 3

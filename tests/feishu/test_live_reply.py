"""LiveReply against the fake Feishu: exact text, sequences, rate limits, every error code."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from pathlib import Path

import pytest

from bot.feishu.card_writer import LiveReply, split_point
from bot.feishu.client import FeishuClient
from bot.feishu.live_card import StepLine

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config
from support.waiting import wait_until


@pytest.fixture
async def fake():
    async with FakeFeishu() as server:
        yield server


@pytest.fixture
async def client(fake):
    async with FeishuClient(feishu_config(fake, encrypt_key="")) as c:
        yield c


def live(client, message_id="om_q", **kwargs) -> LiveReply:
    kwargs.setdefault("cadence", 0.1)
    return LiveReply(client, message_id=message_id, in_thread=False, uuid_seed=message_id, **kwargs)


async def stream(reply: LiveReply, text: str, *, pieces: int = 20, pause: float = 0.01) -> None:
    size = max(1, len(text) // pieces)
    for i in range(0, len(text), size):
        first = not reply.view.answer
        reply.view.answer += text[i : i + size]
        reply.touch(urgent=first)
        await asyncio.sleep(pause)


def cards_of(fake, message_id="om_q"):
    ids = [m.card_id for m in fake.sent if m.reply_to == message_id and m.card_id]
    return [fake.cards[i] for i in ids]


def shown_answer(fake, message_id="om_q") -> str:
    return "".join(card.element("answer")["content"] for card in cards_of(fake, message_id))


def assert_sequences_increase(card) -> None:
    sequences = [op.sequence for op in card.timeline if op.sequence is not None and op.code == 0]
    assert sequences == sorted(set(sequences)), sequences


@pytest.mark.parametrize(
    "answer",
    [
        "Short answer.",
        "中文回答：今天天气很好，适合出去散步。" * 20,
        "Here is code:\n\n```python\nfor i in range(3):\n    print(i)\n```\n\n"
        "And a list:\n- a\n- b",
    ],
    ids=["short", "cjk", "code"],
)
async def test_the_final_card_shows_exactly_the_answer(fake, client, answer):
    reply = live(client)
    await stream(reply, answer)
    outcome = await reply.finish("3 steps · 120 tokens · 2.0 s")
    (card,) = cards_of(fake)
    assert card.element("answer")["content"] == answer
    assert card.element("footer")["content"] == "3 steps · 120 tokens · 2.0 s"
    assert card.streaming_mode is False
    assert_sequences_increase(card)
    assert fake.max_ops_per_second(card.card_id) <= 10
    assert outcome.mode == "cardkit"
    assert outcome.calls == len([r for r in fake.requests if "/open-apis/auth" not in r.path])
    assert fake.sent[0].reply_to == "om_q"


async def test_long_answers_continue_in_new_cards_without_losing_text(fake, client):
    answer = "\n\n".join(f"Paragraph {i}: " + "lorem ipsum " * 30 for i in range(30))
    reply = live(client, element_chars=3000)
    await stream(reply, answer, pieces=40, pause=0.005)
    await reply.finish("footer")
    cards = cards_of(fake)
    assert len(cards) >= 3
    assert shown_answer(fake) == answer
    for card in cards:
        assert card.streaming_mode is False
        assert len(card.element("answer")["content"]) <= 3000
        assert_sequences_increase(card)
    assert cards[-1].element("footer")["content"] == "footer"
    assert cards[1].summary == "(continued)"


async def test_steps_are_shown_with_their_state(fake, client):
    reply = live(client)
    reply.view.steps.append(StepLine("c1", "sql_query", '{"q": "select 1"}'))
    reply.touch()
    (card,) = await wait_until(lambda: cards_of(fake))  # the card is out, with its steps
    assert "⏳ `sql_query`" in card.element("steps")["content"]
    assert card.element("answer")["content"] == "_Working on it…_"
    reply.view.steps[0].state = "ok"
    reply.view.steps[0].result = "1 row"
    reply.view.steps.append(StepLine("c2", "http_post", "{}", state="blocked", result="read-only"))
    reply.touch()
    await stream(reply, "Done.")
    await reply.finish()
    steps = card.element("steps")["content"]
    assert "✅ `sql_query`" in steps and "1 row" in steps
    assert "⛔ `http_post`" in steps and "blocked" in steps
    assert card.element("answer")["content"] == "Done."


async def test_a_fast_stream_never_exceeds_ten_operations_a_second(fake, client):
    reply = live(client, cadence=0.1)
    reply.view.steps.append(StepLine("c1", "t", "{}"))
    for i in range(300):
        reply.view.answer += f"w{i} "
        reply.view.steps[0].result = str(i)
        reply.touch()
        await asyncio.sleep(0.005)
    await reply.finish()
    (card,) = cards_of(fake)
    assert fake.max_ops_per_second(card.card_id) <= 10
    assert fake.rate_limited == []
    assert card.element("answer")["content"] == reply.view.answer


async def test_rate_limited_frames_are_skipped_and_the_text_still_arrives(fake, client):
    fake.fail("PUT", r"/elements/answer/content$", 230020, times=3)
    reply = live(client)
    await stream(reply, "A" * 50 + " then " + "B" * 50)
    await reply.finish()
    assert shown_answer(fake) == "A" * 50 + " then " + "B" * 50


async def test_a_sequence_conflict_is_resynced(fake, client):
    reply = live(client)
    await stream(reply, "first part ", pieces=2)
    fake.fail("PUT", r"/elements/answer/content$", 300317, times=1)
    await stream(reply, "second part", pieces=2)
    await reply.finish()
    (card,) = cards_of(fake)
    assert card.element("answer")["content"] == "first part second part"
    assert_sequences_increase(card)


@pytest.mark.parametrize("code", [300309, 230031])
async def test_a_card_that_cannot_be_edited_any_more_is_continued_below(fake, client, code):
    reply = live(client)
    await stream(reply, "shown before the card closed. ", pieces=2)
    fake.fail("*", r"/cardkit/v1/cards/[^/]+(/elements/answer/content)?$", code, times=1)
    await stream(reply, "and the rest of it.", pieces=2)
    await reply.finish("footer")
    assert len(cards_of(fake)) == 2
    assert shown_answer(fake) == "shown before the card closed. and the rest of it."
    assert cards_of(fake)[-1].streaming_mode is False


async def test_a_recalled_message_stops_the_reply(fake, client):
    reply = live(client)
    await stream(reply, "starting", pieces=1)
    fake.fail("PUT", r"/content$", 230011, times=None)
    fake.fail("PUT", r"/cardkit/v1/cards/[^/]+$", 230011, times=None)
    await stream(reply, " more text", pieces=1)
    outcome = await reply.finish()
    assert outcome.mode == "gone"
    calls = outcome.calls
    reply.view.answer += "ignored"
    assert calls == outcome.calls


@pytest.mark.parametrize("code", [230099, 11310, 230025])
async def test_a_refused_card_is_degraded(fake, client, code):
    table = "| a | b |\n|---|---|\n| 1 | 2 |\n"
    answer = "Results:\n\n" + table * 2
    reply = live(client)
    await stream(reply, answer, pieces=3)
    fake.fail("PUT", r"/cardkit/v1/cards/[^/]+$", code, times=1)
    await reply.finish()
    text = "".join(m.content for m in []) or shown_answer(fake)
    assert "| 1 | 2 |" in text


async def test_without_cardkit_the_card_is_patched_then_plain(fake, client):
    scope_error = "Access denied. One of the following scopes is required: [cardkit:card:write]"
    fake.fail("POST", r"/cardkit/v1/cards$", 99991672, times=None, msg=scope_error)
    reply = live(client, patch_gap=0.2)
    await stream(reply, "Answer via patches, " * 5, pieces=10, pause=0.05)
    outcome = await reply.finish("footer")
    assert outcome.mode == "patch"
    (message,) = [m for m in fake.sent if m.reply_to == "om_q"]
    assert message.msg_type == "interactive"
    body = message.content["body"]["elements"]
    assert body[0]["content"] == "Answer via patches, " * 5
    patches = [r.time for r in fake.requests if r.method == "PATCH"]
    assert all(b - a >= 0.19 for a, b in itertools.pairwise(patches))

    fake.fail("PATCH", r"/im/v1/messages/", 230099, times=None)
    reply = live(client, message_id="om_q2", patch_gap=0.2)
    await stream(reply, "Plain in the end.", pieces=2, pause=0.3)
    outcome = await reply.finish()
    assert outcome.mode == "plain"
    shown = "".join(
        element["content"]
        for message in fake.sent
        if message.reply_to == "om_q2"
        for element in message.content["body"]["elements"]
        if element["element_id"] == "answer" or element["element_id"].startswith("part_")
    )
    # The plain continuation is a new message, so whitespace at the seam may go.
    assert "".join(shown.replace("_Working on it…_", "").split()) == "Plainintheend."


def test_split_point_prefers_paragraphs_outside_code():
    text = "intro line\n\n```\n" + "code\n" * 50 + "```\nafter"
    cut = split_point(text, 100)
    assert text[:cut].endswith("\n\n")
    assert split_point("x" * 500, 100) == 100


async def paced(reply: LiveReply, text: str, chars_per_second: float, chunk: int = 4) -> None:
    """Feed ``text`` at a steady rate, as a model streams it."""
    for i in range(0, len(text), chunk):
        first = not reply.view.answer
        reply.view.answer += text[i : i + chunk]
        reply.touch(urgent=first)
        await asyncio.sleep(chunk / chars_per_second)


def typewriter_of(card) -> dict:
    config = json.loads(next(op.text for op in card.timeline if op.op == "create"))["config"]
    return config["streaming_config"]


async def test_updates_come_about_once_a_second_after_a_quick_start(fake, client):
    reply = live(client, cadence=1.0)
    await paced(reply, "word " * 240, chars_per_second=400)  # 1,200 characters in 3 s
    await reply.finish()
    (card,) = cards_of(fake)
    times = [op.time for op in card.timeline if op.op in ("create", "content") and op.code == 0]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # 0.25 s, 0.5 s, then a second: the first text at once, a few updates in all.
    assert 3 <= len(times) <= 6, gaps
    assert gaps[0] < 0.45 and all(gap > 0.2 for gap in gaps)
    assert shown_answer(fake) == "word " * 240


async def test_the_typewriter_is_paced_to_the_measured_rate_once(fake, client):
    reply = live(client, cadence=0.5)
    await paced(reply, "slow text " * 30, chars_per_second=40)  # far below the default pace
    await reply.finish()
    (card,) = cards_of(fake)
    created = typewriter_of(card)
    assert created["print_strategy"] == "fast"
    settings = [json.loads(op.text) for op in card.timeline if op.op == "settings" and op.code == 0]
    retuned = [
        s["config"]["streaming_config"]
        for s in settings
        if "streaming_config" in s.get("config", {})
    ]
    assert len(retuned) == 1  # measured once, re-paced once
    pace = retuned[0]["print_step"]["default"] * 1000 / retuned[0]["print_frequency_ms"]["default"]
    assert 30 <= pace <= 90  # about the answer's 40 characters a second, a little faster
    assert shown_answer(fake) == "slow text " * 30


async def test_a_4000_character_answer_fits_one_card(fake, client):
    answer = ("A line of the answer, about fifty characters long.\n" * 80)[:4000]
    reply = live(client)
    await stream(reply, answer, pieces=10, pause=0.01)
    await reply.finish()
    (card,) = cards_of(fake)
    assert card.element("answer")["content"] == answer


async def test_economy_modes_send_one_finished_reply_or_text_and_lose_nothing(fake, client):
    finished = live(client, "om_a", streaming=False, note="economy mode")
    await stream(finished, "A short answer.")
    outcome = await finished.finish("1 step")
    assert outcome.calls == 1 and fake.cards == {}
    (card,) = [m for m in fake.sent if m.reply_to == "om_a"]
    assert card.msg_type == "interactive" and "economy mode" in json.dumps(card.content)

    answer = "\n".join(f"line {i}: " + "x" * 60 for i in range(700))  # about 48,000 characters
    text = live(client, "om_b", text_only=True)
    await stream(text, answer, pieces=5)
    await text.finish("footer")
    parts = [m for m in fake.sent if m.reply_to == "om_b"]
    assert len(parts) == 3 and all(m.msg_type == "text" for m in parts)
    assert "".join(m.content["text"] for m in parts) == answer + "\n\n— footer"


# -- posted at once (open_now) ------------------------------------------------------------


def api_calls(fake) -> int:
    return len([r for r in fake.requests if "/open-apis/auth" not in r.path])


async def test_a_card_posted_at_once_says_thinking_until_the_answer_replaces_it(fake, client):
    reply = live(client)
    reply.open_now()
    (card,) = await wait_until(lambda: [c for c in cards_of(fake) if c.message_id])
    assert card.element("answer")["content"] == "_Thinking…_" and card.streaming_mode
    assert card.element("steps") is None and card.summary == "Thinking…"
    await stream(reply, "The capital of France is Paris.")
    outcome = await reply.finish("1 step")
    assert card.element("answer")["content"] == "The capital of France is Paris."
    assert card.element("steps") is None and card.streaming_mode is False
    assert_sequences_increase(card)
    # What the status costs: the answer's first text is a content update instead of
    # going into the card's creation; creating and sending the card cost the same.
    kinds = [op.op for op in card.timeline if op.code == 0]
    assert kinds[:3] == ["create", "send", "content"] and kinds[-1] == "update"
    assert outcome.calls == api_calls(fake) == len(kinds)


async def test_the_first_steps_join_a_card_posted_at_once_in_one_update(fake, client):
    reply = live(client)
    reply.open_now()
    (card,) = await wait_until(lambda: [c for c in cards_of(fake) if c.message_id])
    reply.view.steps.append(StepLine("c1", "weather", '{"city": "Paris"}'))
    reply.touch(urgent=True)
    await wait_until(lambda: card.element("steps") is not None)
    grown = card.timeline[-1]
    assert grown.op == "update" and card.streaming_mode  # still streaming after it
    assert "⏳ `weather`" in card.element("steps")["content"]
    assert card.element("answer")["content"] == "_Working on it…_"
    reply.view.steps[0].state, reply.view.steps[0].result = "ok", "sunny"
    await stream(reply, "Sunny in Paris.")
    await reply.finish()
    assert "✅ `weather`" in card.element("steps")["content"]
    assert card.element("answer")["content"] == "Sunny in Paris."
    assert card.streaming_mode is False
    assert_sequences_increase(card)


async def test_an_answer_finished_before_the_card_is_out_costs_one_call(fake, client):
    reply = live(client)
    reply.open_now()
    reply.view.answer = "Quick."
    outcome = await reply.finish()  # before the card's creation got a turn
    assert outcome.calls == 1 and fake.cards == {}
    assert "Quick." in json.dumps(fake.sent[0].content, ensure_ascii=False)


async def test_without_a_live_card_nothing_is_posted_at_once(fake, client):
    reply = live(client, streaming=False)
    reply.open_now()
    assert not reply.opened
    reply.view.answer = "An answer."
    outcome = await reply.finish()
    assert outcome.calls == 1 and fake.cards == {}


async def test_a_later_attempt_at_a_message_shows_its_own_card(fake, client):
    """A takeover (another process, after a crash) answers the same message: its card is a
    new card entity and must not be taken by Feishu for a resend of the first one's."""
    first = live(client)
    first.open_now()
    await wait_until(lambda: [c for c in cards_of(fake) if c.message_id])
    again = live(client)  # same message, same uuid seed
    again.open_now()
    await stream(again, "The answer.")
    await again.finish()
    shown = cards_of(fake)
    assert len(shown) == 2 and shown[1].element("answer")["content"] == "The answer."


STATUS_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "status_cards"
UPDATE_GOLDEN = os.environ.get("LARKGATE_UPDATE_GOLDEN") == "1"


def golden(name: str, card_json: str) -> None:
    """``card_json`` (as sent) equals ``status_cards/<name>.json``; LARKGATE_UPDATE_GOLDEN=1
    rewrites it, for a deliberate change (review the diff)."""
    card = json.loads(card_json)
    path = STATUS_FIXTURES / f"{name}.json"
    if UPDATE_GOLDEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(card, ensure_ascii=False, indent=2) + "\n")
    assert card == json.loads(path.read_text())


async def test_the_cards_posted_at_once_are_the_golden_ones(fake, client):
    """What goes over the wire: the card created at once, and the update that puts the
    first step above its status."""
    reply = live(client)
    reply.open_now()
    (card,) = await wait_until(lambda: [c for c in cards_of(fake) if c.message_id])
    golden("posted", card.timeline[0].text)
    reply.view.steps.append(StepLine("c1", "weather", '{"city": "Paris"}'))
    reply.touch(urgent=True)
    await wait_until(lambda: card.element("steps") is not None)
    golden("with_steps", card.timeline[-1].text)
    await reply.finish()


async def test_answer_text_taken_back_leaves_the_status_line_again(fake, client):
    """A note the model wrote before deciding to call tools is not the answer: once the
    view drops it, the card says "Thinking…" again rather than keep showing it."""
    reply = live(client)
    reply.open_now()
    (card,) = await wait_until(lambda: [c for c in cards_of(fake) if c.message_id])
    reply.view.answer = "Let me look that up."
    reply.touch(urgent=True)
    await wait_until(lambda: card.element("answer")["content"] == "Let me look that up.")
    reply.view.answer = ""
    reply.touch(urgent=True)
    await wait_until(lambda: card.element("answer")["content"] == "_Thinking…_")
    await stream(reply, "Paris.")
    await reply.finish()
    assert card.element("answer")["content"] == "Paris." and card.streaming_mode is False

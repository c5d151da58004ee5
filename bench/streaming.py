"""Streaming answers into Feishu cards: API calls, update rate and visible delays.

    python -m bench.streaming [--conversations 20] [--chars 4000] [--tokens-per-second 50]
                              [--first-token-after 1.0]

Each conversation streams a ``--chars`` answer from a fake LLM (4-character tokens at
``--tokens-per-second``, the first one ``--first-token-after`` seconds after it was
asked, as a hosted model takes) through the real path: the card posted at once as a turn
posts it (``LiveAnswer.show_at_once``), ``ReActAgent.stream_answer`` → the live-card
bridge → ``LiveReply`` → ``FeishuClient`` (lark-oapi builders, pooled HTTP) → the fake
Feishu server on loopback, which records every card operation with its time. Reported:
API calls per answer (and by kind), the most operations any card saw within one second,
the delay from the question to the card in the chat, from the first token to the first
visible answer text and from the last token to the final text (median and p99 over the
conversations), the longest visible stall while tokens flow, and whether the text shown
at the end equals the answer.

The stall is read off a model of the Feishu client's typewriter, driven by what the
cards were sent: a card shows its text once it is sent in the chat; each content update
sets a new target that the client types towards, ``print_step`` characters every
``print_frequency_ms`` (the card's ``streaming_config``, also as changed later through
its settings); with ``print_strategy`` "fast", text still untyped when the next update
arrives is shown at once. A stall is the longest time between two changes of what the
answer shows, from the first token until the final text.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the fakes the tests use

from bot.config import FeishuConfig  # noqa: E402
from bot.engine import AgentResult, LLMResponse, ReActAgent, StreamDelta, Usage  # noqa: E402
from bot.feishu.card_writer import LiveReply  # noqa: E402
from bot.feishu.client import FeishuClient  # noqa: E402
from bot.feishu.live_card import THINKING  # noqa: E402
from bot.runtime.turn.live import LiveAnswer  # noqa: E402

from fakes.feishu_server import FakeFeishu  # noqa: E402

TOKEN_CHARS = 4
TARGET_OPS_PER_SECOND = 10
TARGET_SHOWN_MS = 1000  # the question to the card in the chat, however slow the model
TARGET_FIRST_MS = 250
TARGET_FINAL_MS = 500
TARGET_CALLS = 25
TARGET_STALL_MS = 1500


class PacedLLM:
    """A fake model that streams a fixed answer at a fixed token rate."""

    model = "paced"
    abilities: Mapping[str, bool] = MappingProxyType(
        {"tool_call": True, "json_mode": True, "streaming": True}
    )

    def __init__(self, answer: str, tokens_per_second: float, first_token_after: float) -> None:
        self.answer = answer
        self.interval = 1 / tokens_per_second
        self.first_token_after = first_token_after
        self.first_token_at = 0.0
        self.last_token_at = 0.0

    async def chat(self, messages: Sequence[Any], **kwargs: Any) -> LLMResponse:
        return LLMResponse(content="draft")

    async def stream_chat(self, messages: Sequence[Any], **kwargs: Any) -> AsyncIterator[Any]:
        await asyncio.sleep(self.first_token_after)
        start = time.monotonic()
        for index in range(0, len(self.answer), TOKEN_CHARS):
            # Paced against the clock, so a busy loop does not slow the model down.
            delay = start + (index // TOKEN_CHARS) * self.interval - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.monotonic()
            if index == 0:
                self.first_token_at = now
            self.last_token_at = now
            yield StreamDelta(content=self.answer[index : index + TOKEN_CHARS])
        yield StreamDelta(usage=Usage(100, len(self.answer) // TOKEN_CHARS), finish_reason="stop")


@dataclass
class Conversation:
    message_id: str
    llm: PacedLLM
    calls: int = 0
    asked_at: float = 0.0


def make_answer(chars: int, seed: int) -> str:
    lines = []
    size = 0
    i = 0
    while size < chars:
        line = f"- Step {seed}.{i}: the service `api-{i % 7}` answered in {i * 3 % 97} ms."
        if i % 12 == 0:
            line = f"\n## Part {i // 12}\n"
        lines.append(line)
        size += len(line) + 1
        i += 1
    return "\n".join(lines)[:chars]


async def converse(client: FeishuClient, conversation: Conversation) -> None:
    agent = ReActAgent(conversation.llm, [])
    result = AgentResult(
        answer="draft", messages=[], iterations=1, steps=[], usage=Usage(), elapsed=0.0
    )
    reply = LiveReply(
        client,
        message_id=conversation.message_id,
        in_thread=False,
        uuid_seed=conversation.message_id,
    )
    live = LiveAnswer(reply)
    conversation.asked_at = time.monotonic()
    live.show_at_once()  # as a turn does, before the model says anything
    async for delta in agent.stream_answer("question", result):
        live.add_answer(delta)
    outcome = await reply.finish("1 step · 250 tokens · 20.0 s")
    conversation.calls = outcome.calls


@dataclass
class Pace:
    frequency_ms: float
    step: int
    fast: bool


def _pace(config: Mapping[str, Any], pace: Pace) -> Pace:
    streaming = config.get("streaming_config")
    if not isinstance(streaming, Mapping):
        return pace
    frequency = streaming.get("print_frequency_ms", {}).get("default", pace.frequency_ms)
    step = streaming.get("print_step", {}).get("default", pace.step)
    return Pace(float(frequency), int(step), streaming.get("print_strategy", "fast") == "fast")


def display_changes(card: Any) -> list[float]:
    """When the answer shown by ``card`` changed, as the client's typewriter would type it."""
    pace = Pace(70.0, 1, True)  # Feishu's defaults
    changes: list[float] = []
    shown = target = 0
    visible = False
    typing_from = 0.0
    ops = [op for op in card.timeline if op.code == 0]

    def type_until(until: float) -> None:
        nonlocal shown
        frame = typing_from + pace.frequency_ms / 1000
        while shown < target and frame <= until:
            shown = min(target, shown + pace.step)
            changes.append(frame)
            frame += pace.frequency_ms / 1000

    for op in ops:
        if visible:
            type_until(op.time)
        if op.op == "create":
            data = json.loads(op.text)
            pace = _pace(data.get("config", {}), pace)
            target = shown = len(_answer_of(data))
        elif op.op == "send":
            visible = True
            changes.append(op.time)
        elif op.op == "settings":
            pace = _pace(json.loads(op.text).get("config", {}), pace)
        elif op.op == "content" and op.element_id == "answer":
            if pace.fast and shown < target:
                shown = target
                changes.append(op.time)
            target = len(op.text or "")
        elif op.op == "update":
            shown = target = len(op.text or "")
            changes.append(op.time)
        typing_from = op.time
    return changes


def first_text_at(ops: Sequence[Any]) -> float:
    """When the answer's first text was in the chat: its first content update, or the
    sending of a card created with it (not with the status line)."""
    created_with_text = False
    for op in ops:
        if op.op == "create":
            created_with_text = _answer_of(json.loads(op.text)) != THINKING
        sent_with_text = op.op == "send" and created_with_text
        if sent_with_text or (op.op == "content" and op.element_id == "answer"):
            return float(op.time)
    raise ValueError("no answer text was ever shown")


def _answer_of(card: Mapping[str, Any]) -> str:
    for element in card.get("body", {}).get("elements", []):
        if element.get("element_id") == "answer":
            return str(element.get("content", ""))
    return ""


def longest_stall(changes: list[float], begin: float, end: float) -> float:
    points = sorted(t for t in changes if begin <= t <= end)
    if not points:
        return end - begin
    edges = [begin, *points]
    return max(b - a for a, b in itertools.pairwise(edges))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(args: argparse.Namespace) -> int:
    async with FakeFeishu() as fake:
        config = FeishuConfig(
            app_id=fake.app_id,
            app_secret=fake.app_secret,
            verification_token="",
            encrypt_key="",
            domain=fake.domain,
        )
        async with FeishuClient(config) as client:
            conversations = [
                Conversation(
                    f"om_stream_{i}",
                    PacedLLM(make_answer(args.chars, i), args.tps, args.first_token_after),
                )
                for i in range(args.conversations)
            ]
            started = time.monotonic()
            await asyncio.gather(*(converse(client, c) for c in conversations))
            elapsed = time.monotonic() - started
        return report(args, fake, conversations, elapsed)


def report(
    args: argparse.Namespace, fake: FakeFeishu, conversations: list[Conversation], elapsed: float
) -> int:
    shown_ms, first_ms, final_ms, exact = [], [], [], 0
    max_ops = 0
    stalls: list[float] = []
    kinds: Counter[str] = Counter()
    for conversation in conversations:
        messages = [m for m in fake.sent if m.reply_to == conversation.message_id]
        cards = [fake.cards[m.card_id] for m in messages if m.card_id]
        ops = sorted(
            (op for card in cards for op in card.timeline if op.code == 0), key=lambda o: o.time
        )
        sent = [op.time for op in ops if op.op == "send"]
        final = [op.time for op in ops if op.op == "update"]
        kinds.update(op.op for op in ops)
        shown_ms.append((sent[0] - conversation.asked_at) * 1000)
        first_ms.append((first_text_at(ops) - conversation.llm.first_token_at) * 1000)
        final_ms.append((final[-1] - conversation.llm.last_token_at) * 1000)
        changes = [t for card in cards for t in display_changes(card)]
        stalls.append(longest_stall(changes, conversation.llm.first_token_at, final[-1]) * 1000)
        shown = "".join(card.element("answer")["content"] for card in cards)
        exact += shown == conversation.llm.answer
        max_ops = max([max_ops, *(fake.max_ops_per_second(c.card_id) for c in cards)])
    calls = [c.calls for c in conversations]
    print(
        f"streaming benchmark: {args.conversations} conversations, {args.chars}-character answers "
        f"at {args.tps:g} tokens/s ({TOKEN_CHARS} characters a token), {elapsed:.1f} s"
    )
    print(f"  API calls per answer      median {statistics.median(calls):.0f}, max {max(calls)}")
    print(f"  max operations/s on a card {max_ops}")
    print(f"  question → card in chat   median {statistics.median(shown_ms):.0f} ms, "
          f"p99 {percentile(shown_ms, 0.99):.0f} ms (the model's first token came "
          f"{args.first_token_after:g} s after)")  # fmt: skip
    print(f"  first token → first text  median {statistics.median(first_ms):.0f} ms, "
          f"p99 {percentile(first_ms, 0.99):.0f} ms")  # fmt: skip
    print(f"  last token → final text   median {statistics.median(final_ms):.0f} ms, "
          f"p99 {percentile(final_ms, 0.99):.0f} ms")  # fmt: skip
    print(f"  longest visible stall     median {statistics.median(stalls):.0f} ms, "
          f"max {max(stalls):.0f} ms (the client's typewriter, modelled)")  # fmt: skip
    by_kind = ", ".join(f"{n / len(conversations):.1f} {k}" for k, n in sorted(kinds.items()))
    print(f"  card operations an answer {by_kind} (and the reply that sends each card)")
    print(f"  final text exact          {exact}/{len(conversations)}")
    checks = [
        (f"≤ {TARGET_OPS_PER_SECOND} updates/s per card", max_ops <= TARGET_OPS_PER_SECOND),
        (
            f"card in chat ≤ {TARGET_SHOWN_MS} ms (p99)",
            percentile(shown_ms, 0.99) <= TARGET_SHOWN_MS,
        ),
        (f"first text ≤ {TARGET_FIRST_MS} ms (p99)", percentile(first_ms, 0.99) <= TARGET_FIRST_MS),
        (f"final text ≤ {TARGET_FINAL_MS} ms (p99)", percentile(final_ms, 0.99) <= TARGET_FINAL_MS),
        (f"≤ {TARGET_CALLS} API calls per answer", max(calls) <= TARGET_CALLS),
        (f"no visible stall over {TARGET_STALL_MS} ms", max(stalls) <= TARGET_STALL_MS),
        ("every final text exact", exact == len(conversations)),
    ]
    for name, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    return 0 if all(ok for _, ok in checks) or not args.check else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--chars", type=int, default=4000)
    parser.add_argument("--tokens-per-second", dest="tps", type=float, default=50.0)
    parser.add_argument("--first-token-after", type=float, default=1.0)
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    raise SystemExit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()

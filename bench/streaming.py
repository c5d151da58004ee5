"""Streaming answers into Feishu cards: API calls, update rate and visible delays.

    python -m bench.streaming [--conversations 20] [--chars 4000] [--tokens-per-second 50]

Each conversation streams a ``--chars`` answer from a fake LLM (4-character tokens at
``--tokens-per-second``) through the real path: ``ReActAgent.stream_answer`` → the
live-card bridge → ``LiveReply`` → ``FeishuClient`` (lark-oapi builders, pooled HTTP) →
the fake Feishu server on loopback, which records every card operation with its time.
Reported: API calls per answer, the most operations any card saw within one second,
the delay from the first token to the first visible text and from the last token to
the final text (median and p99 over the conversations), and whether the text shown at
the end equals the answer.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
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
from bot.runtime.live import LiveAnswer  # noqa: E402

from fakes.feishu_server import FakeFeishu  # noqa: E402

TOKEN_CHARS = 4
TARGET_OPS_PER_SECOND = 10
TARGET_FIRST_MS = 250
TARGET_FINAL_MS = 500
TARGET_CALLS = 120


class PacedLLM:
    """A fake model that streams a fixed answer at a fixed token rate."""

    model = "paced"
    abilities: Mapping[str, bool] = MappingProxyType(
        {"tool_call": True, "json_mode": True, "streaming": True}
    )

    def __init__(self, answer: str, tokens_per_second: float) -> None:
        self.answer = answer
        self.interval = 1 / tokens_per_second
        self.first_token_at = 0.0
        self.last_token_at = 0.0

    async def chat(self, messages: Sequence[Any], **kwargs: Any) -> LLMResponse:
        return LLMResponse(content="draft")

    async def stream_chat(self, messages: Sequence[Any], **kwargs: Any) -> AsyncIterator[Any]:
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
    async for delta in agent.stream_answer("question", result):
        live.add_answer(delta)
    outcome = await reply.finish("1 step · 250 tokens · 20.0 s")
    conversation.calls = outcome.calls


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
                Conversation(f"om_stream_{i}", PacedLLM(make_answer(args.chars, i), args.tps))
                for i in range(args.conversations)
            ]
            started = time.monotonic()
            await asyncio.gather(*(converse(client, c) for c in conversations))
            elapsed = time.monotonic() - started
        return report(args, fake, conversations, elapsed)


def report(
    args: argparse.Namespace, fake: FakeFeishu, conversations: list[Conversation], elapsed: float
) -> int:
    first_ms, final_ms, exact = [], [], 0
    max_ops = 0
    for conversation in conversations:
        messages = [m for m in fake.sent if m.reply_to == conversation.message_id]
        cards = [fake.cards[m.card_id] for m in messages if m.card_id]
        ops = sorted(
            (op for card in cards for op in card.timeline if op.code == 0), key=lambda o: o.time
        )
        visible = [op.time for op in ops if op.op in ("create", "content")]
        final = [op.time for op in ops if op.op == "update"]
        first_ms.append((visible[0] - conversation.llm.first_token_at) * 1000)
        final_ms.append((final[-1] - conversation.llm.last_token_at) * 1000)
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
    print(f"  first token → first text  median {statistics.median(first_ms):.0f} ms, "
          f"p99 {percentile(first_ms, 0.99):.0f} ms")  # fmt: skip
    print(f"  last token → final text   median {statistics.median(final_ms):.0f} ms, "
          f"p99 {percentile(final_ms, 0.99):.0f} ms")  # fmt: skip
    print(f"  final text exact          {exact}/{len(conversations)}")
    checks = [
        (f"≤ {TARGET_OPS_PER_SECOND} updates/s per card", max_ops <= TARGET_OPS_PER_SECOND),
        (f"first text ≤ {TARGET_FIRST_MS} ms (p99)", percentile(first_ms, 0.99) <= TARGET_FIRST_MS),
        (f"final text ≤ {TARGET_FINAL_MS} ms (p99)", percentile(final_ms, 0.99) <= TARGET_FINAL_MS),
        (f"< {TARGET_CALLS} API calls per answer", max(calls) < TARGET_CALLS),
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
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    raise SystemExit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()

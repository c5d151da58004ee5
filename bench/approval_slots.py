"""Questions answered while approvals wait: do pending approvals hold the bot up?

    python -m bench.approval_slots [--pending 50] [--questions 20] [--slots 8] [--check]

The real app (``create_app``) on SQLite, against the Feishu emulator and the fake
OpenAI-compatible server, over HTTP with signed, encrypted pushes. First ``--questions``
questions from other users are asked with nothing pending; then ``--pending`` users each
ask for a write that waits for approval (more than the ``--slots`` run slots), and the same
questions are asked again. Reported side by side: the time from the push to the answer's
card being finished (median and the worst), and how many approvals were waiting.

Target: with the approvals pending, every question is answered, and the median is within
2 s of the median with none pending (before the fix, a question waited for a slot until
an approval expired: 10 minutes by default).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the fakes and the harness the tests use

from bot.engine import tool_from_function  # noqa: E402

from e2e.harness import Bot, running_bot, settings_for  # noqa: E402
from fakes.feishu_server import FakeFeishu  # noqa: E402
from fakes.openai_server import FakeOpenAIServer, Reply  # noqa: E402

TARGET_EXTRA_SECONDS = 2.0


def model(body: dict[str, Any]) -> Reply:
    """Writes for "deploy" (once), answers anything else."""
    if body.get("stream"):
        return Reply(content="the answer")
    last = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    if "deploy" in last and not any(m["role"] == "tool" for m in body["messages"]):
        return Reply(tool_calls=[("c0", "deploy", {"service": "api"})])
    return Reply(content="done")


async def deploy(service: str) -> str:
    """Deploy a service to production."""
    return f"{service} deployed"


async def ask(bot: Bot, tag: str, questions: int) -> list[float]:
    async def one(n: int) -> float:
        message_id = f"om_{tag}_{n}"
        began = time.monotonic()
        await bot.say(
            message_id, f"question {n}?", chat_id=f"oc_{tag}_{n}", sender_open_id=f"ou_{tag}{n}"
        )
        await bot.reply(message_id, within=120)
        return time.monotonic() - began

    return list(await asyncio.gather(*(one(n) for n in range(questions))))


async def run(args: argparse.Namespace) -> bool:
    with tempfile.TemporaryDirectory() as folder:
        async with FakeFeishu() as feishu, FakeOpenAIServer() as llm_server:
            llm_server.handler = model
            settings = settings_for(
                Path(folder),
                feishu,
                llm_server,
                larkgate_admins="ou_admin",
                larkgate_max_concurrent_runs=args.slots,
                larkgate_rate_limit_per_minute=0,
            )
            tool = tool_from_function(deploy, side_effect="write")
            async with running_bot(settings, feishu, llm_server, tools=[tool]) as bot:
                await ask(bot, "warm", args.questions)  # warm-up: first connections and caches
                idle = await ask(bot, "idle", args.questions)
                for n in range(args.pending):
                    await bot.say(
                        f"om_w{n}", "deploy api", chat_id=f"oc_w{n}", sender_open_id=f"ou_w{n}"
                    )
                await bot.wait_for(
                    lambda: len(bot.services.governance.waits) == args.pending, within=120
                )
                busy = await ask(bot, "busy", args.questions)
                waiting = len(bot.services.governance.waits)
    extra = statistics.median(busy) - statistics.median(idle)
    print(f"{'approvals pending':>20} | {'answered':>8} | {'median':>9} | {'worst':>9}")
    for label, times, pending in (("0", idle, 0), (str(args.pending), busy, waiting)):
        print(
            f"{label:>20} | {len(times):>8} | {statistics.median(times) * 1000:>6.0f} ms"
            f" | {max(times) * 1000:>6.0f} ms"
            + ("" if pending == int(label) else f" ({pending} waiting)")
        )
    ok = len(busy) == args.questions and waiting == args.pending and extra <= TARGET_EXTRA_SECONDS
    print(
        f"median extra with {args.pending} pending: {extra * 1000:.0f} ms "
        f"(target ≤ {TARGET_EXTRA_SECONDS * 1000:.0f} ms): {'PASS' if ok else 'FAIL'}"
    )
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, default=50)
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    args = parser.parse_args()
    ok = asyncio.run(run(args))
    if args.check and not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

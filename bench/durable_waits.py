"""What a run's checkpoint holds and costs, and how fast a waiting run comes back.

    python -m bench.durable_waits [--rounds 15] [--codec-rounds 200] [--check]

1. The checkpoint. A real ``ReActAgent`` (native mode, the engine's own system prompt, a
   history of three turns) over a scripted in-process model answers one question with
   N lookups, one a turn, each observation ~300 characters, then asks for a write; a pre
   hook takes ``call.checkpoint()`` at that write (the N+1st call), as the approval gate
   does. The checkpoint goes into the bot's payload (``ParkedTurn``: the turn's part,
   the live card's anchor and the engine's JSON), sealed as ``TurnParking.save`` does.
   Reported for N = 5, 20 and 50: the bytes of the engine's JSON and of the payload, what
   they are made of, and the median time of encode + seal (``encode`` + ``sign``, what a
   run pays before it waits) and of verify + decode (``decode``, what a resumed run pays
   before it goes on) over ``--codec-rounds`` rounds.

2. Resume after a restart. The real app on SQLite against the Feishu emulator and the
   fake OpenAI server, as the e2e tests run it (``tests/e2e/test_durable_waits.py``). Bot
   A is asked for a write (``deploy``), posts its approval card, waits, and stops
   gracefully; bot B starts on the same database. Measured: A's graceful stop with the
   run waiting; from B's start (before ``create_app``) to the run waiting again in B
   (``len(governance.waits) == 1``, polled every millisecond), of which B's start-up
   (until it serves); and from the POST of the approve click on the card A posted to the
   tool's handler starting (``perf_counter`` in the tool). Side by side, with no restart
   (the run waiting in the process that asked): the same click → tool time, and A's stop
   once the run has finished. The harness's settings: a 2 s shutdown grace and claim
   lease. Every round has fresh databases; restart and no-restart rounds take turns, after
   one warm-up round of each; medians of ``--rounds``.

Checks (PASS/FAIL): every round's tool ran exactly once, and every answer reached the
card the run began with. No timing target: the figures are what durability costs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the fakes and the harness the tests use

from bot.engine import (  # noqa: E402
    HookResult,
    LLMResponse,
    ReActAgent,
    RunCheckpoint,
    ToolUse,
    Usage,
    tool_from_function,
)
from bot.engine.testing import ScriptedLLM, tool_call  # noqa: E402
from bot.feishu.card_writer import CardAnchor  # noqa: E402
from bot.runtime.turn.parking import (  # noqa: E402
    CheckpointSeal,
    ParkedTurn,
    checkpoint_key,
    decode,
    encode,
)
from bot.sandbox.push import card_action_event, signed_request  # noqa: E402
from bot.store import StoredCheckpoint  # noqa: E402
from bot.store.approvals import ApprovalStore  # noqa: E402

from e2e.harness import (  # noqa: E402
    BOT_OPEN_ID,
    ENCRYPT_KEY,
    VERIFICATION_TOKEN,
    Bot,
    answer_of,
    running_bot,
    settings_for,
)
from fakes.feishu_server import FakeFeishu, FakeMessage  # noqa: E402
from fakes.openai_server import FakeOpenAIServer  # noqa: E402
from support.cards import callback_values  # noqa: E402
from support.deploy import deploying  # noqa: E402

ADMIN = "ou_admin"
SIZES = (5, 20, 50)
QUESTION = (
    "Our Q3 release slipped twice. Go through the incident reports and the release notes "
    "since July, find what blocked each release candidate, and post a summary to the "
    "release channel."
)
HISTORY = [
    {"role": "user", "content": "Which release candidates did we cut in Q3?"},
    {"role": "assistant", "content": "Three: rc1 on 3 July, rc2 on 24 July and rc3 on "
     "14 August. rc3 shipped as 3.4.0 on 2 September; rc1 and rc2 were withdrawn after "
     "regressions were found in the nightly runs."},
    {"role": "user", "content": "Who owned the rc2 regression?"},
    {"role": "assistant", "content": "The storage team (Priya Natarajan on call). The "
     "regression was a lock ordering bug in the compaction path that showed up under the "
     "soak test; it was fixed in 3.4.0-rc3."},
    {"role": "user", "content": "OK. And the release channel is #releases, right?"},
    {"role": "assistant", "content": "Yes: #releases (oc_releases). Announcements there "
     "go to about 140 people."},
]  # fmt: skip


# ---------------------------------------------------------------------------------------
# 1. The checkpoint: what it holds, its size, and what encoding and decoding it cost


def _observation(step: int) -> str:
    """~300 characters, as a document search or an issue lookup returns."""
    text = (
        f"[{step}] INC-{4100 + step}: release candidate blocked at 2025-0{7 + step % 3}-"
        f"{10 + step % 18:02d}. Root cause: flaky integration test in the payments "
        f"service (timeout after 30 s on the staging cluster); owner team-{step % 5}. "
        f"Resolution: test quarantined, fix merged in PR #{8800 + step * 7}, re-run green. "
        f"Linked docs: release-notes/3.4/{step}.md, runbook/ci-flakes.md."
    )
    return text.ljust(300, ".")[:300]


def _script(steps: int) -> list[LLMResponse]:
    """The model: ``steps`` lookups (one a turn, a short reason with each), then a write."""
    replies = []
    prompt = 900
    for n in range(steps):
        name = ("search_incidents", "read_release_notes")[n % 2]
        call = tool_call(name, {"query": f"rc blockers part {n}", "limit": 5}, id=f"call_{n}")
        prompt += 120
        replies.append(
            LLMResponse(
                content=f"Checking part {n} of the incident history next.",
                tool_calls=(call,),
                usage=Usage(prompt, 40, prompt + 40),
            )
        )
    send = tool_call(
        "post_message",
        {"chat": "oc_releases", "text": "Q3 release summary: " + "x" * 200},
        id=f"call_{steps}",
    )
    replies.append(
        LLMResponse(
            content="I have what I need; posting the summary.",
            tool_calls=(send,),
            usage=Usage(prompt + 120, 90, prompt + 210),
        )
    )
    return replies


def _tools() -> list[Any]:
    counter = iter(range(10_000))

    async def search_incidents(query: str, limit: int = 5) -> str:
        """Search the incident reports."""
        return _observation(next(counter))

    async def read_release_notes(query: str, limit: int = 5) -> str:
        """Search the release notes."""
        return _observation(next(counter))

    async def post_message(chat: str, text: str) -> str:
        """Post a message in a chat."""
        return "posted"

    return [
        tool_from_function(search_incidents, side_effect="read"),
        tool_from_function(read_release_notes, side_effect="read"),
        tool_from_function(post_message, side_effect="write"),
    ]


class TakesCheckpoint:
    """A pre hook that, at the write, takes the run's checkpoint and holds the call."""

    def __init__(self) -> None:
        self.checkpoint: RunCheckpoint | None = None
        self.taken = asyncio.Event()

    async def pre_tool_use(self, call: ToolUse) -> HookResult:
        if call.name == "post_message":
            assert call.checkpoint is not None
            self.checkpoint = call.checkpoint()
            self.taken.set()
            await asyncio.Event().wait()  # nobody decides here
        return HookResult()


async def checkpoint_of(steps: int) -> RunCheckpoint:
    hook = TakesCheckpoint()
    # The bot's agents stop at 50 iterations (the engine's default): room for 50 lookups
    # and the write here, which changes nothing the checkpoint holds.
    agent = ReActAgent(
        ScriptedLLM(_script(steps), record=False), _tools(), hooks=[hook], max_iterations=60
    )
    run = asyncio.create_task(agent.run(QUESTION, history=HISTORY, run_id=f"run-{steps}"))
    taken = asyncio.create_task(hook.taken.wait())
    await asyncio.wait([run, taken], timeout=30, return_when=asyncio.FIRST_COMPLETED)
    if not hook.taken.is_set():
        raise RuntimeError(f"the run did not reach its write: {run.done() and run.result()}")
    run.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await run
    assert hook.checkpoint is not None
    return hook.checkpoint


def parked_turn(checkpoint: RunCheckpoint) -> ParkedTurn:
    return ParkedTurn(
        run_id=checkpoint.run_id,
        message_id="om_5f3c1a9e0b2d4c7e8f6a1b3c5d7e9f0a",
        scope_key="oc_7d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a:ou_2b4d6f8a0c1e3a5c7e9b1d3f5a7c9e1b",
        generation=3,
        conversation_id="conv_0f9e8d7c6b5a",
        chat_id="oc_7d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a",
        chat_type="group",
        sender_open_id="ou_2b4d6f8a0c1e3a5c7e9b1d3f5a7c9e1b",
        thread_id="",
        remembered=QUESTION,
        joined_before=(),
        started_at=time.time(),
        model="gpt-4o-2024-08-06",
        card=CardAnchor("7355439001234567890", "om_1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d", 57, True),
        engine=checkpoint,
    )


def _sealed(parked: ParkedTurn, seal: CheckpointSeal) -> StoredCheckpoint:
    payload = encode(parked)
    signature = seal.sign(run_id=parked.run_id, message_id=parked.message_id,
                          scope_key=parked.scope_key, generation=parked.generation,
                          payload=payload)  # fmt: skip
    now = time.time()
    return StoredCheckpoint(run_id=parked.run_id, message_id=parked.message_id,
                            scope_key=parked.scope_key, generation=parked.generation,
                            owner="host:1", payload=payload, seal=signature,
                            created_at=now, updated_at=now)  # fmt: skip


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


@dataclass
class CodecFigures:
    steps: int
    context: int
    transcript: int
    engine_bytes: int
    payload_bytes: int
    parts: dict[str, int]
    observation_bytes: int
    encode_us: float
    decode_us: float


def measure_codec(checkpoint: RunCheckpoint, rounds: int) -> CodecFigures:
    seal = CheckpointSeal(checkpoint_key(b"k" * 32))
    parked = parked_turn(checkpoint)
    stored = _sealed(parked, seal)
    back = decode(stored, seal)
    assert back.engine == checkpoint, "the payload does not read back as it was"
    engine = checkpoint.to_json()
    encodes, decodes = [], []
    for _ in range(rounds):  # the two take turns, so a slow spell lands on both
        began = time.perf_counter()
        _sealed(parked, seal)
        middle = time.perf_counter()
        decode(stored, seal)
        ended = time.perf_counter()
        encodes.append(middle - began)
        decodes.append(ended - middle)
    parts = {key: _size(engine[key]) for key in ("transcript", "steps", "context")}
    parts["rest of the engine"] = _size(engine) - sum(parts.values())
    parts["the turn's part"] = len(stored.payload.encode()) - _size(engine)
    observations = sum(len(s.observation.encode()) for s in checkpoint.steps)
    return CodecFigures(
        steps=len(checkpoint.steps),
        context=len(checkpoint.context),
        transcript=len(checkpoint.transcript),
        engine_bytes=_size(engine),
        payload_bytes=len(stored.payload.encode()),
        parts=parts,
        observation_bytes=observations,
        encode_us=statistics.median(encodes) * 1e6,
        decode_us=statistics.median(decodes) * 1e6,
    )


async def run_codec(rounds: int) -> list[CodecFigures]:
    figures = []
    for steps in SIZES:
        checkpoint = await checkpoint_of(steps)
        assert len(checkpoint.steps) == steps and len(checkpoint.pending_calls) == 1
        measure_codec(checkpoint, 10)  # warm-up
        figures.append(measure_codec(checkpoint, rounds))
    return figures


def report_codec(figures: list[CodecFigures], rounds: int) -> None:
    print(f"1. The checkpoint of a native run waiting at its write after N lookups "
          f"(~300-character observations, 3 turns of history); medians of {rounds}")  # fmt: skip
    head = ["", *(f"N = {f.steps}" for f in figures)]
    rows: list[list[str]] = [
        ["transcript messages / context entries",
         *(f"{f.transcript} / {f.context}" for f in figures)],
        ["engine JSON", *(f"{f.engine_bytes:,} B" for f in figures)],
        ["sealed payload (as stored)", *(f"{f.payload_bytes:,} B" for f in figures)],
        *([f"  of which {k}", *(f"{f.parts[k]:,} B" for f in figures)] for k in figures[0].parts),
        ["  observation text (each in both)", *(f"{f.observation_bytes:,} B" for f in figures)],
        ["payload per lookup", *(f"{f.payload_bytes / f.steps:,.0f} B" for f in figures)],
        ["encode + seal", *(f"{f.encode_us:,.0f} µs" for f in figures)],
        ["verify + decode", *(f"{f.decode_us:,.0f} µs" for f in figures)],
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        cells = [
            row[0].ljust(widths[0]),
            *(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)),
        ]
        print("  " + " | ".join(cells))


# ---------------------------------------------------------------------------------------
# 2. Resume after a restart, against a run that waits where it was asked


@dataclass
class Deploys:
    """``deploy(service)``, a write tool that records when its handler starts."""

    started: list[float] = field(default_factory=list)

    def tool(self) -> Any:
        async def deploy(service: str) -> str:
            """Deploy a service to production."""
            self.started.append(time.perf_counter())
            return f"{service} deployed"

        return tool_from_function(deploy, side_effect="write")


@dataclass
class Round:
    restart: bool
    asked_to_waiting: float  # A: the question's push → the run waiting (for reference)
    stop: float  # A's graceful stop (the run waiting, or after the answer without a restart)
    start_to_serving: float | None  # B: its start → serving
    start_to_waiting: float | None  # B: its start → the run waiting again
    click_to_tool: float
    ran: int
    answered_on_card: bool


@contextlib.asynccontextmanager
async def _bot(folder: Path, feishu: FakeFeishu, llm: FakeOpenAIServer, deploys: Deploys,
               owner: str) -> AsyncIterator[Bot]:  # fmt: skip
    settings = settings_for(folder, feishu, llm, larkgate_admins=ADMIN,
                            larkgate_rate_limit_per_minute=0)  # fmt: skip
    async with running_bot(settings, feishu, llm, tools=[deploys.tool()], owner=owner) as bot:
        yield bot


async def _until(condition: Callable[[], bool], within: float = 30.0) -> float:
    """Polls every millisecond; the time it first held."""
    deadline = time.perf_counter() + within
    while not condition():
        if time.perf_counter() > deadline:
            raise TimeoutError("the bench waited too long")
        await asyncio.sleep(0.001)
    return time.perf_counter()


async def _approval_card(bot: Bot, message_id: str) -> FakeMessage:
    """The approval card, once its approval is linked to it (a click can be checked)."""

    def cards() -> list[FakeMessage]:
        return [m for m in bot.replies_to(message_id) if callback_values(m.content)]

    await _until(lambda: bool(cards()))
    card = cards()[0]
    (approval_id,) = {v["approval_id"] for v in callback_values(card.content)}
    store = ApprovalStore(bot.services.database)

    async def linked() -> bool:
        return (await store.get(approval_id)).card_message_id == card.message_id

    await bot.wait_for(linked, within=30)
    return card


def _waiting(bot: Bot) -> bool:
    return len(bot.services.governance.waits) == 1


async def _click_to_tool(bot: Bot, card: FakeMessage, deploys: Deploys) -> float:
    (value,) = [v for v in callback_values(card.content) if v["decision"] == "approve"]
    envelope = card_action_event(verification_token=VERIFICATION_TOKEN, value=value,
                                 operator_open_id=ADMIN, open_message_id=card.message_id,
                                 open_chat_id="oc_dm")  # fmt: skip
    body, headers = signed_request(envelope, encrypt_key=ENCRYPT_KEY)
    before = len(deploys.started)
    began = time.perf_counter()
    status, answer = await bot.post("/feishu/card", body, headers)
    assert status == 200 and answer["toast"]["type"] == "success", answer
    await _until(lambda: len(deploys.started) > before)
    return deploys.started[before] - began


def _answered_on(bot: Bot, message_id: str, card_id: str) -> bool:
    live = [m for m in bot.replies_to(message_id) if m.card_id]
    return [m.card_id for m in live] == [card_id] and "api deployed" in answer_of(
        live[0], bot.feishu
    )


async def one_round(feishu: FakeFeishu, llm: FakeOpenAIServer, n: int, restart: bool) -> Round:
    deploys = Deploys()
    message_id = f"om_{'r' if restart else 'w'}{n}"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        click, answered = 0.0, False
        async with _bot(folder, feishu, llm, deploys, "first") as bot:
            pushed = time.perf_counter()
            await bot.say(message_id, "deploy api please")
            waiting = await _until(lambda: _waiting(bot))
            card = await _approval_card(bot, message_id)
            await _until(lambda: any(m.card_id for m in bot.replies_to(message_id)))
            (card_id,) = [m.card_id for m in bot.replies_to(message_id) if m.card_id]
            if not restart:
                click = await _click_to_tool(bot, card, deploys)
                await bot.settle_reply(message_id, within=30)
                await bot.settle(within=30)
                answered = _answered_on(bot, message_id, card_id)
            stopping = time.perf_counter()
        stopped = time.perf_counter()
        if not restart:
            return Round(False, waiting - pushed, stopped - stopping, None, None, click,
                         len(deploys.started), answered)  # fmt: skip
        began = time.perf_counter()  # B's start: before create_app
        async with _bot(folder, feishu, llm, deploys, "second") as bot:
            serving = time.perf_counter()
            waiting_again = await _until(lambda: _waiting(bot))
            click = await _click_to_tool(bot, card, deploys)
            await bot.settle_reply(message_id, within=30)
            await bot.settle(within=30)
            return Round(True, waiting - pushed, stopped - stopping, serving - began,
                         waiting_again - began, click, len(deploys.started),
                         _answered_on(bot, message_id, card_id))  # fmt: skip


async def run_restarts(rounds: int) -> list[Round]:
    results = []
    async with FakeFeishu(bot_open_id=BOT_OPEN_ID) as feishu, FakeOpenAIServer() as llm:
        llm.handler = deploying(["api"])
        feishu.workspace.add_user(ADMIN, "Ada Admin")
        for restart in (False, True):  # warm-up, not counted
            await one_round(feishu, llm, -1, restart)
        for n in range(rounds):
            for restart in (False, True):
                results.append(await one_round(feishu, llm, n, restart))
                print(f"  round {n + 1}/{rounds} {'restart' if restart else 'no restart'} done",
                      file=sys.stderr)  # fmt: skip
    return results


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:,.1f} ms ({min(values) * 1000:,.1f}–" \
           f"{max(values) * 1000:,.1f})"  # fmt: skip


def report_restarts(results: list[Round]) -> float:
    kept = [r for r in results if not r.restart]
    restarted = [r for r in results if r.restart]
    print(f"\n2. A run waiting for an approval, the app on SQLite; medians (min–max) of "
          f"{len(restarted)} rounds each")  # fmt: skip
    rows = [
        ("question → run waiting (bot A)",
         _ms([r.asked_to_waiting for r in kept]), _ms([r.asked_to_waiting for r in restarted])),
        ("A's graceful stop", _ms([r.stop for r in kept]), _ms([r.stop for r in restarted])),
        ("B's start → serving", "-", _ms([r.start_to_serving or 0.0 for r in restarted])),
        ("B's start → run waiting again", "-",
         _ms([r.start_to_waiting or 0.0 for r in restarted])),
        ("click POST → tool starts",
         _ms([r.click_to_tool for r in kept]), _ms([r.click_to_tool for r in restarted])),
    ]  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    print(
        f"  {'':<{widths[0]}} | {'no restart':>{widths[1]}} | {'restart (A stops, B)':>{widths[2]}}"
    )
    for label, a, b in rows:
        print(f"  {label:<{widths[0]}} | {a:>{widths[1]}} | {b:>{widths[2]}}")
    ratio = statistics.median(r.click_to_tool for r in restarted) / statistics.median(
        r.click_to_tool for r in kept
    )
    resumed = statistics.median(r.start_to_waiting or 0.0 for r in restarted)
    startup = statistics.median(r.start_to_serving or 0.0 for r in restarted)
    print(f"  click → tool after a restart / without: {ratio:.2f}×")
    print(f"  resuming beyond start-up (B serving → run waiting again): "
          f"{(resumed - startup) * 1000:,.1f} ms (medians' difference)")  # fmt: skip
    return ratio


async def run(args: argparse.Namespace) -> bool:
    began = time.perf_counter()
    figures = await run_codec(args.codec_rounds)
    report_codec(figures, args.codec_rounds)
    results = await run_restarts(args.rounds)
    report_restarts(results)
    checks = [
        ("every round's tool ran exactly once", all(r.ran == 1 for r in results)),
        ("every answer reached the card its run began", all(r.answered_on_card for r in results)),
    ]  # fmt: skip
    print()
    for name, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    print(f"({time.perf_counter() - began:.0f} s)")
    return all(ok for _, ok in checks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rounds", type=int, default=15, help="restart rounds (and as many without)"
    )
    parser.add_argument("--codec-rounds", type=int, default=200)
    parser.add_argument("--check", action="store_true", help="exit 1 when a check fails")
    args = parser.parse_args()
    ok = asyncio.run(run(args))
    if args.check and not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

"""Runs that wait for a person, saved where they stand and resumed in any process.

When a run starts waiting (an approval, a consent, an ``ask_user`` question), the waiting
hook calls ``TurnParking.save`` with the engine's checkpoint (``RunCheckpoint``: the
messages, the pending calls and what of them already finished, the counters, the tools
the run may use). The turn adds its own part (who asked and where, the question as the
history remembers it, the messages that joined it, the live card's anchor) and the whole
goes into the database as one sealed payload (``CheckpointStore``).

The run's message keeps its claim. A graceful stop hands the claim back at once (its
wait is left pending, not cancelled); a crash lets its lease run out. Either way the
process that takes the message over (another replica, or this one after its restart)
finds the checkpoint (``MessageHandler``) and resumes the run from it
(``TurnRunner.resumer_for``): the pending call goes through every hook again, where the
approval gate meets its approval (decided meanwhile, or still waiting, its card
unchanged), and the model goes on from where it was, on the same card where Feishu lets
it.

The payload is trusted only under its seal: an HMAC, keyed from the app's secret (so every
replica checks every replica's checkpoints), over the payload and the columns that route
it. A checkpoint changed in the database is not resumed; the run ends, saying why.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields
from typing import Any

from bot.conversations.workers import Turn
from bot.engine import CheckpointError, RunCheckpoint
from bot.feishu.card_writer import CardAnchor
from bot.runtime.turn.live import LiveAnswer
from bot.store import CheckpointStore, StoredCheckpoint

logger = logging.getLogger(__name__)

PAYLOAD_VERSION = 1


class UnusableCheckpoint(Exception):
    """A checkpoint that cannot be resumed from; the message says why, for the card."""


@dataclass(frozen=True, slots=True)
class JoinedMessage:
    """A message that joined the run before it waited, and that the run has read."""

    message_id: str
    sender: str
    text: str


def checkpoint_key(button_key: bytes) -> bytes:
    """The checkpoints' seal key, from the key that seals buttons (itself derived from the
    app's secret: the same on every replica), kept apart from it by its label."""
    return hmac.new(button_key, b"larkgate run checkpoints", hashlib.sha256).digest()


class CheckpointSeal:
    def __init__(self, key: bytes) -> None:
        self._key = key

    def sign(
        self, *, run_id: str, message_id: str, scope_key: str, generation: int, payload: str
    ) -> str:
        routed = json.dumps([run_id, message_id, scope_key, generation], ensure_ascii=True)
        mac = hmac.new(self._key, routed.encode(), hashlib.sha256)
        mac.update(b"\0")
        # Whatever text the database gives back (lone surrogates included) has a digest.
        mac.update(payload.encode("utf-8", "surrogatepass"))
        return mac.hexdigest()

    def verify(self, stored: StoredCheckpoint) -> bool:
        if not stored.seal.isascii():  # a hex digest never is anything else
            return False
        expected = self.sign(
            run_id=stored.run_id,
            message_id=stored.message_id,
            scope_key=stored.scope_key,
            generation=stored.generation,
            payload=stored.payload,
        )
        return hmac.compare_digest(expected, stored.seal)


def encode(parked: ParkedTurn) -> str:
    card = parked.card
    body: dict[str, Any] = {
        "version": PAYLOAD_VERSION,
        "conversation_id": parked.conversation_id,
        "chat_id": parked.chat_id,
        "chat_type": parked.chat_type,
        "sender_open_id": parked.sender_open_id,
        "thread_id": parked.thread_id,
        "remembered": parked.remembered,
        "joined": [[j.message_id, j.sender, j.text] for j in parked.joined_before],
        "started_at": parked.started_at,
        "model": parked.model,
        "card": None
        if card is None
        else [card.card_id, card.message_id, card.sequence, card.with_steps],
        "engine": parked.engine.to_json(),
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def decode(stored: StoredCheckpoint, seal: CheckpointSeal) -> ParkedTurn:
    """The turn ``stored`` holds, once its seal holds; UnusableCheckpoint otherwise."""
    if not seal.verify(stored):
        raise UnusableCheckpoint(
            "its saved state did not verify (it was changed, or saved under another app secret)"
        )
    try:
        body = json.loads(stored.payload)
        if not isinstance(body, dict) or body.get("version") != PAYLOAD_VERSION:
            raise ValueError("unknown payload version")
        engine = RunCheckpoint.from_json(body["engine"])
        if engine.run_id != stored.run_id:
            raise ValueError("the engine's run is another run")
        card = body["card"]
        return ParkedTurn(
            run_id=stored.run_id,
            message_id=stored.message_id,
            scope_key=stored.scope_key,
            generation=stored.generation,
            conversation_id=_optional_str(body["conversation_id"]),
            chat_id=_str(body["chat_id"]),
            chat_type=_str(body["chat_type"]),
            sender_open_id=_str(body["sender_open_id"]),
            thread_id=_str(body["thread_id"]),
            remembered=_str(body["remembered"]),
            joined_before=tuple(
                JoinedMessage(_str(m), _str(s), _str(t)) for m, s, t in body["joined"]
            ),
            started_at=float(body["started_at"]),
            model=_str(body["model"]),
            card=None
            if card is None
            else CardAnchor(_str(card[0]), _str(card[1]), int(card[2]), bool(card[3])),
            engine=engine,
        )
    except (CheckpointError, KeyError, TypeError, ValueError, RecursionError) as exc:
        raise UnusableCheckpoint(f"its saved state could not be read ({exc})") from exc


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value


def _optional_str(value: object) -> str | None:
    return None if value is None else _str(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnFacts:
    """The turn's part of its checkpoint that does not change while it runs."""

    run_id: str
    message_id: str
    scope_key: str
    generation: int
    conversation_id: str | None
    chat_id: str
    chat_type: str
    sender_open_id: str
    thread_id: str
    remembered: str
    started_at: float
    model: str
    # Messages that joined the run before this process took it up (a resumed run).
    joined_before: tuple[JoinedMessage, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ParkedTurn(TurnFacts):
    """A saved run: its turn (``joined_before``: every message that joined it and that it
    read), where its card stands, and the engine's checkpoint."""

    card: CardAnchor | None
    engine: RunCheckpoint


@dataclass(frozen=True, slots=True)
class Checkpoints:
    """What the turns need to save runs and resume them."""

    store: CheckpointStore
    seal: CheckpointSeal
    # Closes what a run that will not go on waited for (its approvals, questions and
    # their cards), with the note given: (run_id, note).
    close_waits: Callable[[str, str], Awaitable[None]]

    async def abandoned(self, run_id: str, note: str) -> None:
        await self.close_waits(run_id, note)


class TurnParking:
    """``RunParking`` for one turn: saves its checkpoint when a hook starts waiting."""

    def __init__(
        self,
        *,
        store: CheckpointStore,
        seal: CheckpointSeal,
        owner: str,
        facts: TurnFacts,
        turn: Turn,
        live: LiveAnswer,
    ) -> None:
        self._store = store
        self._seal = seal
        self._owner = owner
        self._facts = facts
        self._turn = turn
        self._live = live
        # Whether a checkpoint was saved (the run's finish deletes it).
        self.saved = False
        # Joined messages whose claims the checkpoint took over (the finish leaves them).
        self.settled: set[str] = set()
        self._holds = 0

    def holding(self, waiting: bool) -> None:
        # Counted: parallel calls of one run may each wait for a person.
        self._holds += 1 if waiting else -1
        self._turn.held = self._holds > 0

    @property
    def joined_before(self) -> tuple[JoinedMessage, ...]:
        return self._facts.joined_before

    async def save(self, checkpoint: RunCheckpoint) -> None:
        facts = self._facts
        # The messages that joined and that the run has read (the rest wait in its queue,
        # unread: a later turn answers them if this process stops).
        read = len(self._turn.joined) - len(self._turn.interrupts)
        joined_now = tuple(
            JoinedMessage(job.message_id, job.sender, job.text)
            for job in self._turn.joined[: max(0, read)]
        )
        parked = ParkedTurn(
            **{
                f.name: getattr(facts, f.name)
                for f in fields(TurnFacts)
                if f.name != "joined_before"
            },
            joined_before=facts.joined_before + joined_now,
            card=self._live.reply.anchor(),
            engine=checkpoint,
        )
        payload = encode(parked)
        await self._store.save(
            run_id=facts.run_id,
            message_id=facts.message_id,
            scope_key=facts.scope_key,
            generation=facts.generation,
            owner=self._owner,
            payload=payload,
            seal=self._seal.sign(
                run_id=facts.run_id,
                message_id=facts.message_id,
                scope_key=facts.scope_key,
                generation=facts.generation,
                payload=payload,
            ),
            joined_message_ids=[j.message_id for j in joined_now],
        )
        self.saved = True
        self.settled.update(j.message_id for j in joined_now)
        self._live.parked = True
        logger.info(
            "run %s saved while it waits (%d messages, %d bytes)",
            facts.run_id,
            len(checkpoint.context),
            len(payload),
        )

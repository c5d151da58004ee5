"""Questions the agent asks the person who asked it (the ``ask_user`` tool), shared by
every process.

A question is created ``pending`` by the process whose run waits for the answer (its
``owner``), with the card that asks it replying to the asker's message. It ends exactly
once, by a conditional update (``WHERE state = 'pending'``): ``answered`` by its asker
(from whichever replica got the click), ``expired`` when its time ran out (the waiting
process's timer, or ``close_expired`` for a process that is gone), ``cancelled`` when its
run stopped (``/stop``, ``/reset``: ``pending_for_scope``). Of two racers (two clicks, a
click and the expiry, two replicas) exactly one wins; the loser gets the row as the winner
left it.

Only the asker answers: the update itself requires ``asker = by``, so no check a caller
forgets lets anyone else's click count. A question with options is answered with one of
them, exactly as stored (the card's button carries the option's index; the caller reads
the option from the record); one without is answered with free text, not blank and at
most ``MAX_ANSWER_CHARS`` (the card's input allows no more). A refused answer changes
nothing and says why (``Refusal``).

A tool call's id is unique within one model reply, not within a run (some models say
``call_1`` every time), so ``find(run_id, call_id)`` gives the newest question of that
call: the one a run resumed after a restart is waiting for.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from sqlalchemy import and_, bindparam, select, update
from sqlalchemy.engine import Connection

from bot.store.db import Database
from bot.store.models import QuestionRow, table_of

__all__ = [
    "ANSWERED",
    "CANCELLED",
    "EXPIRED",
    "MAX_ANSWER_CHARS",
    "PENDING",
    "QUESTION_STATES",
    "REFUSALS",
    "NewQuestion",
    "QuestionOutcome",
    "QuestionRecord",
    "QuestionState",
    "QuestionStore",
    "Refusal",
    "question_state",
    "refusal_of",
]

QuestionState = Literal["pending", "answered", "expired", "cancelled"]
PENDING: Final = "pending"
ANSWERED: Final = "answered"
EXPIRED: Final = "expired"
CANCELLED: Final = "cancelled"
QUESTION_STATES: tuple[QuestionState, ...] = get_args(QuestionState)

# Why an answer did not count (nothing was written):
Refusal = Literal[
    "unknown",  # no such question
    "not_yours",  # someone other than the asker answered
    "already_answered",
    "expired",  # its time ran out (pending past expires_at, or expired)
    "cancelled",  # its run stopped
    "not_an_option",  # a question with options, answered with something else
    "empty",  # a free-text answer that is blank
    "too_long",  # a free-text answer over MAX_ANSWER_CHARS
]
REFUSALS: tuple[Refusal, ...] = get_args(Refusal)

# The longest free-text answer: the card's input holds no more (bot.feishu.question_card).
MAX_ANSWER_CHARS = 1000

_t = table_of(QuestionRow)
_c = _t.c


@dataclass(frozen=True, slots=True)
class NewQuestion:
    """What ``create`` needs: the question, where it was asked, who answers, who waits."""

    run_id: str
    call_id: str  # the tool call that asks
    scope_key: str  # the conversation's scope key
    generation: int  # the conversation's generation
    chat_id: str
    message_id: str  # the asker's message: the card replies to it
    thread_id: str  # "" when not in a thread
    asker: str  # open_id of the only person whose answer counts (never "")
    question: str
    options: tuple[str, ...]  # () for a free-text answer; else distinct, none blank
    owner: str  # the process instance whose run waits for the answer
    ttl_seconds: float


@dataclass(frozen=True, slots=True)
class QuestionRecord:
    """One question, as stored."""

    id: str
    run_id: str
    call_id: str
    scope_key: str
    generation: int
    chat_id: str
    message_id: str
    thread_id: str
    asker: str
    question: str
    options: tuple[str, ...]
    state: QuestionState
    answer: str | None  # the option chosen, or the text written
    answered_by: str | None  # the asker, once answered
    note: str | None  # e.g. why it was cancelled
    card_message_id: str | None
    owner: str
    created_at: float
    expires_at: float
    decided_at: float | None
    app: str = ""  # the Feishu app that posted its card ("": the default one)


@dataclass(frozen=True, slots=True)
class QuestionOutcome:
    """Whether this call moved the question, the question as it now is (None: no such
    question), and, for an answer that did not count, why."""

    changed: bool
    record: QuestionRecord | None
    refusal: Refusal | None = None


def question_state(value: str) -> QuestionState:
    """A state read back from the database; anything else there is corruption, said loudly."""
    for state in QUESTION_STATES:
        if value == state:
            return state
    raise ValueError(f"unknown question state {value!r}")


def _record(row: Mapping[Any, Any]) -> QuestionRecord:
    values = {name: row[name] for name in QuestionRecord.__slots__}
    values["options"] = tuple(json.loads(row["options"]))
    values["state"] = question_state(row["state"])
    return QuestionRecord(**values)


# One question of this store's app: another app's is unknown here.
_ONE = and_(_c.id == bindparam("p_id"), _c.app == bindparam("p_app"))
_IS_PENDING = _c.state == PENDING
_RETURN = tuple(_t.c)
_INSERT = _t.insert().returning(*_RETURN)
_BY_ID = select(_t).where(_ONE)
_SET_CARD = update(_t).where(_ONE).values(card_message_id=bindparam("p_card"))
# An answer counts only from the asker, while pending and before its time runs out.
_ANSWER = (
    update(_t)
    .where(
        _ONE,
        _IS_PENDING,
        _c.asker == bindparam("p_by"),
        _c.expires_at > bindparam("now"),
    )
    .values(
        state=ANSWERED,
        answer=bindparam("p_text"),
        answered_by=bindparam("p_by"),
        decided_at=bindparam("now"),
    )
    .returning(*_RETURN)
)
# Closed by the system: expired or cancelled, nobody answered.
_CLOSE = update(_t).values(
    state=bindparam("p_state"), note=bindparam("p_note"), decided_at=bindparam("now")
)
_CLOSE_ONE = _CLOSE.where(_ONE, _IS_PENDING).returning(*_RETURN)
# A sweeper expires its own app's questions: another app's cards are not its to edit.
_EXPIRE_OVERDUE = (
    _CLOSE.where(_c.app == bindparam("p_app"), _IS_PENDING, _c.expires_at <= bindparam("now"))
    .values(state=EXPIRED, note=None)
    .returning(*_RETURN)
)
_STATES = select(_c.id, _c.state).where(_c.id.in_(bindparam("p_ids", expanding=True)))
_OF_CALL = (
    select(_t)
    .where(_c.run_id == bindparam("p_run_id"), _c.call_id == bindparam("p_call_id"))
    .order_by(_c.created_at.desc(), _c.id.desc())
    .limit(1)
)
_PENDING_OF_SCOPE = (
    select(_t)
    .where(_c.scope_key == bindparam("p_scope_key"), _IS_PENDING)
    .order_by(_c.created_at, _c.id)
)

_PENDING_OF_RUN = (
    select(_t).where(_c.run_id == bindparam("p_run_id"), _IS_PENDING).order_by(_c.created_at)
)


class QuestionStore:
    """Creates questions, records their one transition, and finds them again."""

    def __init__(
        self, db: Database, *, clock: Callable[[], float] = time.time, app: str = ""
    ) -> None:
        self._db = db
        self._clock = clock
        self._app = app  # the Feishu app whose cards these questions are

    async def create(self, new: NewQuestion) -> QuestionRecord:
        """Record a pending question that expires ``ttl_seconds`` from now.

        Raises ValueError for a question nobody could answer: no asker, blank or repeated
        options (a card shows one button per option; the caller cuts them to what it shows).
        """
        if not new.asker:
            raise ValueError("a question needs its asker: nobody else may answer it")
        if any(not option.strip() for option in new.options):
            raise ValueError("an option may not be blank")
        if len(set(new.options)) != len(new.options):
            raise ValueError("the options must be distinct")
        now = self._clock()
        values = {
            name: getattr(new, name) for name in NewQuestion.__slots__ if name != "ttl_seconds"
        }
        values.update(
            id=uuid.uuid4().hex,
            app=self._app,
            options=json.dumps(list(new.options), ensure_ascii=False),
            state=PENDING,
            created_at=now,
            expires_at=now + new.ttl_seconds,
        )
        return await self._db.transact(_create, values)

    async def attach_card(self, question_id: str, card_message_id: str) -> None:
        """Remember the message of the question's card (to rewrite it when it ends)."""
        await self._db.transact(
            _execute,
            _SET_CARD,
            {"p_app": self._app, "p_id": question_id, "p_card": card_message_id},
        )

    async def answer(
        self, question_id: str, *, by: str, text: str, now: float | None = None
    ) -> QuestionOutcome:
        """``by`` answers ``text``: counts once, only from the asker, while pending and
        before ``expires_at`` (at ``now``, the store's clock by default), and for a question
        with options only when ``text`` is one of them. Otherwise nothing is written and the
        outcome says why (``refusal``), with the question as it is."""
        moment = self._clock() if now is None else now
        return await self._db.transact(_answer, self._app, question_id, by, text, moment)

    async def expire(self, question_id: str) -> QuestionOutcome:
        """End a pending question whose time ran out (the waiting process's timer)."""
        return await self._db.transact(
            _close_one, self._app, question_id, EXPIRED, None, self._clock()
        )

    async def cancel(self, question_id: str, note: str) -> QuestionOutcome:
        """End a pending question nobody waits for any more, e.g. its run was stopped."""
        return await self._db.transact(
            _close_one, self._app, question_id, CANCELLED, note, self._clock()
        )

    async def close_expired(self, now: float | None = None) -> list[QuestionRecord]:
        """Expire every pending question whose time ran out (its process may be gone);
        returns those this call expired, oldest first (their cards need rewriting)."""
        moment = self._clock() if now is None else now
        return await self._db.transact(_expire_overdue, self._app, moment)

    async def states(self, question_ids: Collection[str]) -> dict[str, QuestionState]:
        """The state of each question that exists, in one query (a watcher's way to notice
        answers recorded by other processes)."""
        ids = list(question_ids)
        if not ids:
            return {}
        return await self._db.transact(_states, ids, write=False)

    async def get(self, question_id: str) -> QuestionRecord | None:
        return await self._db.transact(_get, self._app, question_id, write=False)

    async def find(self, run_id: str, call_id: str) -> QuestionRecord | None:
        """The newest question the tool call ``call_id`` of ``run_id`` asked, if any."""
        return await self._db.transact(_find, run_id, call_id, write=False)

    async def pending_for_scope(self, scope_key: str) -> list[QuestionRecord]:
        """The conversation's questions still waiting, oldest first (``/stop`` and
        ``/reset`` cancel them)."""
        return await self._db.transact(_pending_for_scope, scope_key, write=False)

    async def pending_of_run(self, run_id: str) -> list[QuestionRecord]:
        """A run's questions still waiting (a saved run that will not go on closes them)."""
        return await self._db.transact(_pending_of_run, run_id, write=False)


# The transactions, run by `Database.transact` with a synchronous connection.


def _create(connection: Connection, values: dict[str, Any]) -> QuestionRecord:
    return _record(connection.execute(_INSERT, values).mappings().one())


def _execute(connection: Connection, statement: Any, params: dict[str, Any]) -> None:
    connection.execute(statement, params)


def _get(connection: Connection, app: str, question_id: str) -> QuestionRecord | None:
    row = connection.execute(_BY_ID, {"p_app": app, "p_id": question_id}).mappings().first()
    return None if row is None else _record(row)


def _answer(
    connection: Connection, app: str, question_id: str, by: str, text: str, now: float
) -> QuestionOutcome:
    record = _get(connection, app, question_id)
    refusal = refusal_of(record, by, text, now)
    if refusal is not None:
        return QuestionOutcome(False, record, refusal)
    params = {"p_app": app, "p_id": question_id, "p_by": by, "p_text": text, "now": now}
    row = connection.execute(_ANSWER, params).mappings().first()
    if row is None:  # a racer on another connection moved it first
        record = _get(connection, app, question_id)
        return QuestionOutcome(False, record, refusal_of(record, by, text, now) or "unknown")
    return QuestionOutcome(True, _record(row))


def refusal_of(record: QuestionRecord | None, by: str, text: str, now: float) -> Refusal | None:
    """Why ``by`` answering ``text`` at ``now`` would not count (None: it would)."""
    if record is None:
        return "unknown"
    if record.state == ANSWERED:
        return "already_answered"
    if record.state == CANCELLED:
        return "cancelled"
    if record.state == EXPIRED or record.expires_at <= now:
        return "expired"
    if not by or by != record.asker:
        return "not_yours"
    if record.options:
        return None if text in record.options else "not_an_option"
    if not text.strip():
        return "empty"
    if len(text) > MAX_ANSWER_CHARS:
        return "too_long"
    return None


def _close_one(
    connection: Connection, app: str, question_id: str, state: str, note: str | None, now: float
) -> QuestionOutcome:
    params = {"p_app": app, "p_id": question_id, "p_state": state, "p_note": note, "now": now}
    row = connection.execute(_CLOSE_ONE, params).mappings().first()
    if row is None:
        return QuestionOutcome(False, _get(connection, app, question_id))
    return QuestionOutcome(True, _record(row))


def _expire_overdue(connection: Connection, app: str, now: float) -> list[QuestionRecord]:
    rows = connection.execute(_EXPIRE_OVERDUE, {"p_app": app, "now": now}).mappings()
    return sorted(map(_record, rows), key=lambda r: (r.created_at, r.id))


def _states(connection: Connection, ids: list[str]) -> dict[str, QuestionState]:
    rows = connection.execute(_STATES, {"p_ids": ids})
    return {row.id: question_state(row.state) for row in rows}


def _find(connection: Connection, run_id: str, call_id: str) -> QuestionRecord | None:
    params = {"p_run_id": run_id, "p_call_id": call_id}
    row = connection.execute(_OF_CALL, params).mappings().first()
    return None if row is None else _record(row)


def _pending_for_scope(connection: Connection, scope_key: str) -> list[QuestionRecord]:
    rows = connection.execute(_PENDING_OF_SCOPE, {"p_scope_key": scope_key}).mappings()
    return [_record(row) for row in rows]


def _pending_of_run(connection: Connection, run_id: str) -> list[QuestionRecord]:
    rows = connection.execute(_PENDING_OF_RUN, {"p_run_id": run_id}).mappings()
    return [_record(row) for row in rows]

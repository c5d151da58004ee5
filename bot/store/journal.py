"""The end of a turn, recorded in one write transaction.

A turn's outcome touches three tables: the conversation's history (created on the scope's first
turn), the run's row, and the ledger claims of the messages the turn answered. `TurnJournal`
writes them together, so a crash or an error leaves either all of it or none of it: the claims
stay active and are taken over, and the history does not get a half-recorded turn.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import String, bindparam, case, func, select, update
from sqlalchemy.engine import Connection

from bot.store.checkpoints import delete_checkpoint
from bot.store.conversations import HistoryEntry, conversation_insert
from bot.store.db import Database
from bot.store.ledger import ACTIVE
from bot.store.models import (
    DONE,
    ROLES,
    ConversationMessageRow,
    ConversationRow,
    MessageClaimRow,
    RunRow,
    table_of,
)
from bot.store.prepared import Prepared
from bot.store.runs import FINISHED_STATUSES

logger = logging.getLogger(__name__)

_conversations = table_of(ConversationRow)
_messages = table_of(ConversationMessageRow)
_runs = table_of(RunRow)
_claims = table_of(MessageClaimRow)

_CONVERSATION_ID = select(_conversations.c.id).where(
    _conversations.c.scope_key == bindparam("scope_key"),
    _conversations.c.generation == bindparam("generation"),
)
_INSERT_ENTRIES = Prepared(_messages.insert())
_INSERT_RUN = Prepared(_runs.insert())
# The claims a turn answered: completed where the owner still holds them.
_COMPLETE = update(_claims).values(
    state=DONE,
    # The reply goes on the turn's own message, the first one (when there is one).
    reply_message_id=case(
        (
            _claims.c.message_id == bindparam("first_message_id"),
            func.coalesce(bindparam("p_reply", type_=String), _claims.c.reply_message_id),
        ),
        else_=_claims.c.reply_message_id,
    ),
    updated_at=bindparam("now"),
)
_HELD = (_claims.c.owner == bindparam("p_owner"), ACTIVE)
# Usually a turn answers one message: no expanding IN list to render at each execution.
_COMPLETE_CLAIM = Prepared(
    _COMPLETE.where(_claims.c.message_id == bindparam("first_message_id"), *_HELD)
)
_COMPLETE_CLAIMS = _COMPLETE.where(
    _claims.c.message_id.in_(bindparam("message_ids", expanding=True)), *_HELD
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishedTurn:
    """Everything a finished turn records.

    `conversation_id` is the conversation the turn loaded; None when the scope had none yet,
    and then the conversation (`scope_key`, `generation`) is created or, when a racer created
    it, reused. `entries` are appended in order (`role` is `user` or `assistant`).
    `completed_message_ids` are the claims the turn answered, its own message first; they are
    completed only where `owner` still holds them, and `reply_message_id` goes on the first.
    """

    scope_key: str
    conversation_id: str | None = None
    generation: int = 1
    entries: tuple[HistoryEntry, ...] = ()
    # the run
    run_id: str
    message_id: str
    status: str
    model: str
    iterations: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    tool_calls: int = 0
    feishu_calls: int = 0
    error: str | None = None
    started_at: float
    # the claims
    completed_message_ids: tuple[str, ...] = ()
    owner: str
    reply_message_id: str | None = None
    # The run saved a checkpoint while it waited for a person: it ends with the run.
    checkpointed: bool = False
    # The agent profile the run used (None: the default agent).
    profile: str | None = None


class TurnJournal:
    """Records finished turns: history, run and claims in one transaction."""

    def __init__(
        self, db: Database, *, clock: Callable[[], float] = time.time, app: str = ""
    ) -> None:
        self._db = db
        self._clock = clock
        self._app = app  # the Feishu app whose runs these are
        self._insert_conversation = conversation_insert(db)

    async def finish_turn(self, turn: FinishedTurn) -> str:
        """Record `turn`; returns the id of the conversation it went into.

        Raises (and records nothing) when a statement fails, e.g. a run id already recorded.
        """
        if turn.status not in FINISHED_STATUSES:
            raise ValueError(f"status must be one of {FINISHED_STATUSES}, not {turn.status!r}")
        for entry in turn.entries:
            if entry.role not in ROLES:
                raise ValueError(f"role must be one of {ROLES}, not {entry.role!r}")
        conversation_id, completed = await self._db.transact(
            _finish_turn, self._insert_conversation, turn, self._clock(), self._app, brief=True
        )
        if completed < len(turn.completed_message_ids):
            logger.warning(
                "run %s completed %d of its %d messages: %s no longer holds the others",
                turn.run_id,
                completed,
                len(turn.completed_message_ids),
                turn.owner,
            )
        return conversation_id


def _finish_turn(
    connection: Connection,
    insert_conversation: Prepared,
    turn: FinishedTurn,
    now: float,
    app: str,
) -> tuple[str, int]:
    """The transaction of `finish_turn`: the conversation id, and how many claims completed."""
    conversation_id = turn.conversation_id
    if conversation_id is None:
        key = {"scope_key": turn.scope_key, "generation": turn.generation}
        conversation_id = insert_conversation.scalar(
            connection, {"id": uuid.uuid4().hex, "created_at": now, **key}
        )
        if conversation_id is None:  # a racer created it first
            conversation_id = connection.execute(_CONVERSATION_ID, key).scalar_one()
    if turn.entries:
        _INSERT_ENTRIES.many(
            connection,
            [
                {
                    "conversation_id": conversation_id,
                    "role": entry.role,
                    "content": entry.content,
                    "message_id": entry.message_id,
                    "created_at": now,
                }
                for entry in turn.entries
            ],
        )
    _INSERT_RUN.rowcount(connection, _run_row(turn, conversation_id, now, app))
    if turn.checkpointed:
        delete_checkpoint(connection, turn.run_id)
    if not turn.completed_message_ids:
        return conversation_id, 0
    ids = turn.completed_message_ids
    params = {
        "p_owner": turn.owner,
        "first_message_id": ids[0],
        "p_reply": turn.reply_message_id,
        "now": now,
    }
    if len(ids) == 1:
        return conversation_id, _COMPLETE_CLAIM.rowcount(connection, params)
    completed = connection.execute(_COMPLETE_CLAIMS, {**params, "message_ids": list(ids)})
    return conversation_id, completed.rowcount


def _run_row(turn: FinishedTurn, conversation_id: str, now: float, app: str = "") -> dict[str, Any]:
    return {
        "app": app,
        "id": turn.run_id,
        "conversation_id": conversation_id,
        "message_id": turn.message_id,
        "owner": turn.owner,
        "status": turn.status,
        "model": turn.model,
        "iterations": turn.iterations,
        "prompt_tokens": turn.prompt_tokens,
        "completion_tokens": turn.completion_tokens,
        "total_tokens": turn.total_tokens,
        "tool_calls": turn.tool_calls,
        "feishu_calls": turn.feishu_calls,
        "error": turn.error,
        "started_at": turn.started_at,
        "finished_at": now,
        "profile": turn.profile,
    }

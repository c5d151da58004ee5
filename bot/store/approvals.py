"""Approvals: tool calls that wait for a human's decision, shared by every process.

An approval is created `pending` by the process whose run waits for it (its `owner`), and ends
exactly once: `approved` or `denied` by a person (`decide`, from whichever process got the card
click), `expired` when its time ran out, or `cancelled` when its run stopped or is gone. Every
transition is one conditional update (`WHERE state = 'pending'`), so of two racers (two clicks,
a click and the expiry timer, two processes) exactly one wins; the loser gets the row as the
winner left it. The winner's audit row (with the whole arguments and their SHA-256), and for
"approve for this conversation" the grant, are written in the same transaction: they exist
exactly when the transition does.

An approval records every asker of the call (`requesters`): everyone whose message is in the
run that asked, since a message sent while the bot works joins the running reply
(`bot/askers.py`). The run's starter is also `requester`, as before.

A grant lets the same person's later calls of the same tool in the same conversation
generation (per scope key: a `/reset` starts a new generation, and with it a fresh set of grants)
go without asking. Nobody else inherits it, even in a group conversation everyone shares. An
approval asked by several people grants the tool to each of them, and a call goes without
asking only when every one of its askers holds a grant (`granted_to_all`); an unknown asker
("") is never granted anything.

The arguments are stored whole, exactly as the tool will receive them: what an approver reads
on the card, in the console and in the audit log is what runs.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from sqlalchemy import Integer, and_, bindparam, exists, select, update
from sqlalchemy.engine import Connection

from bot.approval_states import (
    APPROVAL_STATES,
    APPROVED,
    CANCELLED,
    DENIED,
    EXPIRED,
    PENDING,
    ApprovalState,
    approval_state,
)
from bot.store.audit import AuditEntry, write_audit
from bot.store.db import Database
from bot.store.ledger import ACTIVE
from bot.store.models import (
    ApprovalGrantRow,
    ApprovalRow,
    MessageClaimRow,
    RunCheckpointRow,
    table_of,
)

__all__ = [
    "APPROVAL_STATES",
    "APPROVED",
    "CANCELLED",
    "DECISIONS",
    "DENIED",
    "EXPIRED",
    "PENDING",
    "READ_ONLY_NOTE",
    "RUN_GONE",
    "ApprovalRecord",
    "ApprovalStore",
    "Decision",
    "NewApproval",
    "Outcome",
]

Decision = Literal["approve", "deny", "approve_session"]
DECISIONS: tuple[Decision, ...] = get_args(Decision)
RUN_GONE = "the run is gone"  # the note of an approval closed because nobody waits for it
READ_ONLY_NOTE = "read-only mode"  # the note of a write's approval closed by read-only mode

_approvals = table_of(ApprovalRow)
_grants = table_of(ApprovalGrantRow)
_claims = table_of(MessageClaimRow)
_checkpoints = table_of(RunCheckpointRow)
_a = _approvals.c


@dataclass(frozen=True, slots=True)
class NewApproval:
    """What `create` needs: the call, where it was asked, who may decide, who waits."""

    run_id: str
    scope_key: str  # the conversation's scope key
    generation: int  # the conversation's generation: grants hold per (scope_key, generation)
    chat_id: str
    message_id: str  # the user's message the run answers (its claim is in message_claims)
    thread_id: str  # "" when not in a thread
    tool: str
    connector: str | None
    arguments: str  # the whole arguments, as a person reads them (indented JSON), never cut
    reason: str | None  # the model's stated reason, if any
    requester: str  # open_id of the person who started the run that asked
    approvers: tuple[str, ...]  # open_ids allowed to decide
    owner: str  # the process instance that waits for the decision
    ttl_seconds: float
    side_effect: str = "write"  # "read" or "write" (the tool's classification)
    # Everyone whose message is in the run that asked, `requester` first; () when the
    # requester asked alone.
    requesters: tuple[str, ...] = ()
    # The engine's id of the call within its run: a run resumed in another process finds
    # its approval by (run_id, call_id) instead of asking again.
    call_id: str | None = None
    # The agent profile of the run that asked (None: the default agent).
    profile: str | None = None


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """One approval, as stored."""

    id: str
    run_id: str
    scope_key: str
    generation: int
    chat_id: str
    message_id: str
    thread_id: str
    tool: str
    connector: str | None
    arguments: str
    reason: str | None
    requester: str
    approvers: tuple[str, ...]
    owner: str
    state: ApprovalState
    session: bool  # approved "for this conversation": a grant was recorded with it
    created_at: float
    expires_at: float
    decided_at: float | None
    decided_by: str | None  # None when the system expired or cancelled it
    note: str | None  # e.g. why it was cancelled
    card_message_id: str | None
    side_effect: str = "write"
    # Everyone whose message was in the run that asked, `requester` first (never empty).
    requesters: tuple[str, ...] = ()
    call_id: str | None = None
    # When the approved call started to run (it runs once: see `use`).
    used_at: float | None = None
    profile: str | None = None  # the agent profile of the run that asked
    app: str = ""  # the Feishu app that posted its card ("": the default one)


@dataclass(frozen=True, slots=True)
class Outcome:
    """The answer to a transition: whether this call made it, and the row after the call
    (None when there is no such approval)."""

    changed: bool
    record: ApprovalRecord | None


def _record(row: Mapping[Any, Any]) -> ApprovalRecord:
    values = {name: row[name] for name in ApprovalRecord.__slots__}
    values["approvers"] = tuple(json.loads(row["approvers"]))
    values["requesters"] = tuple(json.loads(row["requesters"])) or (row["requester"],)
    values["session"] = bool(row["session"])
    values["state"] = approval_state(row["state"])
    return ApprovalRecord(**values)


# One approval of this store's app: another app's is unknown here (its card is not this
# app's, and nor is deciding it).
_ONE = and_(_a.id == bindparam("p_id"), _a.app == bindparam("p_app"))
_IS_PENDING = _a.state == PENDING
_RETURN = tuple(_approvals.c)

_INSERT = _approvals.insert().returning(*_RETURN)
_BY_ID = select(_approvals).where(_ONE)
_SET_CARD = update(_approvals).where(_ONE).values(card_message_id=bindparam("p_card"))
# A decision counts only while the approval is pending and its time has not run out.
_DECIDE = (
    update(_approvals)
    .where(_ONE, _IS_PENDING, _a.expires_at > bindparam("now"))
    .values(
        state=bindparam("p_state"),
        session=bindparam("p_session"),
        decided_at=bindparam("now"),
        decided_by=bindparam("p_actor"),
    )
    .returning(*_RETURN)
)
# Closed by the system: expired or cancelled, nobody decided.
_CLOSE = update(_approvals).values(
    state=bindparam("p_state"),
    decided_at=bindparam("now"),
    decided_by=None,
    note=bindparam("p_note"),
)
_CLOSE_ONE = _CLOSE.where(_ONE, _IS_PENDING).returning(*_RETURN)
_CLOSE_RUN = _CLOSE.where(_a.run_id == bindparam("p_run_id"), _IS_PENDING).returning(*_RETURN)
_CLOSE_WRITES = _CLOSE.where(_IS_PENDING, _a.side_effect != "read").returning(*_RETURN)
# Somebody waits for an approval while its owner holds a live lease on the run's message.
_WAITED_FOR = exists().where(
    and_(
        _claims.c.message_id == _a.message_id,
        _claims.c.owner == _a.owner,
        ACTIVE,  # claimed or replied
        _claims.c.lease_until > bindparam("now"),
    )
)
# ... or its run saved a checkpoint and its message is still to be answered: whichever
# process takes the message over resumes the run, and the run meets its approval again.
_RUN_PARKED = exists().where(
    and_(
        _checkpoints.c.run_id == _a.run_id,
        _claims.c.message_id == _checkpoints.c.message_id,
        ACTIVE,
    )
)
# A sweeper closes its own app's approvals: another app's cards are not its to edit.
_MINE = _a.app == bindparam("p_app")
_CLOSE_ORPHANED = _CLOSE.where(_MINE, _IS_PENDING, ~_WAITED_FOR, ~_RUN_PARKED).returning(*_RETURN)
_OF_CALL = (
    select(_approvals)
    .where(_a.run_id == bindparam("p_run_id"), _a.call_id == bindparam("p_call_id"))
    .order_by(_a.created_at.desc())
    .limit(1)
)
# An approved call starts once: the first to mark it runs it.
_USE = (
    update(_approvals)
    .where(_ONE, _a.state == APPROVED, _a.used_at.is_(None))
    .values(used_at=bindparam("now"))
)
_CLOSE_OVERDUE = _CLOSE.where(_MINE, _IS_PENDING, _a.expires_at < bindparam("cutoff")).returning(
    *_RETURN
)
_STATES = select(_a.id, _a.state).where(_a.id.in_(bindparam("p_ids", expanding=True)))
_PENDING = (
    select(_approvals)
    .where(_IS_PENDING)
    .order_by(_a.created_at.desc(), _a.id.desc())
    .limit(bindparam("limit", type_=Integer))
)
_GRANTEES = select(_grants.c.requester).where(
    _grants.c.scope_key == bindparam("scope_key"),
    _grants.c.generation == bindparam("generation"),
    _grants.c.tool == bindparam("tool"),
    _grants.c.requester.in_(bindparam("requesters", expanding=True)),
)

# decision -> (state, session, audit action)
_DECIDED = {
    "approve": (APPROVED, False, "approval.approved"),
    "approve_session": (APPROVED, True, "approval.approved_session"),
    "deny": (DENIED, False, "approval.denied"),
}


class ApprovalStore:
    """Creates approvals, records their one transition, and keeps the conversation grants."""

    def __init__(
        self,
        db: Database,
        *,
        clock: Callable[[], float] = time.time,
        on_outcome: Callable[[str], None] | None = None,
        app: str = "",
    ) -> None:
        self._db = db
        self._clock = clock
        self._app = app  # the Feishu app whose cards these approvals are
        # Told of each transition this store made (approved, approved_session, denied,
        # expired, cancelled): once per approval across processes, e.g. for metrics.
        self._on_outcome = on_outcome
        self._insert_grant = (
            db.insert(_grants)
            .on_conflict_do_nothing(index_elements=["scope_key", "generation", "tool", "requester"])
            .values(
                scope_key=bindparam("p_scope_key"),
                generation=bindparam("p_generation"),
                tool=bindparam("p_tool"),
                requester=bindparam("p_requester"),
                granted_by=bindparam("p_actor"),
                granted_at=bindparam("now"),
                approval_id=bindparam("p_id"),
            )
        )

    async def create(self, new: NewApproval) -> ApprovalRecord:
        """Record a pending approval that expires `ttl_seconds` from now."""
        requesters = new.requesters or (new.requester,)
        if requesters[0] != new.requester:
            raise ValueError("the requester is the first of the requesters (the run's starter)")
        now = self._clock()
        values = {
            name: getattr(new, name) for name in NewApproval.__slots__ if name != "ttl_seconds"
        }
        values.update(
            id=uuid.uuid4().hex,
            app=self._app,
            requesters=json.dumps(list(requesters)),
            approvers=json.dumps(list(new.approvers)),
            state=PENDING,
            session=False,
            created_at=now,
            expires_at=now + new.ttl_seconds,
        )
        return await self._db.transact(_create, values)

    async def set_card(self, approval_id: str, card_message_id: str) -> None:
        """Remember the message of the approval's card (to update it when the approval ends)."""
        await self._db.transact(
            _execute,
            _SET_CARD,
            {"p_app": self._app, "p_id": approval_id, "p_card": card_message_id},
        )

    async def get(self, approval_id: str) -> ApprovalRecord | None:
        return await self._db.transact(_get, self._app, approval_id, write=False)

    async def of_call(self, run_id: str, call_id: str) -> ApprovalRecord | None:
        """The approval asked for this call of this run (the latest), if any: a resumed run
        meets it again instead of asking anew."""
        params = {"p_run_id": run_id, "p_call_id": call_id}
        return await self._db.transact(_first, _OF_CALL, params, write=False)

    async def use(self, approval_id: str) -> bool:
        """Mark an approved call as started; False when it was already (or is not
        approved): whichever process resumes its run, an approval runs its call once."""
        params = {"p_app": self._app, "p_id": approval_id, "now": self._clock()}
        return bool(await self._db.transact(_rowcount, _USE, params))

    async def decide(
        self, approval_id: str, decision: Decision, *, actor: str, via: str | None = None
    ) -> Outcome:
        """Approve or deny a pending approval whose time has not run out.

        `approve_session` also grants the tool, for the rest of the conversation generation,
        to each of the approval's requesters (an unknown one, "", gets nothing).
        When the approval is no longer pending (decided, expired, cancelled: a racer won) or
        its time ran out, nothing is written and the outcome carries the row as it is.
        Whether `actor` may decide is the caller's check (see `ApprovalRecord.approvers`).
        `via` names where the decision came from when not a card click (e.g. "console"); it
        goes into the audit row's detail.
        """
        if decision not in _DECIDED:
            raise ValueError(f"decision must be one of {DECISIONS}, not {decision!r}")
        return self._report(
            await self._db.transact(
                _decide,
                self._insert_grant,
                self._app,
                approval_id,
                decision,
                actor,
                self._clock(),
                via,
            )
        )

    async def expire(self, approval_id: str) -> Outcome:
        """End a pending approval whose time ran out (the waiting process's timer)."""
        return self._report(
            await self._db.transact(
                _close_one, self._app, approval_id, EXPIRED, None, self._clock()
            )
        )

    async def cancel(self, approval_id: str, note: str) -> Outcome:
        """End a pending approval nobody needs any more, e.g. its run was stopped."""
        return self._report(
            await self._db.transact(
                _close_one, self._app, approval_id, CANCELLED, note, self._clock()
            )
        )

    async def cancel_pending_writes(self, note: str = READ_ONLY_NOTE) -> list[ApprovalRecord]:
        """Cancel every pending approval of a call that is not a read (read-only mode was
        switched on); returns those this call cancelled, oldest first."""
        params = {"p_state": CANCELLED, "p_note": note, "now": self._clock()}
        cancelled = await self._db.transact(_close_all, _CLOSE_WRITES, params)
        return self._report_all(cancelled)

    async def cancel_run(self, run_id: str, note: str) -> list[ApprovalRecord]:
        """Cancel every pending approval of a run; returns those this call cancelled."""
        cancelled = await self._db.transact(_cancel_run, run_id, note, self._clock())
        return self._report_all(cancelled)

    async def states(self, approval_ids: Collection[str]) -> dict[str, str]:
        """The state of each approval that exists, in one query (a watcher's way to notice
        decisions recorded by other processes)."""
        ids = list(approval_ids)
        if not ids:
            return {}
        return await self._db.transact(_states, ids, write=False)

    async def close_orphans(self, *, grace_seconds: float = 5.0) -> list[ApprovalRecord]:
        """Close the pending approvals nobody waits for any more; returns those this call
        closed (their cards need updating).

        Cancelled with the note `RUN_GONE`: those whose owner no longer holds a live lease on
        the run's message (its process died, or the message was taken over or finished).
        Expired: those still pending `grace_seconds` past their expiry (the owner's timer
        should have expired them).
        """
        closed = await self._db.transact(_close_orphans, self._app, self._clock(), grace_seconds)
        return self._report_all(closed)

    def _report(self, outcome: Outcome) -> Outcome:
        if outcome.changed and outcome.record is not None:
            self._report_all([outcome.record])
        return outcome

    def _report_all(self, records: list[ApprovalRecord]) -> list[ApprovalRecord]:
        if self._on_outcome is not None:
            for record in records:
                session = record.state == APPROVED and record.session
                self._on_outcome("approved_session" if session else record.state)
        return records

    async def pending(self, *, limit: int = 50) -> list[ApprovalRecord]:
        """The pending approvals, newest first."""
        return await self._db.transact(_pending, limit, write=False)

    async def granted(self, scope_key: str, generation: int, tool: str, requester: str) -> bool:
        """Whether `requester` was approved to run `tool` for the rest of this conversation
        generation."""
        return await self.granted_to_all(scope_key, generation, tool, (requester,))

    async def granted_to_all(
        self, scope_key: str, generation: int, tool: str, requesters: Collection[str]
    ) -> bool:
        """Whether every one of `requesters` was approved to run `tool` for the rest of this
        conversation generation: a call asked by several people goes unasked only then. False
        for nobody and for an unknown requester (""), whom no grant names."""
        asked = set(requesters)
        if not asked or "" in asked:
            return False
        params = {
            "scope_key": scope_key,
            "generation": generation,
            "tool": tool,
            "requesters": sorted(asked),
        }
        return await self._db.transact(_granted_to_all, params, asked, write=False)


# The transactions, run by `Database.transact` with a synchronous connection.


def _create(connection: Connection, values: dict[str, Any]) -> ApprovalRecord:
    return _record(connection.execute(_INSERT, values).mappings().one())


def _execute(connection: Connection, statement: Any, params: dict[str, Any]) -> None:
    connection.execute(statement, params)


def _first(connection: Connection, statement: Any, params: dict[str, Any]) -> ApprovalRecord | None:
    row = connection.execute(statement, params).mappings().first()
    return None if row is None else _record(row)


def _rowcount(connection: Connection, statement: Any, params: dict[str, Any]) -> int:
    return int(connection.execute(statement, params).rowcount)


def _get(connection: Connection, app: str, approval_id: str) -> ApprovalRecord | None:
    row = connection.execute(_BY_ID, {"p_app": app, "p_id": approval_id}).mappings().first()
    return None if row is None else _record(row)


def _decide(
    connection: Connection,
    insert_grant: Any,
    app: str,
    approval_id: str,
    decision: Decision,
    actor: str,
    now: float,
    via: str | None = None,
) -> Outcome:
    state, session, action = _DECIDED[decision]
    params = {
        "p_app": app,
        "p_id": approval_id,
        "p_state": state,
        "p_session": session,
        "p_actor": actor,
        "now": now,
    }
    row = connection.execute(_DECIDE, params).mappings().first()
    if row is None:
        return Outcome(False, _get(connection, app, approval_id))
    record = _record(row)
    grantees = sorted({requester for requester in record.requesters if requester})
    if session and grantees:
        connection.execute(
            insert_grant,
            [
                {
                    **params,
                    "p_scope_key": record.scope_key,
                    "p_generation": record.generation,
                    "p_tool": record.tool,
                    "p_requester": requester,
                }
                for requester in grantees
            ],
        )
    _audit(connection, record, action, actor, now, via)
    return Outcome(True, record)


def _close_one(
    connection: Connection, app: str, approval_id: str, state: str, note: str | None, now: float
) -> Outcome:
    params = {"p_app": app, "p_id": approval_id, "p_state": state, "p_note": note, "now": now}
    row = connection.execute(_CLOSE_ONE, params).mappings().first()
    if row is None:
        return Outcome(False, _get(connection, app, approval_id))
    record = _record(row)
    _audit(connection, record, f"approval.{state}", None, now)
    return Outcome(True, record)


def _cancel_run(connection: Connection, run_id: str, note: str, now: float) -> list[ApprovalRecord]:
    params = {"p_run_id": run_id, "p_state": CANCELLED, "p_note": note, "now": now}
    return _closed(connection, connection.execute(_CLOSE_RUN, params), now)


def _close_all(
    connection: Connection, statement: Any, params: dict[str, Any]
) -> list[ApprovalRecord]:
    return _closed(connection, connection.execute(statement, params), params["now"])


def _close_orphans(
    connection: Connection, app: str, now: float, grace_seconds: float
) -> list[ApprovalRecord]:
    params = {"p_app": app, "p_state": CANCELLED, "p_note": RUN_GONE, "now": now}
    closed = _closed(connection, connection.execute(_CLOSE_ORPHANED, params), now)
    params = {
        "p_app": app,
        "p_state": EXPIRED,
        "p_note": None,
        "now": now,
        "cutoff": now - grace_seconds,
    }
    closed += _closed(connection, connection.execute(_CLOSE_OVERDUE, params), now)
    return closed


def _closed(connection: Connection, result: Any, now: float) -> list[ApprovalRecord]:
    """The records a system close changed, oldest first, each with its audit row."""
    records = sorted(map(_record, result.mappings()), key=lambda r: (r.created_at, r.id))
    for record in records:
        _audit(connection, record, f"approval.{record.state}", None, now)
    return records


def _states(connection: Connection, ids: list[str]) -> dict[str, str]:
    return dict(connection.execute(_STATES, {"p_ids": ids}).all())


def _pending(connection: Connection, limit: int) -> list[ApprovalRecord]:
    return [_record(row) for row in connection.execute(_PENDING, {"limit": limit}).mappings()]


def _granted_to_all(connection: Connection, params: dict[str, Any], asked: set[str]) -> bool:
    granted = {row[0] for row in connection.execute(_GRANTEES, params)}
    return asked <= granted


def _audit(
    connection: Connection,
    record: ApprovalRecord,
    action: str,
    actor: str | None,
    now: float,
    via: str | None = None,
) -> None:
    # The whole call, as it was shown and as it runs (or would have run): what was decided.
    detail: dict[str, Any] = {
        "tool": record.tool,
        "run_id": record.run_id,
        "requester": record.requester,
        "requesters": list(record.requesters),
        "arguments": record.arguments,
        "arguments_sha256": hashlib.sha256(record.arguments.encode()).hexdigest(),
    }
    if record.note is not None:
        detail["note"] = record.note
    if record.profile is not None:
        detail["profile"] = record.profile
    if via is not None:
        detail["via"] = via
    write_audit(
        connection,
        AuditEntry(
            action,
            actor=actor,
            target=record.id,
            chat_id=record.chat_id,
            detail=detail,
            app=record.app,
        ),
        now,
    )

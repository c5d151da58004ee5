"""The tables. Times are float epoch seconds (`Double`), JSON is stored as text.

`migrations/versions/` must create exactly these tables (a test compares them). The stores
return frozen value objects, never these rows.
"""

from __future__ import annotations

from typing import Literal, get_args

from sqlalchemy import (
    Boolean,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlmodel import Field, SQLModel

# message_claims.state
CLAIMED = "claimed"
REPLIED = "replied"
DONE = "done"
DROPPED = "dropped"
FAILED = "failed"
CLAIM_STATES = (CLAIMED, REPLIED, DONE, DROPPED, FAILED)

# runs.status
RUN_STATUSES = (
    "running",
    "completed",
    "max_iterations",
    "cycle_stopped",
    "cancelled",
    "error",
    "interrupted",
)

# conversation_messages.role
HistoryRole = Literal["user", "assistant"]
ROLES: tuple[HistoryRole, ...] = get_args(HistoryRole)

# approvals.state
# approvals.state: one list with the approval card (bot.approval_states)


def table_of(model: type[SQLModel]) -> Table:
    """The Core table of a SQLModel class, which the stores build their statements on."""
    table: Table = model.__table__  # type: ignore[attr-defined]  # set by SQLModel's metaclass
    return table


# The app a row belongs to (migration 0016): "" is the default app.
_APP = {"server_default": "", "nullable": False}


class MessageClaimRow(SQLModel, table=True):
    """One inbound message: who handles it, until when, and how far it got."""

    __tablename__ = "message_claims"
    __table_args__ = (
        Index("ix_message_claims_state_lease_until", "state", "lease_until"),
        Index("ix_message_claims_updated_at", "updated_at"),
    )

    # "" for the default app, else the [apps.NAME]'s name: one message can reach two apps.
    app: str = Field(default="", sa_type=String, primary_key=True, sa_column_kwargs=_APP)
    message_id: str = Field(sa_type=String, primary_key=True)
    state: str = Field(sa_type=String)
    owner: str = Field(sa_type=String)
    lease_until: float = Field(sa_type=Double)
    attempts: int = Field(sa_type=Integer)
    payload: str = Field(sa_type=Text)
    conversation_key: str | None = Field(default=None, sa_type=String)
    reply_message_id: str | None = Field(default=None, sa_type=String)
    reason: str | None = Field(default=None, sa_type=Text)
    created_at: float = Field(sa_type=Double)
    updated_at: float = Field(sa_type=Double)


class ConversationRow(SQLModel, table=True):
    """One generation of a scope's conversation; `/reset` adds the next generation."""

    __tablename__ = "conversations"
    __table_args__ = (
        # Its index also answers lookups by scope_key alone.
        UniqueConstraint("scope_key", "generation", name="uq_conversations_scope_key_generation"),
    )

    id: str = Field(sa_type=String, primary_key=True)
    scope_key: str = Field(sa_type=String)
    generation: int = Field(sa_type=Integer)
    created_at: float = Field(sa_type=Double)


class ConversationMessageRow(SQLModel, table=True):
    """One turn of a conversation's history."""

    __tablename__ = "conversation_messages"
    __table_args__ = (
        Index("ix_conversation_messages_conversation_id_id", "conversation_id", "id"),
    )

    id: int | None = Field(default=None, sa_type=Integer, primary_key=True)
    conversation_id: str = Field(
        sa_column=Column(
            "conversation_id",
            String,
            ForeignKey("conversations.id", ondelete="CASCADE"),
            nullable=False,
        )
    )
    role: str = Field(sa_type=String)
    content: str = Field(sa_type=Text)
    message_id: str | None = Field(default=None, sa_type=String)
    created_at: float = Field(sa_type=Double)


class RunRow(SQLModel, table=True):
    """One agent run: its outcome and what it cost."""

    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_started_at", "started_at"),
        # Only the runs still running: the sweep for orphans reads them; a finished run
        # (nearly every row) is not written to it.
        Index(
            "ix_runs_running",
            "started_at",
            sqlite_where=text("status = 'running'"),
            postgresql_where=text("status = 'running'"),
        ),
    )

    id: str = Field(sa_type=String, primary_key=True)
    app: str = Field(default="", sa_type=String, sa_column_kwargs=_APP)
    conversation_id: str = Field(sa_type=String)
    message_id: str = Field(sa_type=String)
    owner: str | None = Field(default=None, sa_type=String)
    status: str = Field(sa_type=String)
    model: str = Field(sa_type=String)
    iterations: int = Field(default=0, sa_type=Integer)
    prompt_tokens: int = Field(default=0, sa_type=Integer)
    completion_tokens: int = Field(default=0, sa_type=Integer)
    total_tokens: int = Field(default=0, sa_type=Integer)
    tool_calls: int = Field(default=0, sa_type=Integer)
    feishu_calls: int = Field(default=0, sa_type=Integer)
    error: str | None = Field(default=None, sa_type=Text)
    started_at: float = Field(sa_type=Double)
    finished_at: float | None = Field(default=None, sa_type=Double)
    # The agent profile the run's chat is routed to (None: the default agent).
    profile: str | None = Field(default=None, sa_type=String)


class ConnectorCallRow(SQLModel, table=True):
    """One tool call through a connector: what, how it went, how long (no arguments kept)."""

    __tablename__ = "connector_call_log"
    __table_args__ = (
        Index("ix_connector_call_log_created_at", "created_at"),
        Index("ix_connector_call_log_run_id", "run_id"),
    )

    id: int | None = Field(default=None, sa_type=Integer, primary_key=True)
    run_id: str = Field(sa_type=String)
    tool: str = Field(sa_type=String)
    connector: str = Field(sa_type=String)
    arguments_digest: str = Field(sa_type=String)
    ok: bool = Field(sa_type=Boolean)
    error: str | None = Field(default=None, sa_type=Text)
    duration_ms: float = Field(sa_type=Double)
    created_at: float = Field(sa_type=Double)


class ApprovalRow(SQLModel, table=True):
    """One tool call waiting for (or past) a human's decision."""

    __tablename__ = "approvals"
    __table_args__ = (
        Index("ix_approvals_state_created_at", "state", "created_at"),
        Index("ix_approvals_run_id", "run_id"),
    )

    id: str = Field(sa_type=String, primary_key=True)
    app: str = Field(default="", sa_type=String, sa_column_kwargs=_APP)
    run_id: str = Field(sa_type=String)
    scope_key: str = Field(sa_type=String)
    generation: int = Field(sa_type=Integer)
    chat_id: str = Field(sa_type=String)
    message_id: str = Field(sa_type=String)
    thread_id: str = Field(sa_type=String)
    tool: str = Field(sa_type=String)
    connector: str | None = Field(default=None, sa_type=String)
    arguments: str = Field(sa_type=Text)
    reason: str | None = Field(default=None, sa_type=Text)
    requester: str = Field(sa_type=String)  # who started the run (the first of `requesters`)
    # A JSON list of open_ids: everyone whose message is in the run that asked, the starter
    # first (bot/askers.py). "[]" only in a row written without it: its requester alone.
    requesters: str = Field(
        default="[]", sa_column=Column(Text, nullable=False, server_default="[]")
    )
    approvers: str = Field(sa_type=Text)  # a JSON list of open_ids
    owner: str = Field(sa_type=String)
    state: str = Field(sa_type=String)
    session: bool = Field(sa_type=Boolean)
    created_at: float = Field(sa_type=Double)
    expires_at: float = Field(sa_type=Double)
    decided_at: float | None = Field(default=None, sa_type=Double)
    decided_by: str | None = Field(default=None, sa_type=String)
    note: str | None = Field(default=None, sa_type=Text)
    card_message_id: str | None = Field(default=None, sa_type=String)
    # "read" or "write": read-only mode cancels and refuses the approvals of writes.
    side_effect: str = Field(
        default="write", sa_column=Column(String, nullable=False, server_default="write")
    )
    # When the approved call started to run: an approval lets its call run once, whichever
    # process resumes the run (a resumed run meets its approval again).
    used_at: float | None = Field(default=None, sa_type=Double)
    # The engine's id of the call (unique within its run): a resumed run finds its approval.
    call_id: str | None = Field(default=None, sa_type=String)
    # The agent profile of the run that asked (None: the default agent).
    profile: str | None = Field(default=None, sa_type=String)


class ApprovalGrantRow(SQLModel, table=True):
    """A tool approved for one person for the rest of a conversation generation.

    Keyed by the requester too: in a group conversation everyone shares, Bob's grant must not
    let Carol run the same tool unasked. An approval asked by several people grants a row to
    each; a call runs under grants only when every one of its askers has one."""

    __tablename__ = "approval_grants"

    scope_key: str = Field(sa_type=String, primary_key=True)
    generation: int = Field(sa_type=Integer, primary_key=True)
    tool: str = Field(sa_type=String, primary_key=True)
    requester: str = Field(sa_type=String, primary_key=True)
    granted_by: str = Field(sa_type=String)
    granted_at: float = Field(sa_type=Double)
    approval_id: str = Field(sa_type=String)


class OrgSettingRow(SQLModel, table=True):
    """One setting of the organisation, shared by every process; the value is JSON."""

    __tablename__ = "org_settings"

    key: str = Field(sa_type=String, primary_key=True)
    value: str = Field(sa_type=Text)
    updated_by: str | None = Field(default=None, sa_type=String)
    updated_at: float = Field(sa_type=Double)
    # Bumped by every change: a button rendered for version N cannot switch version N+1.
    version: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))


class ReplayGuardRow(SQLModel, table=True):
    """A request already acted on (a card callback's event id), until its replay window ends.

    Shared by every process: the same signed bytes replayed to another replica inside the
    window are refused there too."""

    __tablename__ = "replay_guard"
    __table_args__ = (Index("ix_replay_guard_expires_at", "expires_at"),)

    key: str = Field(sa_type=String, primary_key=True)
    expires_at: float = Field(sa_type=Double)


class AuditLogRow(SQLModel, table=True):
    """One governance event: who did what to what, where; `detail` is JSON."""

    __tablename__ = "audit_log"
    __table_args__ = (
        Index("ix_audit_log_at", "at"),
        Index("ix_audit_log_action", "action"),
    )

    id: int | None = Field(default=None, sa_type=Integer, primary_key=True)
    app: str = Field(default="", sa_type=String, sa_column_kwargs=_APP)
    at: float = Field(sa_type=Double)
    actor: str | None = Field(default=None, sa_type=String)
    action: str = Field(sa_type=String)
    target: str | None = Field(default=None, sa_type=String)
    chat_id: str | None = Field(default=None, sa_type=String)
    detail: str = Field(sa_type=Text)


class UsageDailyRow(SQLModel, table=True):
    """Tokens and messages a subject ("user:ou_x", "group:oc_y") used on one day.

    Days follow the configured time zone (LARKGATE_TIMEZONE), so budgets reset at local
    midnight."""

    __tablename__ = "usage_daily"

    day: str = Field(sa_type=String, primary_key=True)  # YYYY-MM-DD
    subject: str = Field(sa_type=String, primary_key=True)
    tokens: int = Field(sa_type=Integer)
    messages: int = Field(sa_type=Integer)


class RateWindowRow(SQLModel, table=True):
    """Messages a subject sent in one fixed rate-limit window."""

    __tablename__ = "rate_windows"

    subject: str = Field(sa_type=String, primary_key=True)
    window_start: int = Field(sa_type=Integer, primary_key=True)
    count: int = Field(sa_type=Integer)


class ConversationLockRow(SQLModel, table=True):
    """Which process runs a conversation now, until when (renewed while it works).

    Several server processes share the work; a conversation's turns must still run one
    at a time and see each other's history. A crashed holder's lock lapses with its
    lease, like its message claims.
    """

    __tablename__ = "conversation_locks"

    scope_key: str = Field(sa_type=String, primary_key=True)
    owner: str = Field(sa_type=String)
    lease_until: float = Field(sa_type=Double)


class FeishuApiCallsRow(SQLModel, table=True):
    """Feishu API calls an app made in a month, added up by every process.

    Feishu's free tier allows a tenant 10,000 calls a month; a custom app lives in one
    tenant, so the app id stands for it. ``notified_level`` is the highest budget step
    the admins were told about this month (each step is told once, by one process).
    """

    __tablename__ = "feishu_api_calls"

    app_id: str = Field(sa_type=String, primary_key=True)
    month: str = Field(sa_type=String, primary_key=True)  # YYYY-MM, in LARKGATE_TIMEZONE
    calls: int = Field(sa_type=Integer)
    notified_level: int = Field(sa_type=Integer, default=0)
    updated_at: float = Field(sa_type=Double)


class ScheduledTaskRow(SQLModel, table=True):
    """A task the agent runs on a schedule (a one-off `at` or a `cron`), in its chat.

    `next_run_at` is the due time still to fire (None once it ended); claiming a due time is a
    conditional update of it, so each due time fires once across processes."""

    __tablename__ = "scheduled_tasks"
    __table_args__ = (
        Index("ix_scheduled_tasks_state_next_run_at", "state", "next_run_at"),
        Index("ix_scheduled_tasks_creator_state", "creator", "state"),
    )

    id: str = Field(sa_type=String, primary_key=True)
    app: str = Field(default="", sa_type=String, sa_column_kwargs=_APP)
    name: str = Field(sa_type=String)
    prompt: str = Field(sa_type=Text)
    creator: str = Field(sa_type=String)  # open_id
    chat_id: str = Field(sa_type=String)
    chat_type: str = Field(sa_type=String)
    thread_id: str = Field(sa_type=String)  # "" when not in a thread
    reply_to: str = Field(sa_type=String)  # the message to post under; "" posts to the chat
    kind: str = Field(sa_type=String)  # "at" or "cron"
    expression: str = Field(sa_type=String)
    timezone: str = Field(sa_type=String)
    state: str = Field(sa_type=String)  # active, paused, cancelled, done
    next_run_at: float | None = Field(default=None, sa_type=Double)
    last_run_at: float | None = Field(default=None, sa_type=Double)
    last_outcome: str | None = Field(default=None, sa_type=Text)
    failures: int = Field(sa_type=Integer)  # consecutive
    created_at: float = Field(sa_type=Double)
    created_in_run: str = Field(sa_type=String)  # "" when created in the console
    updated_at: float = Field(sa_type=Double)


class ScheduledFiringRow(SQLModel, table=True):
    """One due time of a task being run, or run: who runs it, until when (a lease, renewed),
    which attempt. Unique per (task, due time): a due time fires once."""

    __tablename__ = "scheduled_firings"
    __table_args__ = (
        UniqueConstraint("task_id", "due_at", name="uq_scheduled_firings_task_id_due_at"),
        Index("ix_scheduled_firings_state_lease_until", "state", "lease_until"),
    )

    id: str = Field(sa_type=String, primary_key=True)
    task_id: str = Field(
        sa_column=Column(
            "task_id",
            String,
            ForeignKey("scheduled_tasks.id", ondelete="CASCADE"),
            nullable=False,
        )
    )
    due_at: float = Field(sa_type=Double)
    state: str = Field(sa_type=String)  # running, done, failed
    owner: str = Field(sa_type=String)
    lease_until: float = Field(sa_type=Double)
    attempt: int = Field(sa_type=Integer)
    detail: str | None = Field(default=None, sa_type=Text)
    created_at: float = Field(sa_type=Double)
    updated_at: float = Field(sa_type=Double)


class UserTokenRow(SQLModel, table=True):
    """A person's Feishu user tokens (issue 18), encrypted: ``ciphertext`` is a Fernet token
    of the access and refresh tokens. Expiries and scope stay in the clear so that the
    refresh decision and the console need no key. ``refreshing_until`` is the refresh lease:
    one process refreshes while the others wait for its result."""

    __tablename__ = "user_tokens"

    open_id: str = Field(sa_type=String, primary_key=True)
    ciphertext: str = Field(sa_type=Text, repr=False)
    expires_at: float = Field(sa_type=Double)
    refresh_expires_at: float = Field(sa_type=Double)
    scope: str = Field(sa_type=Text)
    refreshing_until: float = Field(sa_type=Double)
    refresh_owner: str = Field(sa_type=String)
    created_at: float = Field(sa_type=Double)
    updated_at: float = Field(sa_type=Double)


class UserAuthorizationRow(SQLModel, table=True):
    """A request for a person's consent (issue 18): the authorisation card posted for it and
    where it stands. ``id`` is the OAuth state's nonce, so the callback (on any replica)
    finds the request it answers; ``state`` moves once, from ``pending`` to ``authorised``,
    ``expired``, ``cancelled`` or ``refused``, by a conditional update. No token is here."""

    __tablename__ = "user_authorizations"
    __table_args__ = (Index("ix_user_authorizations_state_expires_at", "state", "expires_at"),)

    id: str = Field(sa_type=String, primary_key=True)
    open_id: str = Field(sa_type=String)  # who must consent: the person who asked
    chat_id: str = Field(sa_type=String)
    message_id: str = Field(sa_type=String)  # the card replies to it
    thread_id: str = Field(sa_type=String)  # "" when not in a thread
    scopes: str = Field(sa_type=Text)  # space-separated, as the consent page asks them
    purpose: str = Field(sa_type=Text)  # what the bot wants to do, as the card says
    flow: str = Field(sa_type=String)  # code (redirect) or device
    state: str = Field(sa_type=String)
    note: str | None = Field(default=None, sa_type=Text)
    card_message_id: str | None = Field(default=None, sa_type=String)
    owner: str = Field(sa_type=String)  # the process that waits ("" when none does: /login)
    created_at: float = Field(sa_type=Double)
    expires_at: float = Field(sa_type=Double)
    decided_at: float | None = Field(default=None, sa_type=Double)


class RunCheckpointRow(SQLModel, table=True):
    """Where a run that waits for a person stands: what it needs to go on in any process.

    Written when the run starts waiting (an approval, a consent, a question), replaced at
    each later wait, deleted with the run's finish (``TurnJournal``). ``payload`` is JSON
    sealed by ``seal`` (an HMAC the runtime checks before it resumes from it).
    """

    __tablename__ = "run_checkpoints"
    __table_args__ = (Index("ix_run_checkpoints_message_id", "message_id", unique=True),)

    run_id: str = Field(sa_type=String, primary_key=True)
    # The message the run answers (its claim in message_claims); the ids of the messages
    # that joined it are in the payload.
    message_id: str = Field(sa_type=String)
    scope_key: str = Field(sa_type=String)
    generation: int = Field(sa_type=Integer)
    owner: str = Field(sa_type=String)  # the process that wrote it last
    payload: str = Field(sa_type=Text)
    seal: str = Field(sa_type=String)
    created_at: float = Field(sa_type=Double)
    updated_at: float = Field(sa_type=Double)


class QuestionRow(SQLModel, table=True):
    """A question the agent asked the person who asked it (the ``ask_user`` tool): the card
    posted for it and where it stands. ``state`` moves once, from ``pending`` to
    ``answered``, ``expired`` or ``cancelled``, by a conditional update; only ``asker``'s
    answer counts. A run resumed after a restart finds its question by (run_id, call_id)."""

    __tablename__ = "questions"
    __table_args__ = (
        Index("ix_questions_state_expires_at", "state", "expires_at"),
        Index("ix_questions_run_id_call_id", "run_id", "call_id"),
        Index("ix_questions_scope_key_state", "scope_key", "state"),
    )

    id: str = Field(sa_type=String, primary_key=True)
    app: str = Field(default="", sa_type=String, sa_column_kwargs=_APP)
    run_id: str = Field(sa_type=String)
    call_id: str = Field(sa_type=String)  # the tool call that asked
    scope_key: str = Field(sa_type=String)  # the conversation's (for /stop and /reset)
    generation: int = Field(sa_type=Integer)
    chat_id: str = Field(sa_type=String)
    message_id: str = Field(sa_type=String)  # the asker's message; the card replies to it
    thread_id: str = Field(sa_type=String)  # "" when not in a thread
    asker: str = Field(sa_type=String)  # open_id: the only person whose answer counts
    question: str = Field(sa_type=Text)
    options: str = Field(sa_type=Text)  # a JSON list of strings; "[]": a free-text answer
    state: str = Field(sa_type=String)
    answer: str | None = Field(default=None, sa_type=Text)
    answered_by: str | None = Field(default=None, sa_type=String)
    note: str | None = Field(default=None, sa_type=Text)  # e.g. why it was cancelled
    card_message_id: str | None = Field(default=None, sa_type=String)
    owner: str = Field(sa_type=String)  # the process whose run waits for the answer
    created_at: float = Field(sa_type=Double)
    expires_at: float = Field(sa_type=Double)
    decided_at: float | None = Field(default=None, sa_type=Double)


class BotHopsRow(SQLModel, table=True):
    """Bots' messages in a row in one conversation, no person's in between.

    Bots that mention each other could answer each other forever: an accepted bot message
    adds one, a person's message starts the count over, and past the cap the bot stays
    silent (``bot/runtime/intake/bot_peers.py``). ``told`` marks that the cutoff was said.
    """

    __tablename__ = "bot_hops"

    scope_key: str = Field(sa_type=String, primary_key=True)
    hops: int = Field(sa_type=Integer)
    told: bool = Field(default=False, sa_type=Boolean)
    updated_at: float = Field(sa_type=Double)


class MemoryRow(SQLModel, table=True):
    """One thing the bot was asked to remember (``remember``), for whom it is recalled.

    ``scope`` and ``owner`` say where it may be read: "person" (``owner``: their open_id;
    recalled only in their direct messages with the bot), "chat" (``owner``: the group's
    chat_id; only in that group) or "org" (``owner`` ""; everywhere). ``terms`` is the text
    cut into search terms (``bot/memory/terms.py``); SQLite indexes them in the FTS5 table
    ``memories_fts`` (migration 0017), PostgreSQL ranks them as a tsvector.
    """

    __tablename__ = "memories"
    __table_args__ = (Index("ix_memories_owner", "app", "scope", "owner", "created_at"),)

    id: str = Field(sa_type=String, primary_key=True)
    app: str = Field(default="", sa_type=String, sa_column_kwargs=_APP)
    scope: str = Field(sa_type=String)
    owner: str = Field(sa_type=String)
    text: str = Field(sa_type=Text)
    terms: str = Field(sa_type=Text)
    created_by: str = Field(sa_type=String)  # open_id of the person it was stored for
    chat_id: str | None = Field(default=None, sa_type=String)  # where it was stored
    created_at: float = Field(sa_type=Double)
    last_used_at: float = Field(sa_type=Double)  # stored or last recalled
    uses: int = Field(default=0, sa_type=Integer)  # times recalled

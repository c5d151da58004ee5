"""Persistence of the bot: SQLModel tables and SQLAlchemy Core, with Alembic migrations.

SQLite by default, PostgreSQL via `postgresql+asyncpg://`. It knows nothing of Feishu or the
engine: plain str, int and dict values go in and come out as frozen value objects.

    db = await Database.connect(url)
    await upgrade_async(url)  # or: await asyncio.to_thread(upgrade, url)
    ledger, conversations, runs = MessageLedger(db), ConversationStore(db), RunStore(db)
    journal = TurnJournal(db)  # a turn's history, run and claims in one transaction
    approvals, org = ApprovalStore(db), OrgSettingsStore(db)  # approvals, read-only mode
    audit, usage = AuditLog(db), UsageStore(db)  # the audit log; budgets and rate limits
    schedules = ScheduleStore(db)  # scheduled tasks; each due time claimed once, with a lease
    questions = QuestionStore(db)  # ask_user's questions; only the asker's answer counts, once

Each store method is one short transaction, `db.transact(fn, ...)`: a synchronous function that
runs all its statements (SQLAlchemy Core) on the SQLite thread, or under `run_sync` on PostgreSQL.
"""

from bot.store.api_calls import ApiCallLedger
from bot.store.approvals import (
    APPROVAL_STATES,
    ApprovalRecord,
    ApprovalStore,
    Decision,
    NewApproval,
    Outcome,
)
from bot.store.audit import AuditEntry, AuditLog, AuditRecord, write_audit
from bot.store.call_log import CallEntry, CallLogStore
from bot.store.checkpoints import CheckpointStore, StoredCheckpoint
from bot.store.conversations import (
    Conversation,
    ConversationStore,
    HistoryEntry,
    LoadedConversation,
)
from bot.store.db import DEFAULT_DATABASE_URL, Database, DatabaseConfigError, normalize_url
from bot.store.journal import FinishedTurn, TurnJournal
from bot.store.ledger import Claim, ClaimOutcome, LedgerEntry, MessageLedger
from bot.store.migrate import current_revision, head_revision, upgrade, upgrade_async
from bot.store.org import OrgSettingsStore, ReadOnlyMode, Switch
from bot.store.questions import (
    QUESTION_STATES,
    NewQuestion,
    QuestionOutcome,
    QuestionRecord,
    QuestionState,
    QuestionStore,
    Refusal,
)
from bot.store.replays import ReplayGuard
from bot.store.runs import RunRecord, RunStore
from bot.store.schedules import (
    TASK_STATES,
    Firing,
    ScheduledTask,
    ScheduleStore,
    TooManyTasks,
)
from bot.store.usage import UsageStore

__all__ = [
    "APPROVAL_STATES",
    "DEFAULT_DATABASE_URL",
    "QUESTION_STATES",
    "TASK_STATES",
    "ApiCallLedger",
    "ApprovalRecord",
    "ApprovalStore",
    "AuditEntry",
    "AuditLog",
    "AuditRecord",
    "CallEntry",
    "CallLogStore",
    "CheckpointStore",
    "Claim",
    "ClaimOutcome",
    "Conversation",
    "ConversationStore",
    "Database",
    "DatabaseConfigError",
    "Decision",
    "FinishedTurn",
    "Firing",
    "HistoryEntry",
    "LedgerEntry",
    "LoadedConversation",
    "MessageLedger",
    "NewApproval",
    "NewQuestion",
    "OrgSettingsStore",
    "Outcome",
    "QuestionOutcome",
    "QuestionRecord",
    "QuestionState",
    "QuestionStore",
    "ReadOnlyMode",
    "Refusal",
    "ReplayGuard",
    "RunRecord",
    "RunStore",
    "ScheduleStore",
    "ScheduledTask",
    "StoredCheckpoint",
    "Switch",
    "TooManyTasks",
    "TurnJournal",
    "UsageStore",
    "current_revision",
    "head_revision",
    "normalize_url",
    "upgrade",
    "upgrade_async",
    "write_audit",
]

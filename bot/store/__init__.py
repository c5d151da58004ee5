"""Persistence of the bot: SQLModel tables and SQLAlchemy Core, with Alembic migrations.

SQLite by default, PostgreSQL via `postgresql+asyncpg://`. It knows nothing of Feishu or the
engine: plain str, int and dict values go in and come out as frozen value objects.

    db = await Database.connect(url)
    await upgrade_async(url)  # or: await asyncio.to_thread(upgrade, url)
    ledger, conversations, runs = MessageLedger(db), ConversationStore(db), RunStore(db)
    journal = TurnJournal(db)  # a turn's history, run and claims in one transaction

Each store method is one short transaction, `db.transact(fn, ...)`: a synchronous function that
runs all its statements (SQLAlchemy Core) on the SQLite thread, or under `run_sync` on PostgreSQL.
"""

from bot.store.call_log import CallEntry, CallLogStore
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
from bot.store.runs import RunRecord, RunStore

__all__ = [
    "DEFAULT_DATABASE_URL",
    "CallEntry",
    "CallLogStore",
    "Claim",
    "ClaimOutcome",
    "Conversation",
    "ConversationStore",
    "Database",
    "DatabaseConfigError",
    "FinishedTurn",
    "HistoryEntry",
    "LedgerEntry",
    "LoadedConversation",
    "MessageLedger",
    "RunRecord",
    "RunStore",
    "TurnJournal",
    "current_revision",
    "head_revision",
    "normalize_url",
    "upgrade",
    "upgrade_async",
]

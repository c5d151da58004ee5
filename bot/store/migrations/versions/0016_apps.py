"""Which Feishu app a message claim, run, approval, question, scheduled task and audit entry
belong to ("" for the default app, else the ``[apps.NAME]``'s name).

One deployment may serve several apps (bot identities). The same message can reach two of
them (a group message that mentions both): each app claims and answers it, so a claim is
keyed by app and message. The rest is per app so that each app's sweeper, scheduler and
card handler touch only what that app posted (another app's cards are not its to edit).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_PER_APP = ("runs", "approvals", "questions", "audit_log", "scheduled_tasks")


def _app_column() -> sa.Column[str]:
    return sa.Column("app", sa.String(), nullable=False, server_default="")


def upgrade() -> None:
    _claims_keyed_by(("app", "message_id"))
    for table in _PER_APP:
        op.add_column(table, _app_column())


def downgrade() -> None:
    for table in reversed(_PER_APP):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("app")
    _claims_keyed_by(("message_id",))


_CLAIM_COLUMNS = (
    "message_id, state, owner, lease_until, attempts, payload, conversation_key, "
    "reply_message_id, reason, created_at, updated_at"
)


def _claims_keyed_by(key: tuple[str, ...]) -> None:
    """message_claims again with ``key`` as its primary key (and an app column when the
    key has one), its rows copied: one way for SQLite, which cannot alter a key, and
    PostgreSQL. Claims live two days, so the copy is small. Going back keeps the default
    app's rows only (without the column, two apps' claims on a message would clash)."""
    with_app = "app" in key
    op.create_table(
        "message_claims_next",
        *((_app_column(),) if with_app else ()),
        sa.Column("message_id", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("lease_until", sa.Double(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("conversation_key", sa.String(), nullable=True),
        sa.Column("reply_message_id", sa.String(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint(*key),
    )
    only_default = "" if with_app else " WHERE app = ''"
    op.execute(
        f"INSERT INTO message_claims_next ({_CLAIM_COLUMNS}) "
        f"SELECT {_CLAIM_COLUMNS} FROM message_claims{only_default}"
    )
    op.drop_index("ix_message_claims_state_lease_until", table_name="message_claims")
    op.drop_index("ix_message_claims_updated_at", table_name="message_claims")
    op.drop_table("message_claims")
    op.rename_table("message_claims_next", "message_claims")
    if op.get_bind().dialect.name == "postgresql":  # the name PostgreSQL gives a table's key
        op.execute(
            "ALTER TABLE message_claims "
            "RENAME CONSTRAINT message_claims_next_pkey TO message_claims_pkey"
        )
    op.create_index(
        "ix_message_claims_state_lease_until", "message_claims", ["state", "lease_until"]
    )
    op.create_index("ix_message_claims_updated_at", "message_claims", ["updated_at"])

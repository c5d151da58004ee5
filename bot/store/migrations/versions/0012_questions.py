"""Questions the agent asks the person who asked it (the ``ask_user`` tool), shared by
replicas: the card's answer, from whichever replica gets the click, ends the row once by a
conditional update, and a run resumed after a restart finds its question again.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "questions",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("call_id", sa.String(), nullable=False),
        sa.Column("scope_key", sa.String(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("chat_id", sa.String(), nullable=False),
        sa.Column("message_id", sa.String(), nullable=False),
        sa.Column("thread_id", sa.String(), nullable=False),
        sa.Column("asker", sa.String(), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("options", sa.Text(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("answered_by", sa.String(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("card_message_id", sa.String(), nullable=True),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.Column("decided_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_questions_state_expires_at", "questions", ["state", "expires_at"])
    op.create_index("ix_questions_run_id_call_id", "questions", ["run_id", "call_id"])
    op.create_index("ix_questions_scope_key_state", "questions", ["scope_key", "state"])


def downgrade() -> None:
    op.drop_index("ix_questions_scope_key_state", table_name="questions")
    op.drop_index("ix_questions_run_id_call_id", table_name="questions")
    op.drop_index("ix_questions_state_expires_at", table_name="questions")
    op.drop_table("questions")

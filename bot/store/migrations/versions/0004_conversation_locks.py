"""Conversation locks: one process at a time runs a conversation's turns.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "conversation_locks",
        sa.Column("scope_key", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("lease_until", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("scope_key"),
    )


def downgrade() -> None:
    op.drop_table("conversation_locks")

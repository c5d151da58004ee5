"""Requests for a person's consent to act as them (the authorisation cards), shared by replicas.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "user_authorizations",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("open_id", sa.String(), nullable=False),
        sa.Column("chat_id", sa.String(), nullable=False),
        sa.Column("message_id", sa.String(), nullable=False),
        sa.Column("thread_id", sa.String(), nullable=False),
        sa.Column("scopes", sa.Text(), nullable=False),
        sa.Column("purpose", sa.Text(), nullable=False),
        sa.Column("flow", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("card_message_id", sa.String(), nullable=True),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.Column("decided_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_user_authorizations_state_expires_at",
        "user_authorizations",
        ["state", "expires_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_user_authorizations_state_expires_at", table_name="user_authorizations")
    op.drop_table("user_authorizations")

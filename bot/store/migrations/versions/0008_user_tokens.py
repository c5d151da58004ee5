"""Per-user Feishu tokens, encrypted at rest, with a refresh lease.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "user_tokens",
        sa.Column("open_id", sa.String(), nullable=False),
        sa.Column("ciphertext", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.Column("refresh_expires_at", sa.Double(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("refreshing_until", sa.Double(), nullable=False),
        sa.Column("refresh_owner", sa.String(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("open_id"),
    )


def downgrade() -> None:
    op.drop_table("user_tokens")

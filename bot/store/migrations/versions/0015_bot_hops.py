"""Bot-to-bot messages in a row per conversation, for the loop guard.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "bot_hops",
        sa.Column("scope_key", sa.String(), primary_key=True),
        sa.Column("hops", sa.Integer(), nullable=False),
        sa.Column("told", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("updated_at", sa.Double(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("bot_hops")

"""Feishu API calls per app and month: the ledger behind FEISHU_MONTHLY_API_BUDGET.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "feishu_api_calls",
        sa.Column("app_id", sa.String(), nullable=False),
        sa.Column("month", sa.String(), nullable=False),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.Column("notified_level", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("app_id", "month"),
    )


def downgrade() -> None:
    op.drop_table("feishu_api_calls")

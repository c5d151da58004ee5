"""Runs that wait for a person outlive the process that ran them.

`run_checkpoints` holds, for each run waiting for an approval, a consent or an answer, what
it needs to go on (its messages, the pending calls, counters, the live card), so that the
process that takes its message over resumes it instead of starting again. An approval's
`call_id` lets the resumed run find its approval again, and `used_at` records that the
approved call started: it runs once, whichever process resumes the run.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_checkpoints",
        sa.Column("run_id", sa.String(), primary_key=True),
        sa.Column("message_id", sa.String(), nullable=False),
        sa.Column("scope_key", sa.String(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("seal", sa.String(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
    )
    op.create_index("ix_run_checkpoints_message_id", "run_checkpoints", ["message_id"], unique=True)
    op.add_column("approvals", sa.Column("used_at", sa.Double(), nullable=True))
    op.add_column("approvals", sa.Column("call_id", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("used_at")
        batch.drop_column("call_id")
    op.drop_index("ix_run_checkpoints_message_id", table_name="run_checkpoints")
    op.drop_table("run_checkpoints")

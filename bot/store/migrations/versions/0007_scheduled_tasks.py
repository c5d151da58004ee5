"""Scheduled tasks and their firings: each due time of a task is claimed once, with a lease.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scheduled_tasks",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("creator", sa.String(), nullable=False),
        sa.Column("chat_id", sa.String(), nullable=False),
        sa.Column("chat_type", sa.String(), nullable=False),
        sa.Column("thread_id", sa.String(), nullable=False),
        sa.Column("reply_to", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("expression", sa.String(), nullable=False),
        sa.Column("timezone", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("next_run_at", sa.Double(), nullable=True),
        sa.Column("last_run_at", sa.Double(), nullable=True),
        sa.Column("last_outcome", sa.Text(), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("created_in_run", sa.String(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    # The due tasks (the claim's scan), and a person's tasks (the cap and the list).
    op.create_index(
        "ix_scheduled_tasks_state_next_run_at", "scheduled_tasks", ["state", "next_run_at"]
    )
    op.create_index("ix_scheduled_tasks_creator_state", "scheduled_tasks", ["creator", "state"])
    op.create_table(
        "scheduled_firings",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("due_at", sa.Double(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("lease_until", sa.Double(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["scheduled_tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        # A due time fires once, whichever process claims it.
        sa.UniqueConstraint("task_id", "due_at", name="uq_scheduled_firings_task_id_due_at"),
    )
    op.create_index(
        "ix_scheduled_firings_state_lease_until", "scheduled_firings", ["state", "lease_until"]
    )


def downgrade() -> None:
    op.drop_index("ix_scheduled_firings_state_lease_until", table_name="scheduled_firings")
    op.drop_table("scheduled_firings")
    op.drop_index("ix_scheduled_tasks_creator_state", table_name="scheduled_tasks")
    op.drop_index("ix_scheduled_tasks_state_next_run_at", table_name="scheduled_tasks")
    op.drop_table("scheduled_tasks")

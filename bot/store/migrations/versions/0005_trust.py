"""Trust: per-requester grants, the side effect of each approval, versioned org settings, and
the replay guard for card callbacks.

Grants were keyed by conversation and tool, so anyone in a shared group chat inherited one
person's "approve for this conversation". They are now keyed by requester too; the old rows
are dropped rather than guessed at (each was granted to whoever asked, which the table did not
record), so a conversation that had a grant asks once more.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_table("approval_grants")
    op.create_table(
        "approval_grants",
        sa.Column("scope_key", sa.String(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("tool", sa.String(), nullable=False),
        sa.Column("requester", sa.String(), nullable=False),
        sa.Column("granted_by", sa.String(), nullable=False),
        sa.Column("granted_at", sa.Double(), nullable=False),
        sa.Column("approval_id", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("scope_key", "generation", "tool", "requester"),
    )
    # What the call does ("read" / "write"): read-only mode cancels and refuses only writes.
    op.add_column(
        "approvals",
        sa.Column("side_effect", sa.String(), nullable=False, server_default="write"),
    )
    # Bumped by every change, so a card rendered for one state cannot switch a newer one.
    op.add_column(
        "org_settings",
        sa.Column("version", sa.Integer(), nullable=False, server_default="0"),
    )
    op.create_table(
        "replay_guard",
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_index("ix_replay_guard_expires_at", "replay_guard", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_replay_guard_expires_at", table_name="replay_guard")
    op.drop_table("replay_guard")
    with op.batch_alter_table("org_settings") as batch:
        batch.drop_column("version")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("side_effect")
    op.drop_table("approval_grants")
    op.create_table(
        "approval_grants",
        sa.Column("scope_key", sa.String(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("tool", sa.String(), nullable=False),
        sa.Column("granted_by", sa.String(), nullable=False),
        sa.Column("granted_at", sa.Double(), nullable=False),
        sa.Column("approval_id", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("scope_key", "generation", "tool"),
    )

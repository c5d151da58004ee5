"""Which agent profile a run, and an approval it asked for, used.

A chat routed to a profile (larkgate.toml's ``[profiles.*]``) runs that profile's agent:
the run's row and its approvals say which, for the console, the approval card and audit.
NULL: the default agent (and every row from before profiles).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("profile", sa.String(), nullable=True))
    op.add_column("approvals", sa.Column("profile", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("profile")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("profile")

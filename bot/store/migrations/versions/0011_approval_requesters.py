"""Every asker of an approval: the people whose messages are in the run that asked.

A message sent while the bot is working joins the running reply, so a call may be asked
for by several people at once (``bot/askers.py``). An approval recorded only the run's
starter (`requester`): the card, the console and the audit log named Bob for a call that
Carol's message asked for too. `requesters` is the JSON list of them all, the starter
first; `requester` stays the starter. Earlier rows were asked by their requester alone and
are filled in so.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# The JSON list of one string, in each dialect's own JSON function (no quoting by hand).
_ONE_ASKER = {
    "sqlite": "json_array(requester)",
    "postgresql": "json_build_array(requester)::text",
}


def upgrade() -> None:
    op.add_column(
        "approvals",
        sa.Column("requesters", sa.Text(), nullable=False, server_default="[]"),
    )
    dialect = op.get_bind().dialect.name
    op.execute(f"UPDATE approvals SET requesters = {_ONE_ASKER[dialect]}")


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("requesters")

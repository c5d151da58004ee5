"""Two indexes fewer to write at the end of every turn.

`ix_conversations_scope_key` repeats the first column of the unique (scope_key, generation)
constraint's index, which answers every lookup by scope_key on its own. `ix_runs_status`
indexed every run for one query, the sweep for runs still `running` after their process
stopped: a partial index over those rows answers it, and a run recorded finished (nearly
all of them) is not written to it.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_RUNNING = sa.text("status = 'running'")


def upgrade() -> None:
    op.drop_index("ix_conversations_scope_key", table_name="conversations")
    op.drop_index("ix_runs_status", table_name="runs")
    op.create_index(
        "ix_runs_running",
        "runs",
        ["started_at"],
        sqlite_where=_RUNNING,
        postgresql_where=_RUNNING,
    )


def downgrade() -> None:
    op.drop_index("ix_runs_running", table_name="runs")
    op.create_index("ix_runs_status", "runs", ["status"])
    op.create_index("ix_conversations_scope_key", "conversations", ["scope_key"])

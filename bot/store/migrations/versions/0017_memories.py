"""Memories: what people asked the bot to remember, and whose they are.

SQLite keeps a full-text index of their terms beside them (FTS5, ``memories_fts``, kept
by triggers): each row holds its terms and an owner key, so a recall matches only the
memories of the owners it may read, through the index. PostgreSQL ranks the terms as a
tsvector made at query time from the few rows the owner index finds (no column of its own).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memories",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("app", sa.String(), nullable=False, server_default=""),
        sa.Column("scope", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("terms", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(), nullable=False),
        sa.Column("chat_id", sa.String(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("last_used_at", sa.Double(), nullable=False),
        sa.Column("uses", sa.Integer(), nullable=False),
    )
    op.create_index("ix_memories_owner", "memories", ["app", "scope", "owner", "created_at"])
    if op.get_bind().dialect.name == "sqlite":
        # owner_key: one token naming (app, scope, owner), written by the store.
        op.execute("CREATE VIRTUAL TABLE memories_fts USING fts5(terms, owner_key)")
        op.execute(
            "CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN "
            "DELETE FROM memories_fts WHERE rowid = old.rowid; END"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS memories_fts_delete")
        op.execute("DROP TABLE IF EXISTS memories_fts")
    op.drop_index("ix_memories_owner", table_name="memories")
    op.drop_table("memories")

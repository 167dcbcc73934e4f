"""Add catalog_changes: a sharded count of writes that change providers,
inventories, traits, aggregates or names, so API workers can tell when the
allocation candidate catalog they cache is current.

Revision ID: c7d1e4f2a9b3
Revises: a082b8bb98d0
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "c7d1e4f2a9b3"
down_revision = "a082b8bb98d0"
branch_labels = None
depends_on = None

SHARDS = 32


def upgrade():
    table = op.create_table(
        "catalog_changes",
        sa.Column("shard", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column(
            "changes", sa.BigInteger, nullable=False, server_default=sa.text("0")
        ),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.bulk_insert(table, [{"shard": shard, "changes": 0} for shard in range(SHARDS)])


def downgrade():
    op.drop_table("catalog_changes")

"""Add catalog_currency: the one comparison of the provider catalog with
the database per cloud (a lease on its one row, and what the holder's
fingerprint statement found at which shard counts), which every other
API process compares its own catalog with.

Revision ID: e5b2c9d7f1a6
Revises: d3a8f1c6b2e4
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "e5b2c9d7f1a6"
down_revision = "d3a8f1c6b2e4"
branch_labels = None
depends_on = None


def upgrade():
    table = op.create_table(
        "catalog_currency",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("holder", sa.String(128), nullable=True),
        sa.Column("beat", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("seqs", sa.Text, nullable=True),
        sa.Column("fingerprint", sa.Text, nullable=True),
        sa.Column("taken_us", sa.BigInteger, nullable=True),
        sa.Column("took_ms", sa.Integer, nullable=True),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.bulk_insert(table, [{"id": 1, "beat": 0}])


def downgrade():
    op.drop_table("catalog_currency")

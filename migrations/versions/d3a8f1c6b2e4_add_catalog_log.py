"""Add catalog_log: what each write counted in catalog_changes changed
(providers, resource classes, traits), numbered per shard, so API workers
can bring their provider catalog up to date instead of reading it again.

Revision ID: d3a8f1c6b2e4
Revises: c7d1e4f2a9b3
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "d3a8f1c6b2e4"
down_revision = "c7d1e4f2a9b3"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "catalog_log",
        sa.Column("shard", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("item", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("kind", sa.SmallInteger, nullable=False),
        sa.Column("ref", sa.Integer, nullable=False),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )


def downgrade():
    op.drop_table("catalog_log")

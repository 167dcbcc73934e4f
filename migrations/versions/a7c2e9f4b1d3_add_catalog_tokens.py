"""Add catalog_changes.token and catalog_log.token: every count a shard
takes comes with a new random token, written on the log rows it numbers,
so that a restore bringing counts back, followed by new writes taking them
up again, cannot pass for the history a worker's catalog followed
(objects/catalog/refresh.py). The triggers are made again to write them
(placement/db/triggers.py); the downgrade makes the old ones again.

Revision ID: a7c2e9f4b1d3
Revises: f6a1c3e8d2b7
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

from placement.db import triggers

revision = "a7c2e9f4b1d3"
down_revision = "f6a1c3e8d2b7"
branch_labels = None
depends_on = None


def upgrade():
    bind = op.get_bind()
    triggers.drop(bind)
    for table in ("catalog_changes", "catalog_log"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("token", sa.Integer, nullable=True))
    triggers.create(bind, per_row=True)


def downgrade():
    bind = op.get_bind()
    triggers.drop(bind)
    for table in ("catalog_log", "catalog_changes"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("token")
    triggers.create(bind, tokens=False)

"""Add catalog_log.uuid and the triggers that log every row change of the
catalog's tables, whoever writes it (placement/db/triggers.py). Where the
database refuses triggers, the revision warns and goes on without them:
the catalog then takes the fallback (doc/operations.md).

Revision ID: f6a1c3e8d2b7
Revises: e5b2c9d7f1a6
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

from placement.db import triggers

revision = "f6a1c3e8d2b7"
down_revision = "e5b2c9d7f1a6"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("catalog_log") as batch:
        batch.add_column(sa.Column("uuid", sa.String(36), nullable=True))
    triggers.create(op.get_bind(), tokens=False)


def downgrade():
    triggers.drop(op.get_bind())
    with op.batch_alter_table("catalog_log") as batch:
        batch.drop_column("uuid")

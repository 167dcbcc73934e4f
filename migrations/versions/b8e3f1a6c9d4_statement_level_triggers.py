"""On PostgreSQL, the change-log triggers fire once per statement, with
its transition tables, rather than once per row: they log the same items
under the same numbers and token as those did, and update the shard's
count once per statement, where per row each update of the count added a
version of its row that the next one walked past (time quadratic in the
rows a statement writes: placement/db/triggers.py). MySQL, MariaDB and
SQLite keep the triggers per row. Where the database refuses them, the
revision warns and goes on without them (as f6a1c3e8d2b7). The downgrade
makes those per row again.

Revision ID: b8e3f1a6c9d4
Revises: a7c2e9f4b1d3
Create Date: 2026-11-29
"""

from alembic import op

from placement.db import triggers

revision = "b8e3f1a6c9d4"
down_revision = "a7c2e9f4b1d3"
branch_labels = None
depends_on = None


def upgrade():
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        triggers.create(bind)


def downgrade():
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        triggers.create(bind, per_row=True)

"""Add consumer_types and consumers.consumer_type_id.

Revision ID: 422ece571366
Revises: b5c396305c25
Create Date: 2020-10-26
"""

import sqlalchemy as sa
from alembic import op

revision = "422ece571366"
down_revision = "b5c396305c25"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "consumer_types",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.Unicode(255), nullable=False),
        sa.Column("created_at", sa.DateTime),
        sa.Column("updated_at", sa.DateTime),
        sa.UniqueConstraint("name", name="uniq_consumer_types0name"),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    with op.batch_alter_table("consumers") as batch:
        batch.add_column(sa.Column("consumer_type_id", sa.Integer, nullable=True))
        batch.create_index("consumers_consumer_type_id_idx", ["consumer_type_id"])
        batch.create_foreign_key(
            "consumers_consumer_type_id_fkey",
            "consumer_types",
            ["consumer_type_id"],
            ["id"],
        )

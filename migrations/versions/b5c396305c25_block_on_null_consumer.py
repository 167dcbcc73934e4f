"""Refuse to continue while allocations have no consumer record.

Revision ID: b5c396305c25
Revises: 611cd6dffd7b
Create Date: 2019-01-21
"""

import sqlalchemy as sa
from alembic import op

revision = "b5c396305c25"
down_revision = "611cd6dffd7b"
branch_labels = None
depends_on = None


def upgrade():
    count = op.get_bind().scalar(
        sa.text(
            "SELECT COUNT(*) FROM allocations a LEFT OUTER JOIN consumers c "
            "ON a.consumer_id = c.uuid WHERE c.id IS NULL"
        )
    )
    if count:
        raise Exception(
            "There is at least one allocation record which is missing a "
            "consumer record. Run the 'placement-manage db "
            "online_data_migrations' command."
        )

"""Refuse to continue while a provider has a null root_provider_id.

Revision ID: 611cd6dffd7b
Revises: b4ed3a175331
Create Date: 2019-01-15
"""

import sqlalchemy as sa
from alembic import op

revision = "611cd6dffd7b"
down_revision = "b4ed3a175331"
branch_labels = None
depends_on = None


def upgrade():
    count = op.get_bind().scalar(
        sa.text(
            "SELECT COUNT(*) FROM resource_providers WHERE root_provider_id IS NULL"
        )
    )
    if count:
        raise Exception(
            "There is at least one resource provider table record which "
            "misses its root provider id. Run the 'placement-manage db "
            "online_data_migrations' command."
        )

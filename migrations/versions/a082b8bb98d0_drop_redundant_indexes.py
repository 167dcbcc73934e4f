"""Drop indexes that duplicate unique constraints.

Revision ID: a082b8bb98d0
Revises: 422ece571366
Create Date: 2021-03-01
"""

from alembic import op

revision = "a082b8bb98d0"
down_revision = "422ece571366"
branch_labels = None
depends_on = None

REDUNDANT = [
    ("resource_providers", "resource_providers_uuid_idx"),
    ("resource_providers", "resource_providers_name_idx"),
    ("inventories", "inventories_resource_provider_id_idx"),
    ("inventories", "inventories_resource_provider_resource_class_idx"),
    ("placement_aggregates", "placement_aggregates_uuid_idx"),
]


def upgrade():
    for table, index in REDUNDANT:
        op.drop_index(index, table_name=table)

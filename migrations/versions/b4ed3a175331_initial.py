"""Initial schema: every table except consumer_types.

Revision ID: b4ed3a175331
Revises:
Create Date: 2018-10-19
"""

import sqlalchemy as sa
from alembic import op

revision = "b4ed3a175331"
down_revision = None
branch_labels = None
depends_on = None

# Binary collation: names, uuids and external ids compare case-sensitively
# on MySQL, as they do on SQLite.
MYSQL = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}


def _id():
    return sa.Column("id", sa.Integer, primary_key=True, autoincrement=True)


def _create(name, *items):
    op.create_table(
        name,
        *items,
        sa.Column("created_at", sa.DateTime),
        sa.Column("updated_at", sa.DateTime),
        **MYSQL,
    )


def upgrade():
    _create(
        "resource_providers",
        _id(),
        sa.Column("uuid", sa.String(36), nullable=False),
        sa.Column("name", sa.Unicode(200)),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column(
            "root_provider_id", sa.Integer, sa.ForeignKey("resource_providers.id")
        ),
        sa.Column(
            "parent_provider_id", sa.Integer, sa.ForeignKey("resource_providers.id")
        ),
        sa.UniqueConstraint("uuid", name="uniq_resource_providers0uuid"),
        sa.UniqueConstraint("name", name="uniq_resource_providers0name"),
        sa.Index("resource_providers_uuid_idx", "uuid"),
        sa.Index("resource_providers_name_idx", "name"),
        sa.Index("resource_providers_root_provider_id_idx", "root_provider_id"),
        sa.Index("resource_providers_parent_provider_id_idx", "parent_provider_id"),
    )
    _create(
        "inventories",
        _id(),
        sa.Column("resource_provider_id", sa.Integer, nullable=False),
        sa.Column("resource_class_id", sa.Integer, nullable=False),
        *[
            sa.Column(c, sa.Integer, nullable=False)
            for c in ("total", "reserved", "min_unit", "max_unit", "step_size")
        ],
        sa.Column("allocation_ratio", sa.Float, nullable=False),
        sa.UniqueConstraint(
            "resource_provider_id",
            "resource_class_id",
            name="uniq_inventories0resource_provider_resource_class",
        ),
        sa.Index("inventories_resource_provider_id_idx", "resource_provider_id"),
        sa.Index(
            "inventories_resource_provider_resource_class_idx",
            "resource_provider_id",
            "resource_class_id",
        ),
        sa.Index("inventories_resource_class_id_idx", "resource_class_id"),
    )
    _create(
        "allocations",
        _id(),
        sa.Column("resource_provider_id", sa.Integer, nullable=False),
        sa.Column("consumer_id", sa.String(36), nullable=False),
        sa.Column("resource_class_id", sa.Integer, nullable=False),
        sa.Column("used", sa.Integer, nullable=False),
        sa.Index(
            "allocations_resource_provider_class_used_idx",
            "resource_provider_id",
            "resource_class_id",
            "used",
        ),
        sa.Index("allocations_resource_class_id_idx", "resource_class_id"),
        sa.Index("allocations_consumer_id_idx", "consumer_id"),
    )
    _create(
        "resource_classes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.UniqueConstraint("name", name="uniq_resource_classes0name"),
    )
    _create(
        "traits",
        _id(),
        sa.Column("name", sa.Unicode(255), nullable=False),
        sa.UniqueConstraint("name", name="uniq_traits0name"),
    )
    _create(
        "resource_provider_traits",
        sa.Column(
            "trait_id",
            sa.Integer,
            sa.ForeignKey("traits.id"),
            primary_key=True,
            nullable=False,
        ),
        sa.Column(
            "resource_provider_id",
            sa.Integer,
            sa.ForeignKey("resource_providers.id"),
            primary_key=True,
            nullable=False,
        ),
        sa.Index(
            "resource_provider_traits_resource_provider_trait_idx",
            "resource_provider_id",
            "trait_id",
        ),
    )
    _create(
        "placement_aggregates",
        _id(),
        sa.Column("uuid", sa.String(36)),
        sa.UniqueConstraint("uuid", name="uniq_placement_aggregates0uuid"),
        sa.Index("placement_aggregates_uuid_idx", "uuid"),
    )
    _create(
        "resource_provider_aggregates",
        sa.Column("resource_provider_id", sa.Integer, primary_key=True, nullable=False),
        sa.Column("aggregate_id", sa.Integer, primary_key=True, nullable=False),
        sa.Index("resource_provider_aggregates_aggregate_id_idx", "aggregate_id"),
    )
    for name in ("projects", "users"):
        _create(
            name,
            _id(),
            sa.Column("external_id", sa.String(255), nullable=False),
            sa.UniqueConstraint("external_id", name="uniq_%s0external_id" % name),
        )
    _create(
        "consumers",
        _id(),
        sa.Column("uuid", sa.String(36), nullable=False),
        sa.Column("project_id", sa.Integer, nullable=False),
        sa.Column("user_id", sa.Integer, nullable=False),
        sa.Column(
            "generation", sa.Integer, nullable=False, server_default=sa.text("0")
        ),
        sa.UniqueConstraint("uuid", name="uniq_consumers0uuid"),
        sa.Index("consumers_project_id_uuid_idx", "project_id", "uuid"),
        sa.Index(
            "consumers_project_id_user_id_uuid_idx", "project_id", "user_id", "uuid"
        ),
    )

"""The placement schema as SQLAlchemy Core tables.

On MySQL every string column uses a binary collation so names, uuids and
external ids compare case-sensitively, exactly as on SQLite.
"""

import datetime
import typing

import sqlalchemy as sa

metadata = sa.MetaData()

MYSQL_TABLE_ARGS: dict[str, typing.Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


def _timestamps():
    return [
        sa.Column("created_at", sa.DateTime, default=utcnow),
        sa.Column("updated_at", sa.DateTime, onupdate=utcnow),
    ]


def _table(name, *columns):
    return sa.Table(name, metadata, *columns, *_timestamps(), **MYSQL_TABLE_ARGS)


resource_providers = _table(
    "resource_providers",
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("uuid", sa.String(36), nullable=False),
    sa.Column("name", sa.Unicode(200)),
    sa.Column("generation", sa.Integer, nullable=False, default=0),
    sa.Column("root_provider_id", sa.Integer, sa.ForeignKey("resource_providers.id")),
    sa.Column("parent_provider_id", sa.Integer, sa.ForeignKey("resource_providers.id")),
    sa.UniqueConstraint("uuid", name="uniq_resource_providers0uuid"),
    sa.UniqueConstraint("name", name="uniq_resource_providers0name"),
    sa.Index("resource_providers_root_provider_id_idx", "root_provider_id"),
    sa.Index("resource_providers_parent_provider_id_idx", "parent_provider_id"),
)

inventories = _table(
    "inventories",
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("resource_provider_id", sa.Integer, nullable=False),
    sa.Column("resource_class_id", sa.Integer, nullable=False),
    sa.Column("total", sa.Integer, nullable=False),
    sa.Column("reserved", sa.Integer, nullable=False),
    sa.Column("min_unit", sa.Integer, nullable=False),
    sa.Column("max_unit", sa.Integer, nullable=False),
    sa.Column("step_size", sa.Integer, nullable=False),
    sa.Column("allocation_ratio", sa.Float, nullable=False),
    sa.UniqueConstraint(
        "resource_provider_id",
        "resource_class_id",
        name="uniq_inventories0resource_provider_resource_class",
    ),
    sa.Index("inventories_resource_class_id_idx", "resource_class_id"),
)

allocations = _table(
    "allocations",
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
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

resource_classes = _table(
    "resource_classes",
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.String(255), nullable=False),
    sa.UniqueConstraint("name", name="uniq_resource_classes0name"),
)

traits = _table(
    "traits",
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.Unicode(255), nullable=False),
    sa.UniqueConstraint("name", name="uniq_traits0name"),
)

resource_provider_traits = _table(
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

placement_aggregates = _table(
    "placement_aggregates",
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("uuid", sa.String(36)),
    sa.UniqueConstraint("uuid", name="uniq_placement_aggregates0uuid"),
)

resource_provider_aggregates = _table(
    "resource_provider_aggregates",
    sa.Column("resource_provider_id", sa.Integer, primary_key=True, nullable=False),
    sa.Column("aggregate_id", sa.Integer, primary_key=True, nullable=False),
    sa.Index("resource_provider_aggregates_aggregate_id_idx", "aggregate_id"),
)

projects = _table(
    "projects",
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("external_id", sa.String(255), nullable=False),
    sa.UniqueConstraint("external_id", name="uniq_projects0external_id"),
)

users = _table(
    "users",
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("external_id", sa.String(255), nullable=False),
    sa.UniqueConstraint("external_id", name="uniq_users0external_id"),
)

consumer_types = _table(
    "consumer_types",
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.Unicode(255), nullable=False),
    sa.UniqueConstraint("name", name="uniq_consumer_types0name"),
)

consumers = _table(
    "consumers",
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("uuid", sa.String(36), nullable=False),
    sa.Column("project_id", sa.Integer, nullable=False),
    sa.Column("user_id", sa.Integer, nullable=False),
    sa.Column(
        "generation", sa.Integer, nullable=False, default=0, server_default=sa.text("0")
    ),
    sa.Column(
        "consumer_type_id",
        sa.Integer,
        sa.ForeignKey("consumer_types.id"),
        nullable=True,
    ),
    sa.UniqueConstraint("uuid", name="uniq_consumers0uuid"),
    sa.Index("consumers_project_id_uuid_idx", "project_id", "uuid"),
    sa.Index("consumers_project_id_user_id_uuid_idx", "project_id", "user_id", "uuid"),
    sa.Index("consumers_consumer_type_id_idx", "consumer_type_id"),
)

# Committed writes that change what the provider catalog (objects/catalog.py)
# caches per worker: providers, inventories, traits, aggregates and names;
# allocation writes don't count. Every such transaction adds one to a random
# shard, so concurrent writers rarely wait on the same row; readers sum the
# shards. A shard's count is also the sequence number of the transaction's
# rows in catalog_log.
CATALOG_SHARDS = 32
catalog_changes = sa.Table(
    "catalog_changes",
    metadata,
    sa.Column("shard", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("changes", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    # A random value (0..2**31-1) each count is given with: a restore that
    # brings a count back, then new writes taking it up again, cannot
    # bring the same token back (objects/catalog/history.py). NULL: none
    # yet (before the revision adding it).
    sa.Column("token", sa.Integer, nullable=True),
    **MYSQL_TABLE_ARGS,
)


@sa.event.listens_for(catalog_changes, "after_create")
def _add_shards(table, connection, **kw):
    # metadata.create_all (tests, tools) gets the rows the migration adds.
    connection.execute(
        table.insert(),
        [{"shard": shard, "changes": 0} for shard in range(CATALOG_SHARDS)],
    )


# What each counted write changed: one row per provider, resource class or
# trait (db/api.py, kinds), numbered by the shard's count after the
# transaction added its one. Holding the shard's row until commit, writers
# of a shard commit its numbers in order and without gaps; a worker reads
# the numbers past its catalog's to follow the changes (doc/architecture.md
# "Provider catalog").
catalog_log = sa.Table(
    "catalog_log",
    metadata,
    sa.Column("shard", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("item", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("kind", sa.SmallInteger, nullable=False),
    sa.Column("ref", sa.Integer, nullable=False),
    # The consumer of a CONSUMER change (its ``ref`` is 0).
    sa.Column("uuid", sa.String(36), nullable=True),
    # The token of the shard's count this number was (catalog_changes).
    sa.Column("token", sa.Integer, nullable=True),
    **MYSQL_TABLE_ARGS,
)


# The provider catalog's comparison with the database, one per cloud
# (catalog/currency.py): the process holding the lease (``holder``, renewed
# by each comparison it publishes, ``beat``) runs the fingerprint statement
# and stores what it found (``fingerprint``, JSON) with the shard counts of
# its snapshot (``seqs``, JSON) and the snapshot's time on the database's
# clock (``taken_us``, microseconds since the epoch); every other process
# compares its own catalog's fingerprint at those counts with it.
catalog_currency = sa.Table(
    "catalog_currency",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("holder", sa.String(128), nullable=True),
    sa.Column("beat", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    sa.Column("seqs", sa.Text, nullable=True),
    sa.Column("fingerprint", sa.Text, nullable=True),
    sa.Column("taken_us", sa.BigInteger, nullable=True),
    sa.Column("took_ms", sa.Integer, nullable=True),
    **MYSQL_TABLE_ARGS,
)


@sa.event.listens_for(catalog_currency, "after_create")
def _add_currency_row(table, connection, **kw):
    connection.execute(table.insert(), [{"id": 1, "beat": 0}])

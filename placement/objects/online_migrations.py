"""Online data migrations (``placement-manage db online_data_migrations``)
and the counts ``placement-status upgrade check`` reports.

Each migration takes a Database and a batch size, fixes at most that many
rows in one transaction, and returns ``(found, done)``: rows needing the fix
before the batch, rows fixed by it.
"""

import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects import common
from placement.objects.catalog import changes

RP = tables.resource_providers
ALLOC = tables.allocations
CONSUMERS = tables.consumers


def _missing_root():
    return sa.select(RP.c.id).where(RP.c.root_provider_id.is_(None))


def consumerless() -> sa.Select:
    """Distinct allocation consumer ids that have no consumer row."""
    return (
        sa.select(ALLOC.c.consumer_id)
        .outerjoin(CONSUMERS, CONSUMERS.c.uuid == ALLOC.c.consumer_id)
        .where(CONSUMERS.c.id.is_(None))
        .distinct()
    )


def _count(conn, select):
    return conn.scalar(sa.select(sa.func.count()).select_from(select.subquery()))


def count_missing_root_ids(db: db_api.Database) -> int:
    with db.reader() as conn:
        return _count(conn, _missing_root())


def count_incomplete_consumers(db: db_api.Database) -> int:
    with db.reader() as conn:
        return _count(conn, consumerless())


def set_root_provider_ids(db: db_api.Database, batch_size: int) -> tuple[int, int]:
    """Providers written before nesting existed are their own roots."""
    with db.writer() as conn:
        found = _count(conn, _missing_root())
        ids = conn.scalars(_missing_root().limit(batch_size)).all()
        if ids:
            conn.execute(
                RP.update().where(RP.c.id.in_(ids)).values(root_provider_id=RP.c.id)
            )
            changes.record(conn, changes.PROVIDER, ids)
    return found, len(ids)


def create_incomplete_consumers(
    db: db_api.Database, batch_size: int
) -> tuple[int, int]:
    """Consumer rows, owned by the configured "incomplete" project and user,
    for allocations written before consumers were recorded."""
    with db.writer() as conn:
        found = _count(conn, consumerless())
        uuids = conn.scalars(consumerless().limit(batch_size)).all()
        if uuids:
            project = db.conf.placement.incomplete_consumer_project_id
            user = db.conf.placement.incomplete_consumer_user_id
            projects, _ = common.ensure_ids(
                conn, tables.projects, "external_id", [project]
            )
            users, _ = common.ensure_ids(conn, tables.users, "external_id", [user])
            project_id, user_id = projects[project], users[user]
            conn.execute(
                db.insert_ignore(CONSUMERS),
                [
                    {
                        "uuid": u,
                        "project_id": project_id,
                        "user_id": user_id,
                        "generation": 0,
                    }
                    for u in uuids
                ],
            )
    return found, len(uuids)


# Name -> migration, in the order they run.
MIGRATIONS = {
    "set_root_provider_ids": set_root_provider_ids,
    "create_incomplete_consumers": create_incomplete_consumers,
}

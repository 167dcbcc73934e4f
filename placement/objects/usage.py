"""Usages: sums of allocated amounts, per provider or per project/user."""

import numpy as np
import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects import common
from placement.objects.catalog import project_usage
from placement.objects.catalog import refresh

ALLOC = tables.allocations
INV = tables.inventories
RC = tables.resource_classes
CONSUMERS = tables.consumers
TYPES = tables.consumer_types

UNKNOWN_TYPE = "unknown"
ALL_TYPES = "all"


def provider_usages(db: db_api.Database, rp_uuid: str) -> tuple[int, dict[str, int]]:
    """(generation, {class: used}) with one entry per inventory class of the
    provider. ResourceProviderNotFound for an unknown provider. From the
    catalog where it holds usage and is current (the stamp the one
    statement, in autocommit: ``Database.single_read``), else by SQL in a
    read transaction."""
    # Without the triggers, no look at the stamp: SQL answers anyway.
    if refresh.logged_by_triggers(db):
        with db.single_read() as conn:
            catalog = refresh.current(db, conn)
        used = None if catalog is None else refresh.used_of(db, catalog)
        if used is not None:
            return _from_memory(catalog, used, rp_uuid)
    with db.reader() as conn:
        provider = common.get_provider(conn, rp_uuid)
        rows = conn.execute(
            sa.select(RC.c.name, sa.func.coalesce(sa.func.sum(ALLOC.c.used), 0))
            .select_from(
                INV.join(RC, RC.c.id == INV.c.resource_class_id).outerjoin(
                    ALLOC,
                    sa.and_(
                        ALLOC.c.resource_provider_id == INV.c.resource_provider_id,
                        ALLOC.c.resource_class_id == INV.c.resource_class_id,
                    ),
                )
            )
            .where(INV.c.resource_provider_id == provider["id"])
            .group_by(RC.c.name)
        ).all()
    return provider["generation"], {name: int(used) for name, used in rows}


def _from_memory(catalog, used, rp_uuid):
    rp = catalog.ids.get(rp_uuid)
    generation = None if rp is None else used.generation_of(rp)
    if generation is None:
        raise common.provider_not_found(rp_uuid)
    asked = np.array([rp], dtype=np.int64)
    names = catalog.class_names
    return generation, {
        names[rc]: int(used.of(rc, asked)[0])
        for rc, _ in catalog.by_provider.get(rp, ())
    }


def total_usages(
    db: db_api.Database, project_id: str, user_id: str | None = None
) -> dict[str, int]:
    """{class: used} over the consumers of a project (and user)."""
    groups = _usages(db, project_id, user_id, ALL_TYPES)
    usage = groups.get(ALL_TYPES, {})
    usage.pop("consumer_count", None)
    return usage


def usages_by_type(
    db: db_api.Database,
    project_id: str,
    user_id: str | None = None,
    consumer_type: str | None = None,
) -> dict[str, dict[str, int]]:
    """{group: {class: used, "consumer_count": n}} (v1.38 grouping):
    ``consumer_type`` None groups by type, "all" is one group, "unknown"
    only untyped consumers, any other name only that type."""
    return _usages(db, project_id, user_id, consumer_type)


def _usages(db, project_id, user_id, consumer_type):
    """Sums per (group, class) and distinct consumers per group: from the
    catalog where it follows allocations and is current (the stamp the
    one statement, in autocommit: ``Database.single_read``), else by SQL
    in a read transaction."""
    with db.single_read() as conn:
        catalog = refresh.with_allocations(db, conn)
    if catalog is None:
        with db.reader() as conn:
            return _in_sql(db, conn, project_id, user_id, consumer_type)
    assert catalog.allocations is not None
    found = project_usage.by_type(
        catalog.allocations, project_id, user_id, catalog.class_names
    )
    result: dict = {}
    names = catalog.class_names
    for kind, (sums, count) in found.items():
        if consumer_type == ALL_TYPES:
            kind = ALL_TYPES
        elif kind is None:
            kind = UNKNOWN_TYPE
        if consumer_type not in (None, ALL_TYPES, kind):
            continue
        group = result.setdefault(kind, {"consumer_count": 0})
        group["consumer_count"] += count
        for rc, used in sums.items():
            group[names[rc]] = group.get(names[rc], 0) + used
    return result


def _in_sql(db, conn, project_id, user_id, consumer_type):
    """``_usages`` by SQL, in ``conn``."""
    type_name = sa.func.coalesce(TYPES.c.name, UNKNOWN_TYPE)
    if consumer_type is None:
        return _summed(db, conn, project_id, user_id, type_name)
    if consumer_type == ALL_TYPES:
        return _summed(db, conn, project_id, user_id, sa.literal(ALL_TYPES))
    return _summed(db, conn, project_id, user_id, type_name, type_name == consumer_type)


def _summed(db, conn, project_id, user_id, group, *conditions):
    """Sums per (group, class) and distinct consumers per group."""
    group = group.label("grp")
    source = (
        ALLOC.join(CONSUMERS, CONSUMERS.c.uuid == ALLOC.c.consumer_id)
        .join(tables.projects, tables.projects.c.id == CONSUMERS.c.project_id)
        .join(tables.users, tables.users.c.id == CONSUMERS.c.user_id)
        .join(RC, RC.c.id == ALLOC.c.resource_class_id)
        .outerjoin(TYPES, TYPES.c.id == CONSUMERS.c.consumer_type_id)
    )
    where = [common.text_exactly(db, tables.projects.c.external_id, project_id)]
    where += conditions
    if user_id is not None:
        where.append(common.text_exactly(db, tables.users.c.external_id, user_id))
    sums = conn.execute(
        sa.select(group, RC.c.name, sa.func.sum(ALLOC.c.used))
        .select_from(source)
        .where(*where)
        .group_by(group, RC.c.name)
    ).all()
    counts = conn.execute(
        sa.select(group, sa.func.count(sa.distinct(ALLOC.c.consumer_id)))
        .select_from(source)
        .where(*where)
        .group_by(group)
    ).all()
    result = {name: {"consumer_count": count} for name, count in counts}
    for name, rc, used in sums:
        result[name][rc] = int(used)
    return result

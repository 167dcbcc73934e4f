"""The standard traits and resource classes (os-traits,
os-resource-classes), added to the database as a process starts."""

import os_resource_classes
import os_traits
import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects.catalog import changes


@db_api.retry_on_deadlock
def sync_standard_names(db: db_api.Database) -> None:
    """Insert missing standard traits and resource classes (idempotent).

    INSERT-IGNORE makes this safe when several workers start at once (on a
    Galera cluster workers on two nodes may still fail certification: the
    transaction is then retried).
    """
    with db.writer() as conn:
        have = set(conn.scalars(sa.select(tables.traits.c.name)))
        missing_traits = [
            {"name": n, "created_at": tables.utcnow()}
            for n in os_traits.get_traits()
            if n not in have
        ]
        if missing_traits:
            conn.execute(db.insert_ignore(tables.traits), missing_traits)
        have = set(conn.scalars(sa.select(tables.resource_classes.c.name)))
        missing = [
            {"id": i, "name": n, "created_at": tables.utcnow()}
            for i, n in enumerate(os_resource_classes.STANDARDS)
            if n not in have
        ]
        if missing:
            conn.execute(db.insert_ignore(tables.resource_classes), missing)
        if missing or missing_traits:
            changes.record(conn, changes.EVERYTHING)

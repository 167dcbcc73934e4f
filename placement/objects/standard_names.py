"""The standard traits and resource classes (os-traits,
os-resource-classes), added to the database as a process starts."""

import contextlib
from collections.abc import Iterator

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
    transaction is then retried). Standard classes get the ids the
    reference service gives them (their index in os-resource-classes:
    VCPU 0, MEMORY_MB 1, ...), whoever adds them first.
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
            with _explicit_zero_id(conn):
                conn.execute(db.insert_ignore(tables.resource_classes), missing)
        if missing or missing_traits:
            changes.record(conn, changes.EVERYTHING)


@contextlib.contextmanager
def _explicit_zero_id(conn: sa.Connection) -> Iterator[None]:
    """On MySQL, an explicit id 0 (VCPU's) is taken as "the next
    auto-increment id" unless the session's sql_mode has
    NO_AUTO_VALUE_ON_ZERO: VCPU then got id 1 and MEMORY_MB, whose id that
    is, was left out. The mode is set for the insert only."""
    if conn.dialect.name != "mysql":
        yield
        return
    mode = conn.exec_driver_sql("SELECT @@SESSION.sql_mode").scalar_one()
    conn.exec_driver_sql(
        "SET SESSION sql_mode = %s", (",".join(filter(None, (mode, ZERO_MODE))),)
    )
    try:
        yield
    finally:
        conn.exec_driver_sql("SET SESSION sql_mode = %s", (mode,))


ZERO_MODE = "NO_AUTO_VALUE_ON_ZERO"


def wrong_class_ids(db: db_api.Database) -> list[str]:
    """Standard classes whose id is not the reference's, and those that
    cannot be added because another class holds their id, one line each:
    what an earlier start on MySQL without NO_AUTO_VALUE_ON_ZERO left
    behind. Missing classes whose id is free are added at the next start."""
    with db.reader() as conn:
        rows = conn.execute(
            sa.select(tables.resource_classes.c.id, tables.resource_classes.c.name)
        ).all()
    names: dict[int, str] = {rc: name for rc, name in rows}
    ids = {name: rc for rc, name in rows}
    wrong = []
    for expected, name in enumerate(os_resource_classes.STANDARDS):
        found = ids.get(name)
        if found is not None and found != expected:
            wrong.append("%s has id %d, not %d" % (name, found, expected))
        elif found is None and expected in names:
            wrong.append(
                "%s is missing: its id %d is held by %s"
                % (name, expected, names[expected])
            )
    return wrong

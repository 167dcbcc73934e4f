"""Schema management: alembic upgrades and standard name sync."""
import os

import alembic.command
import alembic.config
import alembic.migration
import os_resource_classes
import os_traits
import sqlalchemy as sa

from placement.db import tables

MIGRATIONS_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "migrations")


def alembic_config(engine):
    config = alembic.config.Config()
    config.set_main_option("script_location", MIGRATIONS_DIR)
    config.attributes["engine"] = engine
    return config


def upgrade(engine, revision="head"):
    alembic.command.upgrade(alembic_config(engine), revision)


def stamp(engine, revision):
    alembic.command.stamp(alembic_config(engine), revision)


def current_revision(engine):
    with engine.connect() as conn:
        return alembic.migration.MigrationContext.configure(conn).get_current_revision()


def sync_standard_names(db):
    """Insert missing standard traits and resource classes (idempotent).

    INSERT-IGNORE makes this safe when several workers start at once.
    """
    with db.writer() as conn:
        have = set(conn.scalars(sa.select(tables.traits.c.name)))
        missing = [{"name": n, "created_at": tables.utcnow()}
                   for n in os_traits.get_traits() if n not in have]
        if missing:
            conn.execute(db.insert_ignore(tables.traits), missing)
        have = set(conn.scalars(sa.select(tables.resource_classes.c.name)))
        missing = [{"id": i, "name": n, "created_at": tables.utcnow()}
                   for i, n in enumerate(os_resource_classes.STANDARDS)
                   if n not in have]
        if missing:
            conn.execute(db.insert_ignore(tables.resource_classes), missing)

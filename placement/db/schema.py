"""Schema management: alembic upgrades.

alembic is imported only when a revision runs or an unexpected revision is
explained: a start-up that finds the schema at HEAD does not pay for it.
"""

import importlib.resources
import logging
from typing import Any

import sqlalchemy as sa

from placement.db import tables
from placement.db import triggers

LOG = logging.getLogger(__name__)

# The top-level migrations/ directory, installed as placement.migrations
# (see setup.py): found the same way from a checkout or a wheel.
MIGRATIONS_DIR = str(importlib.resources.files("placement.migrations"))
# The last revision under migrations/versions (a test keeps it in step).
HEAD = "b8e3f1a6c9d4"
SYNC_HINT = "run `placement-manage db sync` or start with `--db-sync`"
# The newest revision of the upstream Placement schema. The revisions after
# it are this service's own (the catalog tables) and can be undone; the
# ones up to it have no way down.
REFERENCE_HEAD = "a082b8bb98d0"


def alembic_config(engine: sa.Engine) -> Any:
    import alembic.config

    config = alembic.config.Config()
    config.set_main_option("script_location", MIGRATIONS_DIR)
    config.attributes["engine"] = engine
    return config


def upgrade(engine: sa.Engine, revision: str = "head") -> tuple[str | None, str | None]:
    """Run the revisions up to ``revision``; (revision before, after)."""
    before = current_revision(engine)
    if before != HEAD or revision not in ("head", HEAD):
        import alembic.command

        alembic.command.upgrade(alembic_config(engine), revision)
    after = current_revision(engine)
    if after == HEAD:
        # The triggers the revision could not create (the user lacked the
        # privilege then), or someone dropped: again, where it can now.
        with engine.begin() as conn:
            if not triggers.installed(conn):
                triggers.create(conn)
    return before, after


def downgrade(engine: sa.Engine, revision: str) -> tuple[str | None, str | None]:
    """Undo the revisions after ``revision`` (one of REFERENCE_HEAD and the
    revisions after it); (revision before, after). ValueError when the
    database has no schema or ``revision`` is not one it can go down to."""
    import alembic.command
    import alembic.script
    import alembic.util

    before = current_revision(engine)
    if before is None:
        raise ValueError("the database has no placement schema")
    script = alembic.script.ScriptDirectory(MIGRATIONS_DIR)
    # Newest first: HEAD ... REFERENCE_HEAD.
    ours = [r.revision for r in script.walk_revisions(REFERENCE_HEAD, "heads")]
    try:
        target = script.get_revision(revision)
    except alembic.util.CommandError:
        target = None
    if target is None or target.revision not in ours:
        raise ValueError(
            "cannot downgrade to %s: the revisions it can go down to are %s"
            % (revision, ", ".join(ours))
        )
    if before not in ours or ours.index(before) > ours.index(target.revision):
        raise ValueError(
            "the database schema is at %s, not after %s" % (before, target.revision)
        )
    alembic.command.downgrade(alembic_config(engine), target.revision)
    return before, current_revision(engine)


def create_at_head(engine: sa.Engine) -> None:
    """The schema at HEAD made in one go from the table definitions, and
    recorded as HEAD as ``db sync`` would (the healthcheck reads it),
    without alembic: fresh databases for tests, here and in projects that
    test against placement (``placement.tests``). The migrations make the
    same schema (tests/functional/test_migrations.py), triggers included
    where the database lets us (``db/triggers.py``)."""
    tables.metadata.create_all(engine)
    with engine.begin() as conn:
        triggers.create(conn)
        conn.exec_driver_sql(
            "CREATE TABLE alembic_version"
            " (version_num VARCHAR(32) NOT NULL PRIMARY KEY)"
        )
        conn.execute(
            sa.text("INSERT INTO alembic_version VALUES (:head)"), {"head": HEAD}
        )


def stamp(engine: sa.Engine, revision: str) -> None:
    import alembic.command

    alembic.command.stamp(alembic_config(engine), revision)


def current_revision(engine: sa.Engine) -> str | None:
    """The revision recorded in the database (None: no schema)."""
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table("alembic_version"):
            return None
        return conn.scalar(sa.text("SELECT version_num FROM alembic_version"))


def recorded_revision(conn: sa.Connection) -> str | None:
    """The revision alembic recorded, in one cheap statement (for health
    checks) that also names every table this service uses, reading no row
    of them; a DBAPIError (``db_errors.is_schema_missing``) when the schema,
    or any one of those tables, is not there."""
    return conn.scalar(_EVERY_TABLE)


# Reads alembic's revision where none of the service's tables has a row
# matching "false": the database resolves every name (an error for a
# missing table) and plans the subqueries away.
_EVERY_TABLE = sa.text(
    "SELECT version_num FROM alembic_version WHERE "
    + " AND ".join(
        "NOT EXISTS (SELECT 1 FROM %s WHERE 1 = 0)" % name
        for name in sorted(tables.metadata.tables)
    )
)


def mismatch(engine: sa.Engine) -> str | None:
    """Why the schema cannot serve this placement and what to do, or None
    when it is at HEAD."""
    current = current_revision(engine)
    if current == HEAD:
        return None
    if current is None:
        return "the database has no placement schema: " + SYNC_HINT
    import alembic.script
    import alembic.util

    script = alembic.script.ScriptDirectory(MIGRATIONS_DIR)
    try:
        script.get_revision(current)
    except alembic.util.CommandError:
        return (
            "the database schema is at revision %s, which this placement "
            "(schema %s) does not know: run the release that wrote it" % (current, HEAD)
        )
    return (
        "the database schema is at revision %s, older than this placement's %s: %s"
        % (
            current,
            HEAD,
            SYNC_HINT,
        )
    )

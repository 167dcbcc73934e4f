"""Whether the database takes writes, asked with a write that changes
nothing, for the health check and the upgrade check (doc/operations.md
"Database faults"). A read-only database (a replica, a primary demoted by
a fail-over, ``SET GLOBAL read_only``, ``default_transaction_read_only``,
a SQLite file the process may not write) answers reads, so only a write
tells; a flag such as MySQL's ``@@read_only`` would not say whether it
binds this user.
"""

import contextlib
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from placement.db import engine as db_engine
from placement.db import errors

# Refused by a read-only database before it looks for rows (MySQL and
# PostgreSQL check at the statement's start, SQLite when it opens the
# write); otherwise it matches nothing and takes no row lock.
_NOTHING = sa.text("UPDATE alembic_version SET version_num = version_num WHERE 1 = 0")


def refusal(engine: sa.Engine) -> str | None:
    """The database's answer to a write when it refuses writes (it is
    read-only), else None. Other errors (unreachable...) are raised."""
    try:
        with engine.connect() as conn, _not_waiting(conn), conn.begin() as write:
            conn.execute(_NOTHING)
            write.rollback()
    except sa.exc.DBAPIError as e:
        if errors.is_read_only(e):
            return str(e.orig)
        if errors.is_deadlock(e):
            return None  # SQLite: another writer holds the file, so it takes writes
        raise
    return None


@contextlib.contextmanager
def _not_waiting(conn: sa.Connection) -> Iterator[None]:
    """On SQLite, the write fails at once instead of queueing behind a
    writer for the busy timeout (a health check must not wait on one)."""
    if conn.dialect.name != "sqlite":
        yield
        return
    # On the driver's connection: through ``conn`` it would begin a
    # transaction.
    sqlite: Any = conn.connection.driver_connection
    sqlite.execute("PRAGMA busy_timeout=0")
    try:
        yield
    finally:
        sqlite.execute("PRAGMA busy_timeout=%d" % db_engine.SQLITE_BUSY_TIMEOUT_MS)

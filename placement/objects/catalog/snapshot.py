"""The one snapshot a catalog is read in."""

import contextlib
from collections.abc import Iterator

import sqlalchemy as sa

from placement.db import api as db_api


@contextlib.contextmanager
def own(db: db_api.Database) -> Iterator[sa.Connection]:
    """A new transaction that reads one snapshot of the database, whatever
    commits meanwhile (``of``)."""
    if db.dialect == "sqlite":
        with db.reader() as conn:
            yield conn
        return
    with db.engine.connect() as own:
        own = own.execution_options(isolation_level="REPEATABLE READ")
        with own.begin():
            yield own


@contextlib.contextmanager
def of(db: db_api.Database, conn: sa.Connection) -> Iterator[sa.Connection]:
    """A transaction that reads one snapshot of the database, whatever
    commits meanwhile: the catalog's statements must agree with each other
    (an inventory of a provider the provider statement did not see would
    have nowhere to go). A SQLite transaction, such as the request's, reads
    one snapshot already. MySQL sessions run READ COMMITTED, where every
    statement sees the latest commits, so the catalog is read on a
    connection of its own at REPEATABLE READ, whose first read fixes the
    snapshot for the whole transaction (the same on PostgreSQL). A
    request's read in autocommit (``single_read``) has no snapshot to lend:
    the catalog is read in one of its own there too."""
    if db.dialect == "sqlite" and conn.in_transaction():
        yield conn
        return
    with own(db) as mine:
        yield mine

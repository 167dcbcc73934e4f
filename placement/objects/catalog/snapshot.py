"""The one snapshot a catalog is read in."""

import contextlib
from collections.abc import Callable
from collections.abc import Iterator
from typing import TypeVar

import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import retry

T = TypeVar("T")


@contextlib.contextmanager
def own(db: db_api.Database) -> Iterator[sa.Connection]:
    """A new transaction that reads one snapshot of the database, whatever
    commits meanwhile (``read``)."""
    if db.dialect == "sqlite":
        with db.reader() as conn:
            yield conn
        return
    with db.engine.connect() as own:
        own = own.execution_options(isolation_level="REPEATABLE READ")
        with own.begin():
            yield own


def read(
    db: db_api.Database, conn: sa.Connection, fn: Callable[[sa.Connection], T]
) -> T:
    """``fn`` run in a transaction that reads one snapshot of the
    database, whatever commits meanwhile: the catalog's statements must
    agree with each other (an inventory of a provider the provider
    statement did not see would have nowhere to go).

    A SQLite transaction, such as the request's ``conn``, reads one
    snapshot already: ``fn`` runs in it, and an error goes on as any
    statement's would. MySQL sessions run READ COMMITTED, where every
    statement sees the latest commits, so the catalog is read on a
    connection of its own at REPEATABLE READ, whose first read fixes the
    snapshot for the whole transaction (the same on PostgreSQL); so it
    is where a request's read runs in autocommit (``single_read``) and
    has no snapshot to lend. One the database aborted with a deadlock
    (Galera aborts a reader holding a table a replicated schema change
    needs) runs again in a new one (``retry.retry_read_on_deadlock``)
    rather than fail the request."""
    if db.dialect == "sqlite" and conn.in_transaction():
        return fn(conn)
    return _read_own(db, fn)


@retry.retry_read_on_deadlock
def _read_own(db: db_api.Database, fn: Callable[[sa.Connection], T]) -> T:
    with own(db) as reading:
        return fn(reading)

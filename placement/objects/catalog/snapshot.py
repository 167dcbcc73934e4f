"""The one snapshot a catalog is read in."""

import contextlib
import random
import time
from collections.abc import Callable
from collections.abc import Iterator
from typing import TypeVar

import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import errors

T = TypeVar("T")

# Reads of a snapshot of its own tried again after a deadlock, beyond the first.
RETRIES = 3


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
    if _borrows(db, conn):
        yield conn
        return
    with own(db) as mine:
        yield mine


def read(
    db: db_api.Database, conn: sa.Connection, fn: Callable[[sa.Connection], T]
) -> T:
    """``fn`` run in the snapshot ``of`` gives. A read takes no row locks,
    yet Galera aborts it with a deadlock when a replicated schema change
    needs a table it has open (another database's ``db sync``, say): in a
    transaction of its own (``own``) it is run again in a new one, after a
    short random pause, rather than fail the request. In the request's own
    transaction (SQLite) the error goes on, as any statement's would."""
    tries = 0
    while True:
        borrowed = _borrows(db, conn)
        try:
            with of(db, conn) as reading:
                return fn(reading)
        except sa.exc.DBAPIError as e:
            if borrowed or not errors.is_deadlock(e) or tries == RETRIES:
                raise
        time.sleep(random.uniform(0.001, 0.02) * 2**tries)
        tries += 1


def _borrows(db: db_api.Database, conn: sa.Connection) -> bool:
    """Whether ``of`` reads in ``conn``'s own transaction."""
    return db.dialect == "sqlite" and conn.in_transaction()

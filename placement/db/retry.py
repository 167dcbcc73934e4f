"""Re-running a whole write transaction the database refused for a
deadlock (or a lock wait timeout, or a locked SQLite database), or
because a row it relied on was gone; and a whole read the database
aborted with a deadlock.
"""

import functools
import logging
import random
import time
from typing import Any
from typing import Callable
from typing import TypeVar
from typing import cast

from sqlalchemy import exc as sa_exc

from placement import events
from placement import exception
from placement.db import errors
from placement.db import remembered

LOG = logging.getLogger(__name__)


DEADLOCK_RETRIES = 5
# A read aborted with a deadlock is run again this many more times.
READ_RETRIES = 3


F = TypeVar("F", bound=Callable[..., Any])


def retry_on_deadlock(fn: F) -> F:
    """Re-run a whole transaction when the database reports a deadlock,
    after a random pause that grows with each try (racing writers fall
    out of step). When the tries run out the write is a 409
    placement.concurrent_update, which clients retry, never a 500.

    A statement that found a row it relies on gone (``is_foreign_change``:
    another writer took away a project, an aggregate... this process
    remembered) has the transaction run again once with the memory
    forgotten (``remembered.forget``), so that the write looks the rows
    up, or creates them, again; gone a second time, the error goes on to
    the API, whose last resort answers a 409 naming what is missing."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        deadlocks = 0
        forgotten = False
        while True:
            try:
                return fn(*args, **kwargs)
            except sa_exc.DBAPIError as e:
                if errors.is_foreign_change(e) and not forgotten:
                    LOG.info("%s: a row it relies on is gone: again", fn.__name__)
                    remembered.forget()
                    forgotten = True
                    continue
                if not errors.is_deadlock(e):
                    raise
                if deadlocks == DEADLOCK_RETRIES:
                    events.deadlock_retries_exhausted()
                    LOG.warning(
                        "%s: deadlock on each of %d tries, answered 409",
                        fn.__name__,
                        deadlocks + 1,
                    )
                    raise exception.ConcurrentUpdate(DEADLOCKED) from e
                LOG.debug("deadlock in %s, retrying (%d)", fn.__name__, deadlocks)
                pause(deadlocks)
                deadlocks += 1

    return cast(F, wrapper)


def retry_read_on_deadlock(fn: F) -> F:
    """Run a whole read again when the database aborted it with a
    deadlock, after ``pause``, up to READ_RETRIES more times; then the
    error goes on (the API answers 409 placement.concurrent_update). A
    read takes no row lock, yet Galera aborts a reader holding a table
    that a schema change replicated from another node needs (``db sync``,
    an ``ALTER TABLE``), and PostgreSQL may cancel one on a standby: what
    was read is dropped and nothing was written, so reading again is what
    the client would do."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        tries = 0
        while True:
            try:
                return fn(*args, **kwargs)
            except sa_exc.DBAPIError as e:
                if not errors.is_deadlock(e) or tries == READ_RETRIES:
                    raise
                LOG.info("%s: a read aborted (deadlock): again", fn.__name__)
            pause(tries)
            tries += 1

    return cast(F, wrapper)


def pause(tries: int) -> None:
    """A random pause before the next try, growing with each (racing
    transactions fall out of step)."""
    time.sleep(random.uniform(0.001, 0.02) * 2**tries)


DEADLOCKED = (
    "The database kept refusing this write for conflicting with concurrent "
    "ones (deadlock); nothing was written. Please retry the request."
)

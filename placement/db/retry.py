"""Re-running a whole write transaction the database refused for a
deadlock (or a lock wait timeout, or a locked SQLite database).
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

LOG = logging.getLogger(__name__)


DEADLOCK_RETRIES = 5


F = TypeVar("F", bound=Callable[..., Any])


def retry_on_deadlock(fn: F) -> F:
    """Re-run a whole transaction when the database reports a deadlock,
    after a random pause that grows with each try (racing writers fall
    out of step). When the tries run out the write is a 409
    placement.concurrent_update, which clients retry, never a 500."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        for attempt in range(DEADLOCK_RETRIES + 1):
            try:
                return fn(*args, **kwargs)
            except sa_exc.DBAPIError as e:
                if not errors.is_deadlock(e):
                    raise
                if attempt == DEADLOCK_RETRIES:
                    events.deadlock_retries_exhausted()
                    LOG.warning(
                        "%s: deadlock on each of %d tries, answered 409",
                        fn.__name__,
                        attempt + 1,
                    )
                    raise exception.ConcurrentUpdate(DEADLOCKED) from e
                LOG.debug("deadlock in %s, retrying (%d)", fn.__name__, attempt)
                time.sleep(random.uniform(0.001, 0.02) * 2**attempt)

    return cast(F, wrapper)


DEADLOCKED = (
    "The database kept refusing this write for conflicting with concurrent "
    "ones (deadlock); nothing was written. Please retry the request."
)

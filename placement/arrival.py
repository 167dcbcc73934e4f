"""When the request a thread serves arrived at this process
(``time.monotonic()``, the host's clock), as the server's front saw it:
granian's thread that handed it to the event loop (``cmd/rsgi``), before
the loop got to it. None under other servers, and outside a request.

A look sent after that moment saw every write acknowledged before the
client sent the request, so it may confirm the request's answer
(``catalog/host_look``): the earlier the moment is known, the more looks
of the host's other requests serve (issue 44). A leaf: the object layer
reads it, the server's front sets it.
"""

import contextlib
import threading
from collections.abc import Iterator


class _Arrival(threading.local):
    at: float | None = None


_LOCAL = _Arrival()


def get() -> float | None:
    """When the request this thread serves arrived, if known."""
    return _LOCAL.at


@contextlib.contextmanager
def at(when: float | None) -> Iterator[None]:
    """Serve a request that arrived ``when`` (None: not known)."""
    _LOCAL.at = when
    try:
        yield
    finally:
        _LOCAL.at = None

"""How many requests a gunicorn worker executes at once (placement-api
``--active``)."""

import collections
import threading
import time


class Gate:
    """Lets ``active`` requests of a worker run at once; its other threads
    wait here, blocked, until one finishes.

    Requests are CPU-bound Python: threads running together only take turns
    on the GIL, and every row SQLite steps releases and re-takes it, so a
    busy neighbour makes each row wait for a switch interval. Measured
    (flat 1000 providers, 2 workers x 10 threads, 10 clients, SQLite):
    9.5 req/s at 128 ms CPU per request with no gate, 15-18 req/s at 87-94
    ms with 1-2 active requests per worker; two let a request's database
    waits (MySQL) overlap with another's Python. Threads still accept and
    read requests, and answers are written to the socket outside the gate,
    except a streamed one, which is produced as it is written.
    Heavy reads also take turns with each other (nested, MySQL, 10
    clients: 10.1 -> 11.9 req/s, 186 -> 159 ms CPU per request; flat,
    SQLite: 52.7 -> 62.5 req/s).
    """

    # Reads that are Python work from start to end (candidate searches,
    # provider lists): one at a time per worker, so two never share the
    # GIL; the other slots are left to requests that wait on the database.
    HEAVY = ("/allocation_candidates", "/resource_providers")
    # A provider list narrowed to one tree or provider is small: every
    # agent's periodic report reads its tree so, and it must not queue
    # behind (or hold up) the candidate searches of schedulers.
    NARROW_LIST = ("in_tree", "uuid", "name")

    def __init__(self, app, active):
        self.app = app
        self.slots = FairSemaphore(active)
        self.heavy = FairSemaphore(1)
        # Requests in the gate (waiting or running), and when the last
        # one left: what ``idle_for`` tells the worker's background work.
        self._counting = threading.Lock()
        self._inside = 0
        self._left_at = time.monotonic()

    def __call__(self, environ, start_response):
        held = [self.slots]
        if environ.get("REQUEST_METHOD") == "GET" and self._heavy(environ):
            held.insert(0, self.heavy)
        with self._counting:
            self._inside += 1
        for lock in held:
            lock.acquire()
        try:
            body = self.app(environ, start_response)
        except BaseException:
            self._leave(held)
            raise
        if isinstance(body, list):
            self._leave(held)
            return body
        # A streamed body (candidates without a limit) is produced while
        # it is written: the request keeps its turn until it is closed.
        return _Releasing(body, lambda: self._leave(held))

    def _leave(self, held):
        for lock in reversed(held):
            lock.release()
        with self._counting:
            self._inside -= 1
            self._left_at = time.monotonic()

    def idle_for(self, seconds: float) -> bool:
        """True when no request has been in the gate for ``seconds``."""
        with self._counting:
            return not self._inside and time.monotonic() - self._left_at >= seconds

    def _heavy(self, environ):
        path = environ.get("PATH_INFO", "").rstrip("/")
        if path not in self.HEAVY:
            return False
        if path != "/resource_providers":
            return True
        names = {
            field.partition("=")[0]
            for field in environ.get("QUERY_STRING", "").split("&")
        }
        return names.isdisjoint(self.NARROW_LIST)


class FairSemaphore:
    """A semaphore that admits its waiters in arrival order.

    ``threading`` locks let any waiter (or a thread that never waited)
    take a released lock, so under steady load one request can wait
    behind many later ones: a tail latency of several heavy reads. Here a
    release hands the slot to the longest waiter."""

    def __init__(self, value: int) -> None:
        self._mutex = threading.Lock()
        self._free = value
        self._waiters: collections.deque[threading.Lock] = collections.deque()

    def acquire(self) -> None:
        with self._mutex:
            if self._free:
                self._free -= 1
                return
            turn = threading.Lock()
            turn.acquire()
            self._waiters.append(turn)
        turn.acquire()  # released by the release() that hands it the slot

    def release(self) -> None:
        with self._mutex:
            if self._waiters:
                self._waiters.popleft().release()
            else:
                self._free += 1


class _Releasing:
    def __init__(self, body, leave):
        self.body = body
        self.leave = leave

    def __iter__(self):
        return iter(self.body)

    def close(self) -> None:
        try:
            if hasattr(self.body, "close"):
                self.body.close()
        finally:
            leave, self.leave = self.leave, None
            if leave is not None:
                leave()

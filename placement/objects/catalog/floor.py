"""How fresh this host's answers have been: the time (on the host's
monotonic clock, the same for every process) after which some worker's
catalog was read whole because of another writer's change, shared by
the processes forked after it was made (``placement-api``'s workers,
which inherit the master's). A worker whose catalog was last found right
before that time may lack what another worker has answered from: it
compares first, or answers through SQL (``refresh.Cache.stale``). See
"Monotonic reads" in doc/architecture.md.

Reading it costs an 8-byte read of shared memory; it is raised only when
a comparison finds another writer's rows (or counts gone back), under a
lock shared the same way.
"""

import mmap
import multiprocessing
import struct

_VALUE = struct.Struct("d")
LOCK_WAIT_S = 0.5


class Floor:
    def __init__(self) -> None:
        # Anonymous and shared (MAP_SHARED): processes forked after this
        # see each other's writes.
        self._map = mmap.mmap(-1, _VALUE.size)
        _VALUE.pack_into(self._map, 0, float("-inf"))
        self._lock = multiprocessing.get_context("fork").Lock()

    def value(self) -> float:
        return _VALUE.unpack_from(self._map, 0)[0]

    def raise_to(self, moment: float) -> None:
        """Make the floor ``moment`` unless it is there already. A worker
        killed while it held the lock (a few instructions) leaves it held:
        past LOCK_WAIT_S the floor is raised without it, at the risk of
        a concurrent raise to a lower value winning."""
        locked = self._lock.acquire(timeout=LOCK_WAIT_S)
        try:
            if moment > self.value():
                _VALUE.pack_into(self._map, 0, moment)
        finally:
            if locked:
                self._lock.release()

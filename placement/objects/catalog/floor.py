"""How fresh this host's answers have been: the time (on the host's
monotonic clock, the same for every process) after which some worker's
catalog was read whole because of another writer's change, shared by
the processes forked after it was made (``placement-api``'s workers,
which inherit the master's). A worker whose catalog was last found right
before that time may lack what another worker has answered from: it
compares first, or answers through SQL (``verify.Verifier.stale``). See
"Monotonic reads" in doc/architecture.md.

Reading it costs an 8-byte read of shared memory; it is raised only when
a comparison finds another writer's rows (or counts gone back), under a
lock shared the same way.
"""

import mmap
import multiprocessing
import struct

# The floor's time, and what identifies the database's state the worker
# that set it read its catalog in (0: not known).
_VALUE = struct.Struct("dq")
LOCK_WAIT_S = 0.5


class Floor:
    def __init__(self) -> None:
        # Anonymous and shared (MAP_SHARED): processes forked after this
        # see each other's writes.
        self._map = mmap.mmap(-1, _VALUE.size)
        _VALUE.pack_into(self._map, 0, float("-inf"), 0)
        self._lock = multiprocessing.get_context("fork").Lock()

    def value(self) -> float:
        return _VALUE.unpack_from(self._map, 0)[0]

    def raise_to(self, moment: float, state: int = 0) -> float:
        """Make the floor ``moment`` unless it is there already, for a
        catalog read in the database's ``state`` (a hash of its counts and
        fingerprint; 0: not known). A floor set for the same state is
        left as it is: that catalog holds what the floor stands for, and
        the other workers need not compare again (each would otherwise
        raise it in turn after reading the same change). Returns the
        floor this process's catalog now holds.

        A worker killed while it held the lock (a few instructions) leaves
        it held: past LOCK_WAIT_S the floor is raised without it, at the
        risk of a concurrent raise to a lower value winning."""
        locked = self._lock.acquire(timeout=LOCK_WAIT_S)
        try:
            value, held_state = _VALUE.unpack_from(self._map, 0)
            if state and state == held_state:
                return value
            if moment > value:
                _VALUE.pack_into(self._map, 0, moment, state)
            return moment
        finally:
            if locked:
                self._lock.release()

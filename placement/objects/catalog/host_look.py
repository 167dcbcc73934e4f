"""The last look (``changes.look``) an idle worker's follower took on this
host, shared by the processes forked after it was made (placement-api's
workers, which inherit the master's), as ``floor.Floor`` is: a follower
whose catalog is at the stamp another worker of its host found a moment
ago sends no look of its own. Idle, a host of 8 workers then looks about
once per follower period, not 8 times (cmd/follower.py).

It only spares an idle worker's background look: every request still
reads the stamp in its own transaction, so nothing a request answers
depends on it. A torn read (two writers at once, no lock) shows a record
that matches nothing, and the follower looks itself.
"""

import mmap
import os
import struct
import time

# When (the host's monotonic clock), by which process, and what it saw.
_RECORD = struct.Struct("dqqq")


class HostLook:
    def __init__(self) -> None:
        self._map = mmap.mmap(-1, _RECORD.size)
        _RECORD.pack_into(self._map, 0, float("-inf"), 0, -1, -1)

    def saw(self, stamp: int, tokens: int) -> None:
        """This process has just looked and found ``stamp``, ``tokens``."""
        _RECORD.pack_into(self._map, 0, time.monotonic(), os.getpid(), stamp, tokens)

    def told(self, within: float) -> tuple[int, int] | None:
        """The (stamp, tokens) another process of this host found in a
        look in the last ``within`` seconds, if one did."""
        at, pid, seen, seen_tokens = _RECORD.unpack_from(self._map, 0)
        if pid == os.getpid() or time.monotonic() - at >= within:
            return None
        return seen, seen_tokens

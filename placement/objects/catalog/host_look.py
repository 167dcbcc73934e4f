"""The last look (``changes.look``) a worker of this host sent, shared by
the processes forked after it was made (placement-api's workers, which
inherit the master's), as ``floor.Floor`` is.

An idle worker's follower whose catalog is at the stamp another worker
of its host found a moment ago sends no look of its own (``told``): idle,
a host of 8 workers then looks about once per follower period, not 8
times (cmd/follower.py).

A request that answered from its held catalog confirms it by a look sent
after the request arrived (``since``): one that another worker of the
host sent then serves as well as its own. The look's statement runs in
autocommit on MySQL and PostgreSQL (``Database.several_reads``): its
snapshot is taken after it was sent, so it saw every write acknowledged
before the request arrived, from any writer.

The record carries a digest of itself: a torn read (two writers at once,
no lock, or a read while one writes) matches nothing, and the worker
looks itself.
"""

import hashlib
import mmap
import os
import struct
import time

# When (the host's monotonic clock) the look was sent, by which process,
# what it saw, and the digest of those.
_FIELDS = struct.Struct("dqqq")
_RECORD = struct.Struct("dqqq8s")


def _digest(fields: bytes) -> bytes:
    return hashlib.blake2b(fields, digest_size=8).digest()


class HostLook:
    def __init__(self) -> None:
        self._map = mmap.mmap(-1, _RECORD.size)
        self._write(float("-inf"), 0, -1, -1)

    def _write(self, at: float, pid: int, stamp: int, tokens: int) -> None:
        fields = _FIELDS.pack(at, pid, stamp, tokens)
        self._map[: _RECORD.size] = fields + _digest(fields)

    def _read(self) -> tuple[float, int, int, int] | None:
        record = self._map[: _RECORD.size]
        fields = record[: _FIELDS.size]
        if _digest(fields) != record[_FIELDS.size :]:
            return None
        return _FIELDS.unpack(fields)

    def saw(self, stamp: int, tokens: int, sent: float) -> None:
        """This process has just looked, by a statement sent at ``sent``
        (``time.monotonic()``), and found ``stamp``, ``tokens``."""
        self._write(sent, os.getpid(), int(stamp), int(tokens))

    def told(self, within: float) -> tuple[int, int] | None:
        """The (stamp, tokens) another process of this host found in a
        look sent in the last ``within`` seconds, if one did."""
        record = self._read()
        if record is None:
            return None
        at, pid, seen, seen_tokens = record
        if pid == os.getpid() or time.monotonic() - at >= within:
            return None
        return seen, seen_tokens

    def last(self) -> tuple[int, int] | None:
        """The (stamp, tokens) the last look of this host found."""
        record = self._read()
        if record is None or record[0] == float("-inf"):
            return None
        return record[2], record[3]

    def sent(self) -> float | None:
        """When (``time.monotonic()``) the last look of this host was
        sent: -inf before the first; None on a torn read."""
        record = self._read()
        return None if record is None else record[0]

    def since(self, arrived: float) -> tuple[int, int] | None:
        """The (stamp, tokens) a look of this host (any process) sent
        after ``arrived`` found, if the last one was."""
        record = self._read()
        if record is None or record[0] <= arrived:
            return None
        return record[2], record[3]

"""Rendered answers shared by the workers of one host (placement-api's,
forked after this was made, as ``host_look``): the bytes one worker wrote
for a question (its microversion, query and engine options, made into
bytes by the caller) at a database state, for another whose own look for
its request finds the same state.

The state is the catalog's stamp and token sum that the request's look
confirmed, with the host's floor (``floor``: raised when a comparison
found another writer's rows, so no answer of a catalog found behind that
way is served past it). Every committed write moves the stamp (the
triggers log every writer's: the caller shares only answers from a
catalog whose usage is in memory, which needs them), so an entry is
served only to a request that could have written it itself.

One file per entry, in a directory of the host (under /dev/shm where
there is one), named by the state and the question, written whole
(temporary file, then renamed): a reader finds the whole of one or
nothing. Bounded: entries above ENTRY_BYTES are not kept; each write
removes the entries of other states, then the oldest past ENTRIES or
TOTAL_BYTES. The directory is removed when the process that made this
exits. Where a write fails (the directory cannot be made or written),
this process stops sharing and says so once in its log.
"""

import atexit
import hashlib
import logging
import os
import secrets
import shutil
import struct
import tempfile
import time
import typing

from placement import events
from placement.objects.catalog import floor as host_floor

LOGGER = logging.getLogger(__name__)

ENTRY_BYTES = 8 * 1024 * 1024  # an answer larger is not kept
ENTRIES = 64  # entries kept, in all
TOTAL_BYTES = 64 * 1024 * 1024  # bytes kept, in all
# How many candidates the answer holds (for the metrics), its length.
_HEAD = struct.Struct("qq")
_TEMPORARY = ".tmp-"
ABANDONED_S = 60.0  # a temporary file older is a dead writer's


class Known(typing.NamedTuple):
    """An answer another worker of the host wrote: its body and how many
    candidates it holds."""

    body: bytes
    candidates: int


def _root() -> str:
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return shm
    return tempfile.gettempdir()


class HostAnswers:
    def __init__(self, floor: host_floor.Floor) -> None:
        self._floor = floor
        self.directory = os.path.join(
            _root(), "placement-answers-%d-%s" % (os.getpid(), secrets.token_hex(4))
        )
        self.broken = False
        atexit.register(self._remove, os.getpid())

    def _remove(self, pid: int) -> None:
        if os.getpid() == pid:
            shutil.rmtree(self.directory, ignore_errors=True)

    def floor(self) -> float:
        """The host's floor now: read before a request's look, for
        ``state``."""
        return self._floor.value()

    def state(self, stamp_tokens: tuple[int, int], floor: float) -> str:
        """The key of the state a request's look found (the catalog's
        stamp and token sum) with the host's ``floor`` read before it."""
        key = repr((*map(int, stamp_tokens), floor)).encode()
        return hashlib.blake2b(key, digest_size=8).hexdigest()

    def _path(self, state: str, question: bytes) -> str:
        name = hashlib.blake2b(question, digest_size=16).hexdigest()
        return os.path.join(self.directory, "%s-%s" % (state, name))

    def get(self, question: bytes, state: str) -> Known | None:
        """The answer to ``question`` at ``state`` (``state``) a worker of
        this host kept, if there is one."""
        try:
            with open(self._path(state, question), "rb") as f:
                data = f.read()
        except OSError:
            return None
        if len(data) < _HEAD.size:
            return None
        count, length = _HEAD.unpack_from(data)
        if len(data) != _HEAD.size + length:
            return None
        events.host_answer("served")
        return Known(data[_HEAD.size :], count)

    def put(self, question: bytes, state: str, body: bytes, count: int) -> None:
        """Keep ``body`` (``count`` candidates), the answer to
        ``question`` at ``state`` (``state``), for the host's other
        workers."""
        if self.broken or len(body) > ENTRY_BYTES:
            return
        temporary = None
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            fd, temporary = tempfile.mkstemp(prefix=_TEMPORARY, dir=self.directory)
            with os.fdopen(fd, "wb") as f:
                f.write(_HEAD.pack(count, len(body)))
                f.write(body)
            os.replace(temporary, self._path(state, question))
            temporary = None
            self._bound(state)
            events.host_answer("kept")
        except OSError as e:
            if temporary is not None:  # a full disk: not left behind
                _remove_file(temporary)
            self.broken = True
            LOGGER.warning(
                "allocation candidates: answers are not shared by this "
                "host's workers (%s: %s)",
                self.directory,
                e.strerror,
            )

    def _bound(self, state: str) -> None:
        """Remove the entries of other states, then the oldest past
        ENTRIES or TOTAL_BYTES (another worker may have removed some)."""
        kept = []
        now = time.time()
        for entry in os.scandir(self.directory):
            try:
                if entry.name.startswith(_TEMPORARY):
                    # Another worker's, being written, or left by one
                    # that died writing it.
                    if now - entry.stat().st_mtime > ABANDONED_S:
                        os.remove(entry.path)
                    continue
                if not entry.name.startswith(state):
                    os.remove(entry.path)
                    continue
                stat = entry.stat()
            except FileNotFoundError:
                continue
            kept.append((stat.st_mtime_ns, stat.st_size, entry.path))
        kept.sort()
        total = sum(size for _, size, _ in kept)
        for _, size, path in kept[: max(0, len(kept) - ENTRIES)]:
            total -= size
            _remove_file(path)
        for _, size, path in kept[max(0, len(kept) - ENTRIES) :]:
            if total <= TOTAL_BYTES:
                break
            total -= size
            _remove_file(path)


def _remove_file(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass

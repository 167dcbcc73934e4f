"""What one worker of this host read to follow the change log by counts
(claims: usage, consumers, generations), shared with the other workers
of the host (placement-api's, forked after this was made, as
``host_look``): a worker whose catalog is where that one's was, and whose
look finds where that one went, follows by the same rows instead of
reading the counts, the log and the named rows again. Without it each of
a host's workers read the same four answers after every claim (issue 44:
81% of the database's statement time with 3 hosts of 8 workers).

A ring of SLOTS records in an anonymous shared map, one per move (from
stamp and token sum to stamp and token sum), the slot chosen by where it
went. Writers take no lock: a record carries a digest of itself, and one
torn by two writers at once (or read while written) matches nothing, so
the worker reads the database as it would have. A record names the
catalog's counts and tokens shard by shard at both ends, so only a
catalog at those counts (each shard at the start's or the end's) follows
by it, to exactly the counts and tokens its look found: what a request
answers is what the same catch-up from the database would have made of
rows read no earlier.
"""

import hashlib
import mmap
import pickle
import struct
import typing

from placement.objects.catalog.store import Catalog
from placement.objects.catalog.store import Fresh

SLOTS = 32
# Moves a catalog follows by the ring at most, one after another (``path``).
HOPS = 4
SLOT_BYTES = 32 * 1024
# from stamp, from token sum, to stamp, to token sum, payload length, digest
_HEAD = struct.Struct("qqqqq16s")


class Move(typing.NamedTuple):
    """A catalog at counts ``then`` (tokens ``then_tokens``) brought to
    ``seqs`` (tokens ``tokens``) by the log's ``changed`` and ``fresh``."""

    then: dict
    then_tokens: dict
    seqs: dict
    tokens: dict
    changed: dict
    fresh: Fresh


def _sums(seqs: dict, tokens: dict) -> tuple[int, int]:
    return sum(seqs.values()), sum(t or 0 for t in tokens.values())


def _digest(key: tuple, body: bytes) -> bytes:
    return hashlib.blake2b(repr(key).encode() + body, digest_size=16).digest()


def on_the_way(seqs: dict, tokens: dict, move: Move) -> bool:
    """Whether the counts ``seqs`` (a catalog's, with its ``tokens``) are,
    shard by shard, those of the move's start or of its end, with their
    tokens: the move read again
    everything the log named past them (and, for the shards it had
    already followed, more, whose rows it read no earlier: as a catalog
    further behind would have read them)."""
    for shard in move.then.keys() | move.seqs.keys() | seqs.keys():
        mine = (seqs.get(shard, 0), tokens.get(shard))
        if mine not in (
            (move.then.get(shard, 0), move.then_tokens.get(shard)),
            (move.seqs.get(shard, 0), move.tokens.get(shard)),
        ):
            return False
    return True


class HostDeltas:
    def __init__(self, slots: int = SLOTS, slot_bytes: int = SLOT_BYTES) -> None:
        self._slots, self._size = slots, slot_bytes
        self._map = mmap.mmap(-1, slots * slot_bytes)

    def _at(self, stamp: int) -> int:
        # By the count alone: the last moves, each a few rows of the log
        # on from the one before, take different slots (a chain of them
        # is followed whole, ``path``); a record names its tokens too.
        return stamp % self._slots * self._size

    def put(self, move: Move) -> bool:
        """Share ``move`` with the host's workers: whether it fits."""
        key = (*_sums(move.then, move.then_tokens), *_sums(move.seqs, move.tokens))
        body = pickle.dumps(tuple(move), pickle.HIGHEST_PROTOCOL)
        if _HEAD.size + len(body) > self._size:
            return False
        at = self._at(key[2])
        _HEAD.pack_into(self._map, at, *key, len(body), _digest(key, body))
        self._map[at + _HEAD.size : at + _HEAD.size + len(body)] = body
        return True

    def path(self, catalog: Catalog, stamp: int, tokens: int) -> list[Move] | None:
        """The moves, in order, that bring ``catalog`` to the look
        (``stamp``, ``tokens``): walked back from the look, each to the
        start of the one after it, up to HOPS moves, to one that starts
        no further on than ``catalog`` (a worker's follower that missed a
        claim, read by a busy worker of the host, while the next one
        came: each move is then in the ring, but none from its catalog).
        Each must start where the one before it ends (the first: at
        ``catalog``, or on its way, ``on_the_way``), so the last ends at
        exactly the look's counts and tokens, as one catch-up from the
        database would have. None when the ring lacks any of them, or
        they are of another history."""
        target = (int(stamp), int(tokens))  # MySQL's sums: Decimal
        moves: list[Move] = []
        while target[0] > catalog.stamp:
            move = self._to(*target)
            if move is None or len(moves) == HOPS:
                return None
            moves.append(move)
            target = _sums(move.then, move.then_tokens)
        moves.reverse()
        at = (catalog.seqs, catalog.tokens)
        for move in moves:
            if not on_the_way(*at, move):
                return None
            at = (move.seqs, move.tokens)
        return moves or None

    def _to(self, stamp: int, tokens: int) -> Move | None:
        """The move the ring holds to (``stamp``, ``tokens``), whole."""
        at = self._at(stamp)
        *key, length, digest = _HEAD.unpack_from(self._map, at)
        if (key[2], key[3]) != (stamp, tokens):
            return None
        if not 0 < length <= self._size - _HEAD.size:
            return None
        body = self._map[at + _HEAD.size : at + _HEAD.size + length]
        if _digest(tuple(key), body) != digest:
            return None
        move = Move(*pickle.loads(body))
        if _sums(move.seqs, move.tokens) != (stamp, tokens):
            return None
        return move

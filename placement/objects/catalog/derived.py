"""What the candidate engine keeps on a catalog: per tree, what it derived
from the tree's rows (``Derived``); the request shapes it kept answers
for (``Shapes``)."""

import collections.abc
import itertools


class Derived:
    """What the candidate engine derived from one tree's rows: the idle
    summaries of its providers, its summaries at its last usage
    (``allocation_candidates.tree_summaries``), and the candidates found
    under it per request shape (``allocation_candidates.kept``)."""

    __slots__ = ("idle", "summaries", "answers")

    def __init__(self) -> None:
        self.idle: dict | None = None  # provider -> Idle, on first use
        self.summaries = None  # tree_summaries.Kept, once asked
        self.answers: dict = {}  # shape id -> (usage, candidates)


class Shapes:
    """Request shapes as small ints, never reused (an answer kept under a
    forgotten shape's id is never asked for again), and how many
    candidates are kept under them, roughly: what keeps them bounds it."""

    MOST = 1024  # shapes remembered; past them all are forgotten

    def __init__(self) -> None:
        self._ids: dict = {}
        self._next = itertools.count()
        self.kept = 0
        self.trees_summarised = 0  # trees with their summaries kept
        # {shape id: trees the last limited answer of it came from}
        self.trees_needed: dict[int, int] = {}

    def id(self, shape: collections.abc.Hashable) -> int:
        found = self._ids.get(shape)
        if found is None:
            if len(self._ids) >= self.MOST:
                self._ids = {}
                self.trees_needed = {}
            found = self._ids[shape] = next(self._next)
        return found

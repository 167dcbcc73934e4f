"""Candidates kept per tree across requests.

Without sharing providers, what a request finds under one anchor depends
only on the request, that tree's rows and the usage of the tree's
providers of the requested classes. So, over the worker's catalog, the
candidates of each small anchor are kept with what the catalog derived
from that tree (``catalog.derived.Derived``), per request shape, with the
tree's usage they were found at; the next request of the same shape takes
them while that usage is unchanged, instead of planning and walking the
tree again. A change to one of the tree's providers drops them with the
rest of what was derived from it; a claim changes the tree's usage, so the
next request works that tree out again. See "Candidates kept per tree" in
doc/architecture.md.
"""

from collections.abc import Hashable
from collections.abc import Iterable
from typing import Any

from placement.objects.allocation_candidates import search

MOST_PER_ANCHOR = 8  # candidates kept per anchor: busier trees are
# walked each time (a wide tree can hold millions)
MOST_PER_TREE = 16  # shapes kept per tree: past them its others go
MOST_KEPT = 100_000  # candidates kept per worker, roughly (about 0.5 KB
# each): past them every tree's are forgotten

# A tree's usage of the requested classes: ((provider, class, used),
# ...) sorted, as a snapshot read it (``Answers.usage``), or bytes from
# the usage in memory (``providers.Index.tree_usage``: its providers' ids
# and usage, where the pages are read without it); the two never equal,
# so a tree's candidates kept at one are taken again at the same kind.
Usage = tuple | bytes


class Answers:
    """The kept candidates of one request shape, over one catalog."""

    def __init__(self, catalog: Any, shape: Hashable) -> None:
        self._catalog = catalog
        self._shapes = catalog.shapes
        self._shape = catalog.shapes.id(shape)

    @staticmethod
    def usage(snapshot: Any, roots: Iterable[int]) -> dict[int, Usage]:
        """{root: Usage} of ``roots``, as the snapshot read it."""
        get = snapshot.providers.get
        by_root: dict[int, list] = {}
        for (rp, rc), amount in snapshot.used.items():
            provider = get(rp)
            if provider is not None:
                entry = by_root.get(provider.root_id)
                if entry is None:
                    by_root[provider.root_id] = [(rp, rc, amount)]
                else:
                    entry.append((rp, rc, amount))
        found = by_root.get
        return {
            root: () if (entry := found(root)) is None else tuple(sorted(entry))
            for root in roots
        }

    def trees_needed(self) -> int:
        """How many trees (in root id order) the last limited answer of
        this shape came from; 0 before any."""
        return self._shapes.trees_needed.get(self._shape, 0)

    def remember_trees_needed(self, trees: int) -> None:
        self._shapes.trees_needed[self._shape] = trees

    def get(self, root: int, usage: Usage) -> tuple | None:
        """The candidates kept under ``root`` at ``usage``, if any."""
        derived = self._catalog.derived_by_tree.get(root)
        if derived is None:
            return None
        found = derived.answers.get(self._shape)
        if found is None or found[0] != usage:
            return None
        return found[1]

    def keep(self, root: int, usage: Usage, candidates: tuple) -> tuple:
        """Keep every candidate found under ``root`` at ``usage`` (at most
        MOST_PER_ANCHOR), as the ``search.Kept`` candidates returned."""
        candidates = tuple([_KEPT(search.Kept, c) for c in candidates])
        shapes = self._shapes
        if shapes.kept > MOST_KEPT:
            shapes.kept = 0
            for derived in list(self._catalog.derived_by_tree.values()):
                derived.answers = {}
        answers = self._catalog.derived(root).answers
        if len(answers) >= MOST_PER_TREE and self._shape not in answers:
            answers.clear()
        answers[self._shape] = (usage, candidates)
        shapes.kept += len(candidates) + 1
        return candidates


_KEPT = tuple.__new__

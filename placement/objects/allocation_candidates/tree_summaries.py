"""Provider summaries kept per tree across requests (issue 47).

A tree's summaries (every provider's, with the usage of every class it
holds) depend only on the tree's rows, which the catalog's ``Derived``
of the tree lives as long as, and on its providers' usage. So they are
kept with the tree's ``Derived``, with that usage (bytes of the usage in
memory: ``Index.tree_usage`` of every class) and the JSON the renderer
wrote of them per form, and taken again while the usage is the same: a
page of trees scattered over the catalog (pack's, spread's) costs a
lookup per tree, not a Summary, a usage row and a fragment looked at per
provider. Only where the usage is in memory (a catalog's index).
"""

from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from placement.objects.allocation_candidates import providers

TREES_KEPT = 10_000  # trees whose summaries are kept, per worker: past
# them every tree's go (about 0.9 KB each with one form's JSON)
FORMS_KEPT = 4  # JSON forms kept per tree: past them the tree's go


class Kept:
    """One tree's summaries at one usage, and their JSON per form."""

    __slots__ = ("usage", "summaries", "first", "last", "json")

    def __init__(self, usage: bytes, summaries: dict) -> None:
        self.usage = usage
        self.summaries = summaries  # provider id -> Summary, by id
        self.first, self.last = min(summaries), max(summaries)
        self.json: dict = {}  # the renderer's number of a form -> bytes


def of_trees(
    index: Any, roots: Sequence[int], known: Mapping[int, bytes] | None = None
) -> list[Kept] | None:
    """The kept summaries of the trees of ``roots`` (a Kept each, in
    their order), made and kept for those whose usage changed or that
    have none; None where the index holds no usage in memory, or for
    more trees than are kept. ``known``: {root: usage of every class}
    the request already made (``Index.tree_usage``), used where it holds
    every tree of ``roots``."""
    catalog, used = getattr(index, "catalog", None), getattr(index, "used", None)
    if catalog is None or used is None or len(roots) > TREES_KEPT:
        return None
    usage = known
    if usage is None or not all(map(usage.__contains__, roots)):
        usage = index.tree_usage(sorted(used.rp), roots)
    if usage is None:
        return None
    derived = catalog.derived_by_tree.get
    out = [
        kept
        if (tree := derived(root)) is not None
        and (kept := tree.summaries) is not None
        and kept.usage == usage[root]
        else None
        for root in roots
    ]
    missing = [at for at, kept in enumerate(out) if kept is None]
    if missing:
        shapes = catalog.shapes
        if shapes.trees_summarised + len(missing) > TREES_KEPT:
            shapes.trees_summarised = 0
            for tree in catalog.derived_by_tree.values():
                tree.summaries = None
        made = _made(index, catalog, [roots[at] for at in missing])
        for at in missing:
            root = roots[at]
            out[at] = catalog.derived(root).summaries = Kept(usage[root], made[root])
        shapes.trees_summarised += len(missing)
    return out  # type: ignore[return-value]


def _made(index: Any, catalog: Any, roots: list[int]) -> dict[int, dict]:
    """{root: {provider: Summary} by provider id} of ``roots``, made
    from the usage in memory in one pass."""
    summaries = providers.load_summaries(index, roots, (), (), {})
    by_root: dict[int, dict] = {root: {} for root in roots}
    of = catalog.providers
    for rp in sorted(summaries):
        by_root[of[rp].root_id][rp] = summaries[rp]
    return by_root

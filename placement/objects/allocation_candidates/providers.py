"""Stage 2: what the search looks at, read once per request.

``load_snapshot`` (before the search) and ``load_summaries`` (after it)
are written once, over an ``Index``: the few questions the stage asks
about stored providers, keyed by database ids. Two indexes answer them,
``sql.SqlIndex`` with a fixed handful of set-based statements whatever the
number of providers or groups, and ``catalog_index.CatalogIndex`` from the
worker's provider catalog. Usage changes with every claim: SQL's index,
and the catalog's where no triggers log every writer's allocations, read
it from the allocations in every request (``usage``); where they do, the
catalog follows it and answers it from memory (catalog/used.py). See
"Candidate engine" in doc/architecture.md.
"""

import collections
import dataclasses
import functools
import typing
import uuid as uuidlib
from collections.abc import Collection
from collections.abc import Hashable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np
import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects.allocation_candidates import kept
from placement.objects.catalog import changes
from placement.objects.catalog import columns
from placement.objects.catalog import rows

ALLOC = tables.allocations
RP = tables.resource_providers

SHARING_TRAIT = "MISC_SHARES_VIA_AGGREGATE"
# Ids bound per IN list: well under SQLite's 32766 variables.
CHUNK = 10000


class NoCandidates(Exception):
    """Some name or filter can match nothing: the answer is empty (200)."""


# The catalog keeps providers and inventories as the engine reads them.
Inventory = rows.Inventory
Provider = rows.Provider
Key = tuple[int, int]  # (provider id, class id)


@dataclasses.dataclass
class Snapshot:
    """What the search needs to know, keyed by database ids."""

    providers: dict  # id -> Provider: every holder and anchor root;
    # every provider of the trees with ``whole_trees``
    inventories: dict  # (provider id, class id) -> Inventory
    used: dict  # (provider id, class id) -> used, of the requested classes
    traits: dict  # provider id -> frozenset of trait ids of interest
    aggregates: dict  # provider id -> frozenset of aggregate ids of interest
    serves: dict  # sharing provider id -> frozenset of root ids
    nested: bool  # some provider in the database has a parent


class Summary(typing.NamedTuple):
    uuid: str
    parent_uuid: str | None
    root_uuid: str
    inventories: tuple  # ((class name, Inventory), ...) by class name:
    # hashable, so that identical ones are rendered once
    traits: tuple  # trait names, in trait id order


class Last(list):
    """One slot, [(usage, Summary) or None], replaced whole: the last
    Summary with usage made of an Idle (``load_summaries``; the usage a
    {class id: used} or, from the usage in memory, bytes).
    Not part of the Idle's value: any two are equal."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Last)

    def __ne__(self, other: object) -> bool:
        return not isinstance(other, Last)

    def __hash__(self) -> int:  # type: ignore[override]
        return 0


class Idle(typing.NamedTuple):
    """A provider's Summary before usage, and the class id of each of its
    inventories (in the same order), to put usage in; the last Summary
    with usage made of it."""

    summary: Summary
    class_ids: tuple
    last: Last


def idle_entries(
    members: Mapping[int, Provider],
    uuids: Mapping[int, str],
    held: Mapping[int, list[tuple[str, int, Inventory]]],
    trait_names: Mapping[int, tuple[str, ...]],
) -> dict[int, Idle]:
    """{provider: Idle} of ``members``, from their uuids, their (class
    name, class id, Inventory) and their trait names."""
    out = {}
    for rp, provider in members.items():
        # Class names are unique per provider: sorting never compares
        # inventories.
        listed = sorted(held.get(rp, ()))
        parent = provider.parent_id
        out[rp] = Idle(
            Summary(
                uuids[rp],
                uuids[parent] if parent is not None else None,
                uuids[provider.root_id],
                tuple([(name, inventory) for name, _, inventory in listed]),
                trait_names.get(rp, ()),
            ),
            tuple([rc for _, rc, _ in listed]),
            Last([None]),
        )
    return out


class Index(typing.Protocol):
    """The questions stage 2 asks about stored providers. Inventories come
    without usage (``used`` 0); ``conn`` is the request's transaction,
    where ``usage`` reads the rest."""

    # Read-only: a catalog index made to read nothing holds none, and
    # fails if asked (``catalog_index.warm``).
    @property
    def conn(self) -> sa.Connection: ...

    # True while the answers come from a catalog not yet known to be the
    # one the transaction reads: the first usage read ``confirm``s it.
    unconfirmed: bool

    def confirm(self, stamp: int | None = None, tokens: int | None = None) -> None:
        """Behind (answer again from ``catalog_index.index`` at the look
        read) unless the catalog is at ``stamp`` and its token
        sum ``tokens`` (``changes.look``), those the transaction reads
        (read here when None); nothing once confirmed."""

    def class_ids(self, names: Iterable[str]) -> dict[str, int]:
        """{name: id}; ResourceClassNotFound for an unknown name."""

    def trait_ids(self, names: Iterable[str]) -> dict[str, int]:
        """{name: id}; TraitNotFound naming the unknown ones."""

    def aggregate_ids(self, uuids: Iterable[str]) -> dict[str, int]:
        """{uuid: id} of the aggregates that exist, matched exactly as the
        client spelled them (as upstream and the provider list do)."""

    def root_of(self, provider_uuid: str) -> int:
        """Root id of the named provider; NoCandidates when unknown."""

    def root_ids(self) -> list[int]:
        """Every root provider id, ascending (the pages of a limited
        search)."""

    def is_nested(self) -> bool:
        """True when some provider has a parent."""

    def uuids(self, provider_ids: Iterable[int]) -> dict[int, str]:
        """{id: uuid} of the given providers."""

    def sharing_holds(self, class_ids: Collection[int]) -> bool:
        """True when some sharing provider has inventory of these classes."""

    def holders(
        self, class_ids: Collection[int], roots: list[int] | None
    ) -> tuple[dict[int, Provider], dict[Key, Inventory]]:
        """The providers with inventory of ``class_ids`` and those
        inventories, in the trees of ``roots`` if given: new dicts the
        caller may change."""

    def members(self, roots: Iterable[int]) -> dict[int, Provider]:
        """Every provider of the trees of ``roots``."""

    def traits(
        self,
        wanted: Collection[int],
        providers: Mapping[int, Provider],
        roots: list[int] | None,
    ) -> dict[int, frozenset[int]]:
        """{provider: the ``wanted`` trait ids it has} for ``providers``
        (all in the trees of ``roots`` if given)."""

    def aggregates(
        self,
        wanted: Collection[int],
        providers: Mapping[int, Provider],
        roots: list[int] | None,
    ) -> dict[int, frozenset[int]]:
        """As ``traits``, for aggregate ids."""

    def sharing(self, providers: Mapping[int, Provider]) -> list[int]:
        """The sharing providers (with SHARING_TRAIT) among ``providers``."""

    def memberships(self, provider_ids: Collection[int]) -> dict[int, frozenset[int]]:
        """{provider: every aggregate id it is in} of the given providers."""

    def aggregate_roots(
        self, aggregate_ids: Collection[int]
    ) -> Mapping[int, AbstractSet[int]]:
        """{aggregate: root ids of its members} of the given aggregates."""

    def trait_roots(self, trait_ids: Collection[int]) -> Mapping[int, AbstractSet[int]]:
        """{trait: root ids of the trees where some provider has it} of
        the given traits."""

    def usage(
        self,
        *,
        classes: Collection[int] | None = None,
        providers: Iterable[int] | None = None,
        trees: tuple[int, int] | None = None,
        roots: list[int] | None = None,
    ) -> dict[Key, int]:
        """``usage``'s {(provider, class): used} (the module function's
        arguments); an unconfirmed index is confirmed by it."""

    def usage_columns(
        self, class_ids: tuple[int, ...], stock: Mapping[int, Any]
    ) -> dict[int, Any]:
        """{class: what each row of ``stock[class]`` uses} (a catalog's
        ``columns.Stock``, numpy columns) of ``class_ids``; an unconfirmed
        index is confirmed by it."""

    def tree_usage(
        self, class_ids: Sequence[int], roots: Sequence[int]
    ) -> dict[int, bytes] | None:
        """{root: what the tree's providers use of ``class_ids``, as
        bytes (a ``kept.Usage``: equal where the tree's providers and
        their usage of those classes are)} from the usage in memory, where
        the index answers usage from it; else None (read with the trees).
        An unconfirmed index is confirmed by it."""

    def usage_table(
        self, class_ids: Sequence[int], rps: Sequence[int]
    ) -> np.ndarray | None:
        """``catalog.used.Used.table`` of ``rps``: a row per provider, a
        column per class of ``class_ids``, -1 where it holds none; None
        where usage is not in memory."""

    def kept_answers(self, shape: Hashable) -> "kept.Answers | None":
        """Where candidates of requests of ``shape`` are kept per tree
        across requests; None where nothing is kept."""

    def idle_summaries(
        self,
        roots: Collection[int],
        requested: Mapping[int, str],
        known: Iterable[tuple[Key, Inventory]],
    ) -> dict[int, Idle]:
        """{provider: Idle} of every provider of the trees of ``roots``;
        shared, never to be changed. ``requested``: {class id: name} of
        the requested classes; ``known``: ((provider, class), Inventory)
        of those in these trees as the snapshots read them, which an index
        that may read them again (SQL's) shows instead."""


def chunks(ids: Iterable[int], size: int = CHUNK) -> Iterator[list[int]]:
    """``ids`` sorted, in lists of at most ``size``: one IN list each."""
    ids = sorted(ids)
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


def uuid_spellings(value: str) -> set[str]:
    """A provider uuid as the client spelled it and in canonical form: a
    provider is found by either."""
    out = {value}
    try:
        out.add(str(uuidlib.UUID(value)))
    except ValueError:
        pass
    return out


# CAST: MySQL sums integers into DECIMAL.
_USED = sa.cast(sa.func.sum(ALLOC.c.used), sa.Integer)
USAGE_OF_PROVIDERS = (
    sa.select(ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id, _USED)
    .where(ALLOC.c.resource_provider_id.in_(db_api.int_list("ids")))
    .group_by(ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id)
)
# Whose usage of some classes is read: every provider's; a page of trees,
# named by its first and last root id (a few bound values where a list of
# its providers' ids, thousands for a limit of 1,000, cost the driver
# about 2.5 us each to bind and escape); or the pages of a search narrowed
# to the trees that hold a named trait or aggregate, by their root ids
# (not consecutive: a range over a few hundred trees spread over the cloud
# would read the usage of all of it).
_WITHIN = {
    "range": RP.c.root_provider_id.between(sa.bindparam("first"), sa.bindparam("last")),
    "roots": RP.c.root_provider_id.in_(db_api.int_list("roots")),
}


@functools.lru_cache(maxsize=64)
def _usage_of_classes(
    class_ids: tuple[int, ...], within: str | None, stamped: bool = False
) -> sa.Select | sa.CompoundSelect:
    """Providers' usage of each of ``class_ids`` side by side, one row per
    provider (NULL for a class it has no allocation of), of every provider
    or of those ``_WITHIN[within]``: the driver's cost is mostly per row,
    and a flavor's three classes come in a third of the rows that one per
    provider and class takes (150,369 pairs at 100,000 hosts).
    ``stamped``: plus one row, of provider NULL, whose first amount is
    the catalog stamp and whose last column (one more) is its token sum
    (read by the same statement: no round trip of its own)."""
    statement = (
        sa.select(
            ALLOC.c.resource_provider_id,
            *[
                sa.cast(
                    sa.func.sum(
                        sa.case((ALLOC.c.resource_class_id == rc, ALLOC.c.used))
                    ),
                    sa.Integer,
                )
                for rc in class_ids
            ],
            *([sa.cast(sa.null(), sa.BigInteger)] if stamped else []),
        )
        .where(ALLOC.c.resource_class_id.in_(class_ids))
        .group_by(ALLOC.c.resource_provider_id)
    )
    if within is not None:
        statement = statement.join_from(
            ALLOC, RP, RP.c.id == ALLOC.c.resource_provider_id
        ).where(_WITHIN[within])
    if not stamped:
        return statement
    stamp = sa.select(
        sa.cast(sa.null(), sa.Integer),
        sa.cast(changes.COUNT.scalar_subquery(), sa.Integer),
        *[sa.cast(sa.null(), sa.Integer)] * (len(class_ids) - 1),
        sa.cast(changes.TOKEN_SUM.scalar_subquery(), sa.BigInteger),
    )
    return sa.union_all(statement, stamp)


def usage(
    conn: sa.Connection,
    *,
    classes: Collection[int] | None = None,
    providers: Iterable[int] | None = None,
    trees: tuple[int, int] | None = None,
    roots: list[int] | None = None,
    stamp: typing.Callable[[int, int], None] | None = None,
) -> dict[Key, int]:
    """{(provider, class): used} of the allocations of ``classes`` by
    every provider, or by the providers of the trees whose root ids are
    within ``trees`` (first, last) or are ``roots``; or of every class by
    ``providers``.
    One grouped statement (per CHUNK ids of a list), answered from the
    (provider, class, used) index. ``stamp`` (with ``classes``): called
    with the catalog stamp and token sum, which the first statement reads
    too."""
    used: dict[Key, int] = {}
    if classes is None:
        if providers is None:
            raise TypeError("usage of classes, of the trees' classes or of providers")
        for ids in chunks(providers):
            for rp, rc, amount in conn.execute(USAGE_OF_PROVIDERS, {"ids": ids}):
                used[rp, rc] = amount
        return used
    class_ids = tuple(sorted(classes))
    if not class_ids:
        return used
    within: str | None = None
    bound: list[dict] = [{}]
    if trees is not None:
        within, bound = "range", [{"first": trees[0], "last": trees[1]}]
    elif roots is not None:
        within, bound = "roots", [{"roots": c} for c in chunks(roots)]
    stamped = tokens = 0  # the stamp row's, when there is one
    for params in bound:
        statement = _usage_of_classes(class_ids, within, stamp is not None)
        for rp, *amounts in conn.execute(statement, params):
            if rp is None:
                stamped, tokens = amounts[0], amounts[-1]
                continue
            for rc, amount in zip(class_ids, amounts):
                if amount is not None:
                    used[rp, rc] = amount
        if stamp is not None:
            stamp(stamped, tokens)
            stamp = None
    return used


def usage_columns(
    conn: sa.Connection, class_ids: tuple[int, ...], stock: Mapping[int, Any]
) -> dict[int, np.ndarray]:
    """``Index.usage_columns`` by ``usage``'s statement over every
    provider (one row per provider, the classes side by side)."""
    rows = conn.execute(_usage_of_classes(class_ids, None)).all()
    rp = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    return {
        rc: columns.aligned(
            stock[rc].rp,
            rp,
            np.fromiter((r[at] or 0 for r in rows), dtype=np.int64, count=len(rows)),
        )
        for at, rc in enumerate(class_ids, start=1)
    }


def _with_usage(inventories: dict[Key, Inventory], used: dict[Key, int]) -> None:
    # Inventory(*idle[:6], amount) without the keyword call (a third of
    # the cost of ``_replace``): thousands per request.
    get, new = inventories.get, tuple.__new__
    for key, amount in used.items():
        idle = get(key)
        if idle is not None:
            inventories[key] = new(Inventory, idle[:6] + (amount,))


def load_snapshot(
    index: Index,
    class_ids: Collection[int],
    trait_ids: Collection[int],
    aggregate_ids: Collection[int],
    whole_trees: bool = False,
    roots: list[int] | None = None,
    sparse: bool = False,
    read_usage: bool = True,
) -> Snapshot:
    """One consistent read of everything the search looks at.

    ``class_ids``: requested classes; ``trait_ids``/``aggregate_ids``: the
    ones named anywhere in the request (others are never consulted).
    ``whole_trees``: also load the providers of the trees that hold no
    requested inventory (same_subtree ancestors, resourceless groups).
    ``roots``: only these trees (a page of ``root_ids``: consecutive in
    it, so its trees are those whose root id is between its first and
    last; sharing providers of other trees are then not looked for);
    ``sparse``: ``roots`` are not consecutive in ``root_ids``, only
    ascending (a search narrowed to some trees). ``read_usage`` False:
    no usage is read (every inventory's ``used`` is 0; a drain plan reads
    it tree page by tree page as it goes).
    """
    providers, inventories = index.holders(class_ids, roots)
    if not read_usage:
        used = {}
    elif roots is None:
        used = index.usage(classes=class_ids)
    elif roots and sparse:
        used = index.usage(classes=class_ids, roots=roots)
    elif roots:
        used = index.usage(classes=class_ids, trees=(roots[0], roots[-1]))
    else:
        used = {}
    _with_usage(inventories, used)
    serves = _sharing_serves(index, providers)
    anchors = {p.root_id for p in providers.values()}
    anchors.update(*serves.values())
    if whole_trees:
        providers.update(index.members(anchors))
    else:
        for root in anchors:
            if root not in providers:
                providers[root] = Provider(root, None, root)
    return Snapshot(
        providers=providers,
        inventories=inventories,
        used=used,
        traits=index.traits(trait_ids, providers, roots),
        aggregates=index.aggregates(aggregate_ids, providers, roots),
        serves=serves,
        nested=index.is_nested(),
    )


def _sharing_serves(
    index: Index, holders: Mapping[int, Provider]
) -> dict[int, frozenset[int]]:
    """{sharing provider id: roots it serves} among ``holders``.

    A sharing provider serves its own root and the root of every provider
    that shares an aggregate with it (doc/api.md "Terms").
    """
    sharing = index.sharing(holders)
    if not sharing:
        return {}
    aggregates = index.memberships(sharing)
    roots = index.aggregate_roots(set().union(*aggregates.values()))
    return {
        rp: frozenset(
            {holders[rp].root_id}.union(*(roots[a] for a in aggregates.get(rp, ())))
        )
        for rp in sharing
    }


def load_summaries(
    index: Index,
    root_ids: Collection[int],
    known: Iterable[tuple[Key, Inventory]],
    known_usage: Iterable[tuple[Key, int]],
    class_names: Mapping[int, str],
    provider_ids: Collection[int] | None = None,
) -> dict[int, Summary]:
    """Summaries of every provider of the given trees (or only of
    ``provider_ids`` when given), keyed by provider id.

    ``known``: ((provider id, class id), Inventory) of every requested
    class in these trees, as the snapshots read them, and ``known_usage``
    ((provider id, class id), used) their usage; ``class_names``: {class
    id: name} of the requested classes. The usage of the other classes is
    read here, of the providers that hold some.
    """
    idle = index.idle_summaries(root_ids, class_names, known)
    if provider_ids is not None:
        idle = {rp: entry for rp, entry in idle.items() if rp in provider_ids}
    classes = sorted(set().union(*{entry.class_ids for entry in idle.values()}))
    table = index.usage_table(classes, list(idle))
    if table is not None:
        return _summaries_at(idle, classes, table)
    used: dict[int, dict[int, int]] = collections.defaultdict(dict)
    for (rp, rc), amount in known_usage:
        used[rp][rc] = amount
    requested = frozenset(class_names)
    others = [
        rp for rp, entry in idle.items() if not requested.issuperset(entry.class_ids)
    ]
    if others:
        for (rp, rc), amount in index.usage(providers=others).items():
            if rc not in requested:
                used[rp][rc] = amount
    out = {}
    for rp, (summary, class_ids, last) in idle.items():
        amounts = used.get(rp)
        if amounts:
            # The Summary made at the same usage before, where the idle
            # one is kept across requests (the catalog's): the same
            # object, whose JSON the renderer keeps too.
            made = last[0]
            if made is not None and made[0] == amounts:
                summary = made[1]
            else:
                summary = _with_amounts(summary, class_ids, amounts)
                last[0] = (amounts, summary)
        out[rp] = summary
    return out


def _summaries_at(
    idle: Mapping[int, Idle], classes: Sequence[int], table: np.ndarray
) -> dict[int, Summary]:
    """``load_summaries``' Summaries of the providers of ``idle`` from the
    usage in memory: ``table`` (``Index.usage_table``) has a row per
    provider of ``idle`` (in its order), a column per class of
    ``classes``. A provider's usage of its own classes, as bytes, tells
    whether the Summary made before holds (no dict per provider)."""
    column = {rc: at for at, rc in enumerate(classes)}
    layouts: dict[tuple, list[int]] = {}
    for row, entry in enumerate(idle.values()):
        layouts.setdefault(entry.class_ids, []).append(row)
    keys: list = [None] * len(idle)  # None: no usage (the idle Summary)
    for class_ids, same in layouts.items():
        mine = table[np.array(same)][:, [column[rc] for rc in class_ids]]
        blob, width = mine.tobytes(), mine.itemsize * len(class_ids)
        for at, (row, used) in enumerate(zip(same, (mine > 0).any(axis=1).tolist())):
            if used:
                keys[row] = blob[at * width : (at + 1) * width]
    out = {}
    for key, (rp, (summary, class_ids, last)) in zip(keys, idle.items()):
        if key is not None:
            made = last[0]
            if made is not None and made[0] == key:
                summary = made[1]
            else:
                values = np.frombuffer(key, dtype=np.int64).tolist()
                summary = _with_amounts(
                    summary,
                    class_ids,
                    {rc: n for rc, n in zip(class_ids, values) if n > 0},
                )
                last[0] = (key, summary)
        out[rp] = summary
    return out


def _with_amounts(
    summary: Summary, class_ids: Sequence[int], amounts: Mapping[int, int]
) -> Summary:
    """``summary`` with the usage ``amounts`` {class id: used} in its
    inventories (``class_ids``: the class of each)."""
    return summary._replace(
        inventories=tuple(
            [
                (name, inventory._replace(used=amounts[rc]))
                if rc in amounts
                else (name, inventory)
                for (name, inventory), rc in zip(summary.inventories, class_ids)
            ]
        )
    )

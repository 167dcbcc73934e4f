"""The in-memory catalog: every provider with its tree, inventories
(without usage), traits and aggregates, in the maps the candidate index
and the provider list read; built from rows (``Catalog.read``) or from an
older catalog and the rows of what changed since (``advanced``)."""

import collections
import copy
import dataclasses
import operator

import numpy as np
import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects.catalog import bulk
from placement.objects.catalog import changes
from placement.objects.catalog import columns
from placement.objects.catalog import consumers
from placement.objects.catalog import derived as derived_
from placement.objects.catalog import fingerprint
from placement.objects.catalog import maps
from placement.objects.catalog import rows
from placement.objects.catalog import stock_maps
from placement.objects.catalog import used as used_
from placement.objects.catalog.rows import Rows

RC, T, AGG = tables.resource_classes, tables.traits, tables.placement_aggregates
_TRAIT_SECONDS = bulk.Seconds(sa.func.coalesce(T.c.updated_at, T.c.created_at))


def _padded(part: sa.Select) -> sa.Select:
    """A part of ``used_.PARTS`` (provider, class, amount, time, its
    inventories' time) in the columns of ``consumers.SOME_ROWS``: from its
    third on, no consumer."""
    text, number = sa.String(), sa.Integer()
    # SOME_ROWS' columns' kinds: uuid, id, four numbers, generation, names.
    kinds: tuple[sa.types.TypeEngine, ...] = (
        text,
        number,
        *[number] * 5,
        text,
        text,
        text,
    )
    none: list[sa.ColumnElement] = [sa.cast(sa.null(), kind) for kind in kinds]
    width = len(part.selected_columns)
    return part.with_only_columns(*none[:2], *part.selected_columns, *none[2 + width :])


# The named consumers' allocations and the named providers' usage and
# generations in one statement: a claim's catch-up reads both, a round
# trip less than each on its own. Unordered: an ORDER BY on the union made
# MariaDB put its rows in a temporary table and sort them there, for a
# few rows; ``fresh`` orders the allocations by id (the second column).
_USED_WIDTH = len(used_.OF_PROVIDERS.selected_columns)
_FRESH = sa.union_all(consumers.SOME_ROWS, *[_padded(part) for part in used_.PARTS])
_ROOT_ID = operator.attrgetter("root_id")
_ALLOCATION_ID = operator.itemgetter(1)


@dataclasses.dataclass(frozen=True)
class Fresh:
    """What following the log reads of usage and consumers
    (``Catalog.fresh``): plain values, so that another worker of the host
    can follow by them (``host_deltas``). None: nothing named to read."""

    consumers: dict | None  # {uuid: Consumer} of those holding allocations
    usage: list | None  # used.fresh's rows


class Catalog(maps.Maps):
    """Every provider with its tree, inventories (without usage), traits
    and aggregates, as of ``stamp`` catalog changes (``seqs`` per shard).
    Never modified: following changes makes a new one (``advanced``), which
    shares what did not change."""

    def __init__(self) -> None:
        self.seqs: dict = {}  # shard -> count
        self.stamp = 0
        # shard -> the token of its count (changes.marks), and their sum
        # (NULL: 0), which the look reads with the stamp.
        self.tokens: dict = {}
        self.token_sum = 0
        self.providers: dict = {}  # rp -> Provider
        self.uuids: dict = {}
        self.names: dict = {}
        self.ids: dict = {}  # uuid -> rp
        self.members: dict = {}  # root -> sorted providers of its tree
        self.roots: list = []
        self.nested = False
        # Inventories as if unused, ready to be copied per request: only
        # the ones with usage are replaced.
        self.idle: dict = {}  # class -> {(rp, class): Inventory}
        self.holders: dict = {}  # class -> {rp: Provider}
        # rp -> ((class, Inventory), ...) by class; equal ones one tuple
        # (the pages of a limited search read a tree's from here).
        self.by_provider: dict = {}
        self.traits: dict = {}  # rp -> frozenset of trait ids
        self.aggregates: dict = {}  # rp -> frozenset of aggregate ids
        self.trait_holders: dict = {}  # trait -> [rp]
        self.aggregate_members: dict = {}  # aggregate -> [rp]
        self.class_names: dict = {}
        self.class_ids: dict = {}
        self.trait_ids: dict = {}  # name -> id
        self.trait_names_by_id: dict = {}
        # trait id -> its last change (updated_at, else created_at) in
        # seconds since the epoch, or None: a provider's traits' time.
        self.trait_seconds: dict = {}
        self.aggregate_ids: dict = {}  # uuid -> id
        # (aggregate_ids, its inversion), once asked for (aggregate_uuids).
        self._aggregate_uuids: tuple[dict, dict] | None = None
        # A provider's traits are listed in trait id order.
        self.trait_names: dict = {}  # rp -> tuple of names
        # What the candidate engine derives per tree, as it asks: a tree's
        # entry goes when one of its providers changes.
        self.derived_by_tree: dict = {}  # root -> Derived
        # {("traits" or "aggregates", id): frozenset of the roots of the
        # trees where a provider has it}, as the engine asks (``roots_of``);
        # an entry goes when a provider gains or loses that value, or
        # moves to another tree with it.
        self.value_roots: dict = {}
        # Request shapes the engine kept answers for, as small ints
        # (``shape_id``), shared by the catalogs that follow this one.
        self.shapes = derived_.Shapes()
        # Its fingerprint (``fingerprint``), once asked for; kept up to
        # date as the catalog advances.
        self.content: list[int] | None = None
        self.hashed: fingerprint.NameHash = fingerprint.name_hash("")
        self.ratio_term = fingerprint.ratio_of("")
        # What the database's fingerprint differed by when the catalog was
        # read whole in the same snapshot (normally nothing: a rounding of
        # allocation_ratio the database does otherwise than Python would).
        self.offset = fingerprint.empty()
        # Its inventories as columns (columns.of), once asked for.
        self.columns: columns.Columns | None = None
        # What identifies its structure (everything above but the counts):
        # shared by the catalogs that followed only changes of none of it
        # (``changes.UNSTRUCTURED``), a new one otherwise.
        self.structure = object()
        # Usage and every provider's generation (used.py: the one map of
        # generations, the allocation reads' too), allocations and
        # consumers (consumers.py), where triggers log every writer's
        # allocations; None otherwise (they are read per request).
        self.used: used_.Used | None = None
        self.allocations: consumers.Allocations | None = None

    def fingerprint(self, dialect: str, joined: rows.Joined | None = None) -> list[int]:
        """The fingerprint a database of ``dialect`` would show for this
        catalog (``fingerprint.of_database``); ``joined``: the columns it
        was read whole from, summed at once rather than walked provider
        by provider."""
        if self.content is None:
            hashed = fingerprint.name_hash(dialect)
            ratio_term = fingerprint.ratio_of(dialect)
            if joined is not None:
                content = fingerprint.of_joined(joined, hashed, ratio_term)
            else:
                content = fingerprint.empty()
                for rp in self.providers:
                    fingerprint.add_provider(
                        content, self._state(rp), hashed, ratio_term=ratio_term
                    )
            for table, names in (
                (fingerprint.CLASSES, self.class_names),
                (fingerprint.TRAITS, self.trait_names_by_id),
            ):
                fingerprint.names_part(content, table, names, hashed)
            self.hashed, self.content = hashed, content
            self.ratio_term = ratio_term
        return [mine + off for mine, off in zip(self.content, self.offset)]

    def aggregate_uuids(self) -> dict:
        """{aggregate id: uuid}: ``aggregate_ids`` inverted, once per
        catalog that changed it (those that follow share it)."""
        inverted = self._aggregate_uuids
        if inverted is None or inverted[0] is not self.aggregate_ids:
            uuids = {i: u for u, i in self.aggregate_ids.items()}
            inverted = self._aggregate_uuids = (self.aggregate_ids, uuids)
        return inverted[1]

    def derived(self, root: int) -> derived_.Derived:
        """What is derived from tree ``root``, created empty on first use."""
        derived = self.derived_by_tree.get(root)
        if derived is None:
            derived = self.derived_by_tree[root] = derived_.Derived()
        return derived

    @classmethod
    def read(cls, conn: sa.Connection, followed: bool = False) -> "Catalog":
        """Everything, in ``conn``'s snapshot; ``followed`` (the triggers
        log every writer's allocations): usage, generations and
        allocations too."""
        catalog = cls()
        # The counts first, in the same snapshot as everything below.
        catalog._counted(*changes.marks(conn))
        if followed:
            allocations = catalog.allocations = consumers.read(conn)
        catalog._readnames(conn, None, None)
        catalog.aggregate_ids = rows.pairs(conn, AGG, "uuid", "id")
        fresh = Rows.whole(conn)
        catalog._whole(fresh)
        # Both computed with the read (in placement-api's master, before
        # the fork; columns.py) rather than by each worker on first use:
        # the fingerprint's walk over every provider took a second of CPU
        # per worker at start and made each its own copy of every page it
        # touched.
        catalog.fingerprint(conn.dialect.name, fresh.joined)
        stock = columns.of(catalog).prepare().stock
        catalog._every_value_roots()
        if followed:
            # Aligned with the columns, sharing their holders' ids.
            base = allocations.base
            catalog.used = used_.Used.read(
                conn,
                {rc: held.rp for rc, held in stock.items()},
                (base.provider, base.rc, base.used),
            ).prepare()
        return catalog

    def _whole(self, fresh):
        """Every map built from ``fresh`` rows of all providers (a separate
        way from ``_read_providers``, several times faster than it is for
        everything; the tests hold the two to the same result)."""
        # Built by zip rather than provider by provider: a second of CPU
        # at 1,000,000 providers (issue 44).
        rps = list(fresh.providers)
        found, uuids, names = zip(*fresh.providers.values()) if rps else ((),) * 3
        self.providers = dict(zip(rps, found))
        self.uuids, self.names = dict(zip(rps, uuids)), dict(zip(rps, names))
        self.ids = dict(zip(uuids, rps))
        members = collections.defaultdict(list)
        for rp, root in zip(rps, map(_ROOT_ID, found)):
            members[root].append(rp)
        self.members = dict(members)
        self.roots = sorted(members)
        self.nested = len(self.roots) < len(self.providers)
        one = rows.Interned()
        if fresh.joined is not None:
            made = stock_maps.of(fresh.joined.inventories, one)
            self.by_provider, self.idle = made.by_provider, made.idle
            provider_of = self.providers.__getitem__
            self.holders = {
                rc: dict(zip(rps, map(provider_of, rps)))
                for rc, rps in made.held.items()
            }
        else:
            idle = collections.defaultdict(dict)
            holders = collections.defaultdict(dict)
            for rp, inventories in fresh.inventories.items():
                provider = self.providers[rp]
                self.by_provider[rp] = listed = one(tuple(sorted(inventories.items())))
                for rc, inventory in listed:
                    idle[rc][rp, rc] = inventory
                    holders[rc][rp] = provider
            self.idle, self.holders = dict(idle), dict(holders)
        self.traits, self.aggregates = fresh.traits, fresh.aggregates
        self.trait_holders = _inverted(self.traits)
        self.aggregate_members = _inverted(self.aggregates)
        # Once per distinct set (equal sets are one object, and so their
        # names: a tuple shared by every provider with the same traits).
        name_of = self.trait_names_by_id
        named = {
            ids: tuple(name_of[t] for t in sorted(ids))
            for ids in set(self.traits.values())
        }
        self.trait_names = {rp: named[ids] for rp, ids in self.traits.items()}

    def _every_value_roots(self) -> None:
        """``roots_of`` every trait and aggregate, from the columns (one
        vector lookup each, not a provider each): where the catalog is
        read whole, in placement-api's master, so that no worker's first
        request of a shape naming a trait or an aggregate finds them (17
        ms for a trait of 83,000 providers)."""
        by_root = columns.of(self).roots_of
        for field, holders in (
            ("traits", self.trait_holders),
            ("aggregates", self.aggregate_members),
        ):
            for value, rps in holders.items():
                ids = np.fromiter(rps, dtype=np.int64, count=len(rps))
                self.value_roots[field, value] = frozenset(
                    np.unique(by_root(ids)).tolist()
                )

    def roots_of(self, field: str, value: int) -> frozenset:
        """The roots of the trees where some provider has trait or
        aggregate ``value`` (``field``: "traits" or "aggregates")."""
        key = (field, value)
        found = self.value_roots.get(key)
        if found is None:
            holders = (
                self.trait_holders if field == "traits" else self.aggregate_members
            )
            every = self.providers
            found = frozenset(every[rp].root_id for rp in holders.get(value, ()))
            self.value_roots[key] = found
        return found

    def fresh(self, conn: sa.Connection, changed: dict) -> "Fresh":
        """What ``advanced`` reads of the ``changed`` ({kind: ids}, from
        the log) where it follows usage and consumers: the named
        consumers' allocations, then the named providers' usage and
        generations (those named for their rows too), in ``conn``'s
        snapshot: one statement for both where both are named (a claim),
        else a statement each."""
        uuids, usage, generations = self._named(changed)
        if uuids and (usage or generations) and len(usage | generations) <= used_.CHUNK:
            params = {
                "uuids": list(uuids),
                "used": sorted(usage),
                "generations": sorted(generations),
            }
            read = db_api.plain_rows(conn, _FRESH, params)
            allocations = [row for row in read if row[0] is not None]
            return Fresh(
                consumers.of_rows(sorted(allocations, key=_ALLOCATION_ID)),
                [tuple(row[2 : 2 + _USED_WIDTH]) for row in read if row[0] is None],
            )
        return Fresh(
            consumers.consumers_of(conn, uuids) if uuids else None,
            used_.fresh(conn, usage, generations) if usage or generations else None,
        )

    def _named(self, changed):
        """(consumers, providers' usage, providers' generations) ``changed``
        names that this catalog follows."""
        uuids = changed.get(changes.CONSUMER, set())
        if self.used is None:
            return uuids if self.allocations is not None else set(), set(), set()
        named = changed.get(changes.PROVIDER, set())
        return (
            uuids if self.allocations is not None else set(),
            named | changed.get(changes.USAGE, set()),
            named | changed.get(changes.GENERATION, set()),
        )

    def advanced(
        self,
        conn: sa.Connection | None,
        seqs: dict,
        changed: dict,
        tokens: dict,
        fresh: "Fresh | None" = None,
    ) -> "Catalog":
        """A new catalog: this one with the ``changed`` ({kind: ids}, read
        from the log up to ``seqs``, whose tokens are ``tokens``) read again
        in ``conn``'s snapshot, their usage and consumers as ``fresh`` has
        them (read first otherwise; a ``Fresh`` that ``covers`` them:
        another worker of this host read it, ``host_deltas``).
        Where none of them changes the structure (usage, consumers,
        generations: ``changes.UNSTRUCTURED``), only the counts move:
        everything derived from it (columns, per-tree answers, the
        fingerprint, the provider list's body) stays good, and nothing
        but ``fresh`` is read."""
        if fresh is None:
            assert conn is not None
            fresh = self.fresh(conn, changed)
        uuids, usage, generations = self._named(changed)
        catalog = copy.copy(self)
        catalog._counted(seqs, tokens)
        if self.allocations is not None:
            catalog.allocations = self.allocations.advanced(
                fresh.consumers or {}, uuids
            )
        if changed.keys() <= changes.UNSTRUCTURED:
            if self.used is not None:
                catalog._follow_usage(self, usage, generations, fresh.usage)
            return catalog
        assert conn is not None
        catalog.structure = object()
        catalog.columns = None
        if self.content is not None:
            catalog.content = list(self.content)
        classes = changed.get(changes.RESOURCE_CLASS)
        traits = changed.get(changes.TRAIT)
        if classes or traits:
            catalog._readnames(conn, classes, traits)
            before, now = self.class_names, catalog.class_names
            if any(
                rc in before and now.get(rc, before[rc]) != before[rc]
                for rc in classes or ()
            ):
                # A custom class renamed (1.2-1.6; its id kept): the
                # trees' idle summaries name their classes.
                catalog.derived_by_tree = {}
        if changed.get(changes.AGGREGATE):
            catalog.aggregate_ids = {
                **self.aggregate_ids,
                **rows.aggregate_ids_of(conn, changed[changes.AGGREGATE]),
            }
        if changed.get(changes.PROVIDER):
            catalog._read_providers(conn, changed[changes.PROVIDER])
        if self.used is not None:
            catalog._follow_usage(self, usage, generations, fresh.usage)
        return catalog

    def covers(self, changed: dict, fresh: "Fresh") -> bool:
        """Whether ``fresh`` has what following ``changed`` reads for
        this catalog (read by a catalog that follows the same)."""
        uuids, usage, generations = self._named(changed)
        return (not uuids or fresh.consumers is not None) and (
            not (usage or generations) or fresh.usage is not None
        )

    def _follow_usage(self, old, usage, generations, fresh_rows):
        """The usage of the providers ``usage`` (named by the log for
        their allocations, or their rows: a new holder of a class) and
        the generations of ``generations`` as ``fresh_rows`` has them."""
        if not (usage or generations):
            return
        now, then = self.by_provider, old.by_provider
        self.used = old.used.advanced(
            fresh_rows or (),
            usage,
            generations,
            held=lambda rp: [rc for rc, _ in now.get(rp, ())],
            had=lambda rp: [rc for rc, _ in then.get(rp, ())],
        )

    def _counted(self, seqs, tokens):
        self.seqs, self.stamp = seqs, sum(seqs.values())
        self.tokens = tokens
        self.token_sum = sum(t or 0 for t in tokens.values())

    def _readnames(self, conn, class_ids, trait_ids):
        """The names of ``class_ids`` and ``trait_ids`` (None: all) read
        again; a missing one was deleted."""
        if class_ids is None or class_ids:
            self.class_names = rows.names(conn, RC, self.class_names, class_ids)
            self.class_ids = {name: rc for rc, name in self.class_names.items()}
            if self.content is not None:
                fingerprint.names_part(
                    self.content, fingerprint.CLASSES, self.class_names, self.hashed
                )
        if trait_ids is None or trait_ids:
            self.trait_names_by_id = rows.names(
                conn, T, self.trait_names_by_id, trait_ids
            )
            self.trait_ids = {name: t for t, name in self.trait_names_by_id.items()}
            self.trait_seconds = rows.names(
                conn, T, self.trait_seconds, trait_ids, _TRAIT_SECONDS
            )
            if self.content is not None:
                fingerprint.names_part(
                    self.content,
                    fingerprint.TRAITS,
                    self.trait_names_by_id,
                    self.hashed,
                )
            # Names of providers' traits don't change: a trait is deleted
            # only when no provider has it, and never renamed.


def _inverted(pairs):
    into = collections.defaultdict(list)
    for rp, values in pairs.items():
        for value in values:
            into[value].append(rp)
    return dict(into)

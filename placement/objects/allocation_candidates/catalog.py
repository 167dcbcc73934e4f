"""Stage 2 answered from the worker's provider catalog
(``placement.objects.catalog``), reading only usage from the database."""

import collections

import sqlalchemy as sa

from placement.objects import catalog as cache
from placement.objects.allocation_candidates import providers as sql

ALLOC = sql.ALLOC
_USED = sa.cast(sa.func.sum(ALLOC.c.used), sa.Integer)
USAGE_OF_CLASSES = (
    sa.select(ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id, _USED)
    .where(ALLOC.c.resource_class_id.in_(sa.bindparam("classes", expanding=True)))
    .group_by(ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id)
)
USAGE_OF_PROVIDERS = (
    sa.select(ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id, _USED)
    .where(ALLOC.c.resource_provider_id.in_(sa.bindparam("providers", expanding=True)))
    .group_by(ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id)
)


class Reader:
    """The SQL stage's interface (``providers.Reader``) answered from a
    current catalog, reading only usage from the database."""

    def __init__(self, conn, catalog):
        self.conn = conn
        self.catalog = catalog
        self.sql = sql.Reader(conn)

    # Names the catalog doesn't know don't exist: the SQL lookups raise
    # the API's errors for them.

    def class_ids(self, names):
        return _ids(self.catalog.class_ids, names, self.sql.class_ids)

    def trait_ids(self, names):
        return _ids(self.catalog.trait_ids, names, self.sql.trait_ids)

    def aggregate_ids(self, uuids):
        known = self.catalog.aggregate_ids
        return {uuid: known[uuid] for uuid in uuids if uuid in known}

    def root_of(self, provider_uuid):
        for spelling in sql._uuid_spellings([provider_uuid]):
            rp = self.catalog.ids.get(spelling)
            if rp is not None:
                return self.catalog.providers[rp].root_id
        return self.sql.root_of(provider_uuid)

    def root_ids(self):
        return self.catalog.roots

    def sharing_holds(self, class_ids):
        return not self.catalog.sharing_classes.isdisjoint(class_ids)

    def is_nested(self):
        return self.catalog.nested

    def uuids(self, provider_ids):
        return {
            rp: self.catalog.uuids[rp]
            for rp in provider_ids
            if rp in self.catalog.uuids
        }

    def _usage(self, statement, name, ids, classes=None):
        """{(provider, class): used}, binding long id lists in chunks."""
        used = {}
        for chunk in sql._chunks(ids):
            for rp, rc, amount in self.conn.execute(statement, {name: chunk}):
                if classes is None or rc in classes:
                    used[rp, rc] = amount
        return used

    def snapshot(
        self, class_ids, trait_ids, aggregate_ids, whole_trees=False, roots=None
    ):
        """As ``providers.load_snapshot``."""
        catalog = self.catalog
        every = catalog.providers
        inventories, providers = {}, {}
        if roots is None:
            for rc in class_ids:
                inventories.update(catalog.idle.get(rc, {}))
                providers.update(catalog.holders.get(rc, {}))
            used = self._usage(USAGE_OF_CLASSES, "classes", class_ids)
        else:
            for root in roots:
                tree = catalog.idle_in_tree.get(root)
                for rc in class_ids if tree else ():
                    held = tree.get(rc)
                    if held:
                        inventories.update(held)
                        providers.update((rp, every[rp]) for rp, _ in held)
            used = self._usage(
                USAGE_OF_PROVIDERS, "providers", providers, set(class_ids)
            )
        for key, amount in used.items():
            idle = inventories.get(key)
            if idle is not None:
                inventories[key] = idle._replace(used=amount)
        serves = {rp: catalog.serves[rp] for rp in providers if rp in catalog.serves}
        anchors = {p.root_id for p in providers.values()}
        anchors.update(*serves.values())
        for root in anchors:
            if whole_trees:
                providers.update(
                    (rp, every[rp]) for rp in catalog.members.get(root, ())
                )
            elif root not in providers:
                providers[root] = every[root]
        return sql.Snapshot(
            providers=providers,
            inventories=inventories,
            traits=_of_interest(catalog.trait_holders, trait_ids, providers),
            aggregates=_of_interest(
                catalog.aggregate_members, aggregate_ids, providers
            ),
            serves=serves,
            nested=catalog.nested,
        )

    def summaries(self, root_ids, known, class_names, provider_ids=None):
        """As ``providers.load_summaries``."""
        catalog = self.catalog
        inventories = collections.defaultdict(dict)
        for (rp, rc), inventory in known:
            inventories[rp][class_names[rc]] = inventory
        members = [rp for root in root_ids for rp in catalog.members.get(root, ())]
        others = [
            (rp, rc, idle)
            for rp in members
            for rc, idle in catalog.by_provider.get(rp, ())
            if rc not in class_names
        ]
        if others:
            used = self._usage(
                USAGE_OF_PROVIDERS, "providers", {rp for rp, _, _ in others}
            )
            names = catalog.class_names
            for rp, rc, idle in others:
                amount = used.get((rp, rc))
                inventories[rp][names[rc]] = (
                    idle if amount is None else idle._replace(used=amount)
                )
        uuids = catalog.uuids
        if provider_ids is not None:
            members = [rp for rp in members if rp in provider_ids]
        out = {}
        for rp in members:
            provider = catalog.providers[rp]
            out[rp] = sql.Summary(
                uuids[rp],
                uuids.get(provider.parent_id),
                uuids[provider.root_id],
                inventories.get(rp, {}),
                catalog.trait_names.get(rp, ()),
            )
        return out


def _ids(known, names, lookup):
    """{name: id} from ``known``, or from ``lookup`` (which raises the
    not-found error) when some name is missing."""
    if not all(name in known for name in names):
        return lookup(names)
    return {name: known[name] for name in names}


def _of_interest(holders, wanted, providers):
    """{provider: frozenset of the ``wanted`` values it has} for the
    snapshot's providers (an index lookup per wanted value)."""
    into = collections.defaultdict(set)
    for value in wanted:
        for rp in holders.get(value, ()):
            if rp in providers:
                into[rp].add(value)
    return {rp: frozenset(values) for rp, values in into.items()}


def reader(db, conn):
    """A ``Reader`` on the current catalog of ``db``, or None."""
    catalog = cache.current(db, conn)
    return Reader(conn, catalog) if catalog is not None else None

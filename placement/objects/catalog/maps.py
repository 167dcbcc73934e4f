"""A catalog's maps keyed by provider, brought up to date by the rows of
the providers that changed (``Catalog.advanced``): the maps that change
are copies, so the catalog advanced from shares the rest."""

import collections

from placement.objects.catalog import fingerprint
from placement.objects.catalog.rows import Rows
from placement.objects.catalog.rows import State


class Maps:
    """The provider maps' updates, for ``store.Catalog`` (which holds the
    maps)."""

    def _read_providers(self, conn, touched):
        """The rows of providers ``touched`` (ids) read again, with their
        inventories, traits and aggregates; the maps that change are
        copies."""
        fresh = Rows(conn, touched)
        old = {rp: self._state(rp) for rp in touched}
        new = {rp: fresh.state(rp) for rp in touched}
        changed = [rp for rp in touched if old[rp] != new[rp]]
        if not changed:
            return
        if self.content is not None:
            for rp in changed:
                fingerprint.add_provider(
                    self.content, old[rp], self.hashed, -1, self.ratio_term
                )
                fingerprint.add_provider(
                    self.content, new[rp], self.hashed, 1, self.ratio_term
                )
        stale = {
            state.provider.root_id
            for rp in changed
            for state in (old[rp], new[rp])
            if state.provider is not None
        }
        # A new dict always (the catalog advanced from may still add
        # entries of its trees to its own), copied in C rather than by a
        # walk over every tree's entry in Python.
        derived = dict(self.derived_by_tree)
        for root in stale:
            derived.pop(root, None)
        self.derived_by_tree = derived
        self._per_provider(changed, new)
        self._trees(changed, old, new)
        self._inventories(changed, old, new)
        self.value_roots = _without_moved(self.value_roots, changed, old, new)
        self.trait_holders = _holders(self.trait_holders, changed, old, new, "traits")
        self.aggregate_members = _holders(
            self.aggregate_members, changed, old, new, "aggregates"
        )

    def _state(self, rp):
        """What this catalog has of provider ``rp``."""
        return State(
            self.providers.get(rp),
            dict(self.by_provider.get(rp, ())),
            self.traits.get(rp, frozenset()),
            self.aggregates.get(rp, frozenset()),
            self.uuids.get(rp),
            self.names.get(rp),
        )

    def _per_provider(self, changed, new):
        """The maps keyed by provider: copies of those where a changed
        provider's value differs."""
        name_of = self.trait_names_by_id
        values = {
            "providers": lambda s: s.provider,
            "uuids": lambda s: s.uuid,
            "names": lambda s: s.name,
            "by_provider": lambda s: tuple(sorted(s.inventories.items())) or None,
            "traits": lambda s: s.traits or None,
            "aggregates": lambda s: s.aggregates or None,
            "trait_names": lambda s: (
                tuple(name_of[t] for t in sorted(s.traits)) or None
            ),
        }
        for attr, value_of in values.items():
            current = getattr(self, attr)
            now = {rp: value_of(new[rp]) for rp in changed}
            replaced = _patched(current, now)
            if replaced is current:
                continue
            if attr == "uuids":
                ids = dict(self.ids)
                for rp in now:
                    ids.pop(current.get(rp), None)
                ids.update((uuid, rp) for rp, uuid in now.items() if uuid)
                self.ids = ids
            setattr(self, attr, replaced)

    def _trees(self, changed, old, new):
        """Members and roots of the trees providers joined or left."""
        left, joined = collections.defaultdict(set), collections.defaultdict(list)
        for rp in changed:
            before, after = old[rp].provider, new[rp].provider
            if before is not None and (
                after is None or after.root_id != before.root_id
            ):
                left[before.root_id].add(rp)
            if after is not None and (
                before is None or before.root_id != after.root_id
            ):
                joined[after.root_id].append(rp)
        if not (left or joined):
            return
        members = dict(self.members)
        for root in left.keys() | joined.keys():
            gone = left.get(root, ())
            tree = [rp for rp in members.get(root, ()) if rp not in gone]
            tree = sorted(tree + joined.get(root, []))
            if tree:
                members[root] = tree
            else:
                members.pop(root, None)
        if members.keys() != self.members.keys():
            self.roots = sorted(members)
        self.members = members
        self.nested = len(self.roots) < len(self.providers)

    def _inventories(self, changed, old, new):
        """idle and holders of the classes whose inventories (or whose
        providers' places in a tree) changed."""
        classes = collections.defaultdict(list)
        for rp in changed:
            before, after = old[rp].provider, new[rp].provider
            had, has = old[rp].inventories, new[rp].inventories
            moved = before != after
            touched = [
                rc
                for rc in had.keys() | has.keys()
                if moved or had.get(rc) != has.get(rc)
            ]
            for rc in touched:
                classes[rc].append(rp)
        if not classes:
            return
        idle, holders = dict(self.idle), dict(self.holders)
        for rc, rps in classes.items():
            idle_rc = _patched(
                idle.get(rc, {}), {(rp, rc): new[rp].inventories.get(rc) for rp in rps}
            )
            # Only where a holder comes, goes or moves: a changed amount
            # (a heartbeat's ``reserved``) copies no holders map.
            holders[rc] = _patched(
                holders.get(rc, {}),
                {
                    rp: new[rp].provider if rc in new[rp].inventories else None
                    for rp in rps
                },
            )
            if idle_rc:
                idle[rc] = idle_rc
            else:
                idle.pop(rc, None)
                holders.pop(rc, None)
        self.idle, self.holders = idle, holders


def _patched(mapping, changes):
    """``mapping`` with ``changes`` ({key: value, or None to drop}) made:
    the same object where nothing differs, else a copy in which an
    existing key keeps its place."""
    if all(mapping.get(key) == value for key, value in changes.items()):
        return mapping
    patched = dict(mapping)
    for key, value in changes.items():
        if value is None:
            patched.pop(key, None)
        else:
            patched[key] = value
    return patched


def _without_moved(value_roots, changed, old, new):
    """``value_roots`` without the entries of the traits and aggregates
    that ``changed`` providers gained or lost, or had while they were
    added, deleted or moved to another tree."""
    stale = set()
    for rp in changed:
        was, now = old[rp], new[rp]
        moved = (was.provider and was.provider.root_id) != (
            now.provider and now.provider.root_id
        )
        for field in ("traits", "aggregates"):
            had, has = getattr(was, field), getattr(now, field)
            values = had | has if moved else had ^ has
            stale.update((field, value) for value in values)
    if not stale:
        return value_roots
    return {key: roots for key, roots in value_roots.items() if key not in stale}


def _holders(holders, changed, old, new, field):
    """{value: [providers]} of the providers' traits or aggregates (the
    ``field`` of their states), with the values ``changed`` providers
    gained or lost listed again."""
    gained, lost = collections.defaultdict(list), collections.defaultdict(set)
    for rp in changed:
        had, has = getattr(old[rp], field), getattr(new[rp], field)
        for value in has - had:
            gained[value].append(rp)
        for value in had - has:
            lost[value].add(rp)
    if not (gained or lost):
        return holders
    holders = dict(holders)
    for value in gained.keys() | lost.keys():
        gone = lost.get(value, ())
        members = list(holders.get(value, ()))  # a copy in C
        if gone:
            members = [rp for rp in members if rp not in gone]
        members += gained.get(value, [])
        if members:
            holders[value] = members
        else:
            holders.pop(value, None)
    return holders

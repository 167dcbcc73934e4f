"""Stage 2's ``Index`` answered by SQL on the request's connection: the
engine's path when the provider catalog is off or not current. Every
method is one set-based statement, or one per CHUNK ids."""

from collections.abc import Collection
from collections.abc import Hashable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects import common
from placement.objects.allocation_candidates import providers as stage
from placement.objects.allocation_candidates.providers import Idle
from placement.objects.allocation_candidates.providers import Inventory
from placement.objects.allocation_candidates.providers import Key
from placement.objects.allocation_candidates.providers import Provider
from placement.objects.catalog import rows

RP = tables.resource_providers
INV = tables.inventories
TRAIT = tables.traits
RPT = tables.resource_provider_traits
AGG = tables.placement_aggregates
RPA = tables.resource_provider_aggregates
RC = tables.resource_classes

IN_ROOTS = RP.c.root_provider_id.in_(db_api.int_list("roots"))
NOT_IN_CLASSES = INV.c.resource_class_id.not_in(db_api.int_list("classes"))

# Holders of the requested classes with their tree position, in one pass.
HOLDERS = (
    sa.select(
        INV.c.resource_provider_id,
        RP.c.parent_provider_id,
        RP.c.root_provider_id,
        INV.c.resource_class_id,
        *rows.STOCK_COLUMNS,
    )
    .join(RP, RP.c.id == INV.c.resource_provider_id)
    .where(INV.c.resource_class_id.in_(db_api.int_list("classes")))
)
HOLDERS_IN_TREES = HOLDERS.where(IN_ROOTS)

MEMBERS = sa.select(
    RP.c.id, RP.c.parent_provider_id, RP.c.root_provider_id, RP.c.uuid
).where(IN_ROOTS)

# Inventories of the other classes: the requested ones are in the snapshot.
STOCK = (
    sa.select(INV.c.resource_provider_id, INV.c.resource_class_id, RC.c.name)
    .add_columns(*rows.STOCK_COLUMNS)
    .join(RP, RP.c.id == INV.c.resource_provider_id)
    .join(RC, RC.c.id == INV.c.resource_class_id)
    .where(IN_ROOTS, NOT_IN_CLASSES)
)

# In trait id order: the order a provider's traits are listed in.
TRAIT_NAMES = (
    sa.select(RPT.c.resource_provider_id, TRAIT.c.name)
    .join(TRAIT, TRAIT.c.id == RPT.c.trait_id)
    .join(RP, RP.c.id == RPT.c.resource_provider_id)
    .where(IN_ROOTS)
    .order_by(RPT.c.trait_id)
)

SHARING = (
    sa.select(RPT.c.resource_provider_id)
    .join(TRAIT, TRAIT.c.id == RPT.c.trait_id)
    .where(TRAIT.c.name == stage.SHARING_TRAIT)
)


class SqlIndex:
    """``providers.Index`` on one connection. The uuids of the providers
    ``members`` reads are kept, so the summaries that follow look up no
    uuid twice."""

    unconfirmed = False  # SQL answers as the transaction reads

    def __init__(self, conn: sa.Connection):
        self.conn = conn
        self._uuids: dict[int, str] = {}

    def confirm(self, stamp: int | None = None, tokens: int | None = None) -> None:
        pass

    def class_ids(self, names: Iterable[str]) -> dict[str, int]:
        return common.resource_class_ids(self.conn, names)

    def trait_ids(self, names: Iterable[str]) -> dict[str, int]:
        return common.trait_ids(self.conn, names)

    def aggregate_ids(self, uuids: Iterable[str]) -> dict[str, int]:
        uuids = set(uuids)
        if not uuids:
            return {}
        return dict(
            self.conn.execute(
                sa.select(AGG.c.uuid, AGG.c.id).where(AGG.c.uuid.in_(uuids))
            ).all()
        )

    def root_of(self, provider_uuid: str) -> int:
        root = self.conn.execute(
            sa.select(RP.c.root_provider_id).where(
                RP.c.uuid.in_(stage.uuid_spellings(provider_uuid))
            )
        ).scalar()
        if root is None:
            raise stage.NoCandidates()
        return root

    def root_ids(self) -> list[int]:
        return list(
            self.conn.scalars(
                sa.select(RP.c.id)
                .where(RP.c.parent_provider_id.is_(None))
                .order_by(RP.c.id)
            )
        )

    def is_nested(self) -> bool:
        return (
            self.conn.execute(
                sa.select(RP.c.id).where(RP.c.parent_provider_id.is_not(None)).limit(1)
            ).first()
            is not None
        )

    def uuids(self, provider_ids: Iterable[int]) -> dict[int, str]:
        known = self._uuids
        out, missing = {}, []
        for rp in provider_ids:
            if rp in known:
                out[rp] = known[rp]
            else:
                missing.append(rp)
        for ids in stage.chunks(missing):
            out.update(
                self.conn.execute(
                    sa.select(RP.c.id, RP.c.uuid).where(RP.c.id.in_(ids))
                ).all()
            )
        return out

    def sharing_holds(self, class_ids: Collection[int]) -> bool:
        return (
            self.conn.execute(
                sa.select(INV.c.id)
                .join(RPT, RPT.c.resource_provider_id == INV.c.resource_provider_id)
                .join(TRAIT, TRAIT.c.id == RPT.c.trait_id)
                .where(
                    TRAIT.c.name == stage.SHARING_TRAIT,
                    INV.c.resource_class_id.in_(sorted(class_ids)),
                )
                .limit(1)
            ).first()
            is not None
        )

    def holders(
        self, class_ids: Collection[int], roots: list[int] | None
    ) -> tuple[dict[int, Provider], dict[Key, Inventory]]:
        providers, inventories = {}, {}
        params: dict = {"classes": sorted(class_ids)}
        if roots is not None:
            params["roots"] = roots
        for row in self.conn.execute(
            HOLDERS if roots is None else HOLDERS_IN_TREES, params
        ):
            rp = row[0]
            if rp not in providers:
                providers[rp] = Provider(rp, row[1], row[2])
            inventories[rp, row[3]] = Inventory._make((*row[4:], 0))
        return providers, inventories

    def members(self, roots: Iterable[int]) -> dict[int, Provider]:
        out = {}
        for ids in stage.chunks(roots):
            for rp, parent, root, uuid in self.conn.execute(MEMBERS, {"roots": ids}):
                out[rp] = Provider(rp, parent, root)
                self._uuids[rp] = uuid
        return out

    def _having(
        self,
        table: sa.Table,
        column: sa.Column,
        wanted: Collection[int],
        providers: Mapping[int, Provider],
        roots: list[int] | None,
    ) -> dict[int, frozenset[int]]:
        """{provider: frozenset of its ``column`` values in ``wanted``} of
        ``providers``, from rows of ``table`` (in the trees of ``roots``
        if given)."""
        into: dict[int, set[int]] = {}
        if wanted:
            query = sa.select(table.c.resource_provider_id, column).where(
                column.in_(sorted(wanted))
            )
            if roots is not None:
                query = query.join(RP, RP.c.id == table.c.resource_provider_id).where(
                    RP.c.root_provider_id.in_(roots)
                )
            for rp, value in self.conn.execute(query):
                if rp in providers:
                    into.setdefault(rp, set()).add(value)
        return {rp: frozenset(values) for rp, values in into.items()}

    def traits(
        self,
        wanted: Collection[int],
        providers: Mapping[int, Provider],
        roots: list[int] | None,
    ) -> dict[int, frozenset[int]]:
        return self._having(RPT, RPT.c.trait_id, wanted, providers, roots)

    def aggregates(
        self,
        wanted: Collection[int],
        providers: Mapping[int, Provider],
        roots: list[int] | None,
    ) -> dict[int, frozenset[int]]:
        return self._having(RPA, RPA.c.aggregate_id, wanted, providers, roots)

    def sharing(self, providers: Mapping[int, Provider]) -> list[int]:
        return [rp for rp in self.conn.scalars(SHARING) if rp in providers]

    def memberships(self, provider_ids: Collection[int]) -> dict[int, frozenset[int]]:
        into: dict[int, set[int]] = {}
        for ids in stage.chunks(provider_ids):
            for rp, aggregate in self.conn.execute(
                sa.select(RPA.c.resource_provider_id, RPA.c.aggregate_id).where(
                    RPA.c.resource_provider_id.in_(ids)
                )
            ):
                into.setdefault(rp, set()).add(aggregate)
        return {rp: frozenset(aggregates) for rp, aggregates in into.items()}

    def aggregate_roots(self, aggregate_ids: Collection[int]) -> dict[int, set[int]]:
        return self._roots(RPA, RPA.c.aggregate_id, aggregate_ids)

    def trait_roots(self, trait_ids: Collection[int]) -> dict[int, set[int]]:
        return self._roots(RPT, RPT.c.trait_id, trait_ids)

    def _roots(
        self, table: sa.Table, column: sa.Column, values: Collection[int]
    ) -> dict[int, set[int]]:
        """{value: root ids of the providers with it in ``table``}."""
        into: dict[int, set[int]] = {v: set() for v in values}
        for ids in stage.chunks(values):
            for value, root in self.conn.execute(
                sa.select(column, RP.c.root_provider_id)
                .distinct()
                .join(RP, RP.c.id == table.c.resource_provider_id)
                .where(column.in_(ids))
            ):
                into[value].add(root)
        return into

    def usage(
        self,
        *,
        classes: Collection[int] | None = None,
        providers: Iterable[int] | None = None,
        trees: tuple[int, int] | None = None,
        roots: list[int] | None = None,
    ) -> dict[Key, int]:
        return stage.usage(
            self.conn, classes=classes, providers=providers, trees=trees, roots=roots
        )

    def usage_columns(
        self, class_ids: tuple[int, ...], stock: Mapping[int, Any]
    ) -> dict[int, Any]:
        return stage.usage_columns(self.conn, class_ids, stock)

    def tree_usage(
        self, class_ids: Sequence[int], roots: Sequence[int]
    ) -> dict[int, bytes] | None:
        return None  # usage is read with the trees

    def usage_table(self, class_ids: Sequence[int], rps: Sequence[int]) -> None:
        return None  # usage is read with the trees

    def kept_answers(self, shape: Hashable) -> None:
        return None  # no catalog to keep them with

    def idle_summaries(
        self,
        roots: Collection[int],
        requested: Mapping[int, str],
        known: Iterable[tuple[Key, Inventory]],
    ) -> dict[int, Idle]:
        members = self.members(roots)
        held: dict[int, list[tuple[str, int, Inventory]]] = {}
        for (rp, rc), inventory in known:
            held.setdefault(rp, []).append((requested[rc], rc, inventory))
        classes = sorted(requested)
        trait_names: dict[int, list[str]] = {}
        for ids in stage.chunks(roots):
            for row in self.conn.execute(STOCK, {"roots": ids, "classes": classes}):
                held.setdefault(row[0], []).append(
                    (row[2], row[1], Inventory._make((*row[3:], 0)))
                )
        for ids in stage.chunks(roots):
            for rp, name in self.conn.execute(TRAIT_NAMES, {"roots": ids}):
                trait_names.setdefault(rp, []).append(name)
        return stage.idle_entries(
            members,
            self.uuids(members),
            held,
            {rp: tuple(names) for rp, names in trait_names.items()},
        )

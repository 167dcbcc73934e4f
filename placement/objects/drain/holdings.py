"""The consumers of drained trees and everything they hold, in one
statement: every allocation of every consumer with some allocation in
those trees (the parts outside them too), with the consumer's
generation, owner and type; and what the plan needs to know of the
providers they keep outside those trees (``kept_of``)."""

import collections
import dataclasses

import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects.allocation_candidates import providers
from placement.objects.drain import selection

A, RP, C = tables.allocations, tables.resource_providers, tables.consumers
P, U, CT = tables.projects, tables.users, tables.consumer_types
RC = tables.resource_classes


@dataclasses.dataclass
class Holding:
    """One consumer and its allocations by provider id."""

    uuid: str
    generation: int | None
    project_id: str | None
    user_id: str | None
    consumer_type: str | None
    # No consumers row (allocations written before consumers were
    # recorded): the plan gives it the owner online migrations would.
    missing: bool = False
    # provider id -> {class name: amount}
    allocations: dict = dataclasses.field(default_factory=dict)
    drained: list = dataclasses.field(default_factory=list)  # provider ids
    # in drained trees, ascending
    roots: dict = dataclasses.field(default_factory=dict)  # provider id ->
    # its root id
    parents: dict = dataclasses.field(default_factory=dict)  # provider id
    # -> its parent id or None

    def kept(self) -> list[int]:
        """The providers outside the drained trees (kept in place)."""
        return sorted(set(self.allocations) - set(self.drained))


def _statement():
    in_drained = (
        sa.select(A.c.consumer_id)
        .join(RP, RP.c.id == A.c.resource_provider_id)
        .where(RP.c.root_provider_id.in_(db_api.int_list("roots")))
    )
    return (
        sa.select(
            A.c.consumer_id,
            A.c.resource_provider_id,
            RC.c.name,
            A.c.used,
            RP.c.root_provider_id,
            RP.c.parent_provider_id,
            C.c.generation,
            P.c.external_id,
            U.c.external_id,
            CT.c.name,
            C.c.id,
        )
        .join(RP, RP.c.id == A.c.resource_provider_id)
        .join(RC, RC.c.id == A.c.resource_class_id)
        .outerjoin(C, C.c.uuid == A.c.consumer_id)
        .outerjoin(P, P.c.id == C.c.project_id)
        .outerjoin(U, U.c.id == C.c.user_id)
        .outerjoin(CT, CT.c.id == C.c.consumer_type_id)
        .where(A.c.consumer_id.in_(in_drained))
    )


STATEMENT = _statement()


def read(conn: sa.Connection, roots: list[int]) -> list[Holding]:
    """The consumers holding allocations in the trees of ``roots``, by
    (first drained root in ``roots`` order, consumer uuid)."""
    if not roots:
        return []
    drained = set(roots)
    found: dict[str, Holding] = {}
    amounts: dict = collections.defaultdict(lambda: collections.defaultdict(int))
    for row in conn.execute(STATEMENT, {"roots": sorted(roots)}):
        (consumer, rp, rc, used, root, parent, generation, project, user, kind, cid) = (
            row
        )
        holding = found.get(consumer)
        if holding is None:
            holding = found[consumer] = Holding(
                consumer, generation, project, user, kind, missing=cid is None
            )
        amounts[consumer, rp][rc] += used
        holding.roots[rp] = root
        holding.parents[rp] = parent
    for (consumer, rp), by_class in amounts.items():
        holding = found[consumer]
        holding.allocations[rp] = dict(by_class)
    order = {root: i for i, root in enumerate(roots)}
    for holding in found.values():
        holding.drained = sorted(
            rp for rp, root in holding.roots.items() if root in drained
        )
    return sorted(
        found.values(),
        key=lambda h: (min(order[h.roots[rp]] for rp in h.drained), h.uuid),
    )


RPT, T = tables.resource_provider_traits, tables.traits
RPA, AGG = tables.resource_provider_aggregates, tables.placement_aggregates
SHARING_TRAIT = "MISC_SHARES_VIA_AGGREGATE"


@dataclasses.dataclass(frozen=True)
class KeptProvider:
    """A provider outside the drained trees some consumer keeps."""

    root: int
    root_uuid: str
    sharing: bool  # has MISC_SHARES_VIA_AGGREGATE
    aggregates: frozenset  # its own aggregate uuids


@dataclasses.dataclass
class KeptFacts:
    providers: dict  # provider id -> KeptProvider
    # root id -> aggregate uuids of every provider of the tree (the trees
    # of the kept providers that are not sharing)
    tree_aggregates: dict


def _chunked(conn, statement, ids):
    for chunk in providers.chunks(ids):
        yield from conn.execute(statement, {"ids": chunk})


def kept_of(conn: sa.Connection, held: list[Holding]) -> KeptFacts:
    """What the plan needs of the providers ``held`` keeps outside the
    drained trees: root, sharing or not, aggregates; and the aggregates of
    the trees of those that are not sharing (a consumer's anchor). A few
    statements whatever the number of consumers (none without kept
    providers); Conflict for a kept provider whose root id is wrong."""
    ids = set().union(*(h.kept() for h in held)) if held else set()
    if not ids:
        return KeptFacts({}, {})
    selection.check_roots(conn, ids)
    ROOT = RP.alias("root")
    rows = list(
        _chunked(
            conn,
            sa.select(RP.c.id, RP.c.root_provider_id, ROOT.c.uuid)
            .join(ROOT, ROOT.c.id == RP.c.root_provider_id)
            .where(RP.c.id.in_(db_api.int_list("ids"))),
            ids,
        )
    )
    sharing = {
        rp
        for (rp,) in _chunked(
            conn,
            sa.select(RPT.c.resource_provider_id)
            .join(T, T.c.id == RPT.c.trait_id)
            .where(
                T.c.name == SHARING_TRAIT,
                RPT.c.resource_provider_id.in_(db_api.int_list("ids")),
            ),
            ids,
        )
    }
    own: dict = collections.defaultdict(set)
    for rp, agg in _chunked(
        conn,
        sa.select(RPA.c.resource_provider_id, AGG.c.uuid)
        .join(AGG, AGG.c.id == RPA.c.aggregate_id)
        .where(RPA.c.resource_provider_id.in_(db_api.int_list("ids"))),
        ids,
    ):
        own[rp].add(agg)
    kept = {
        rp: KeptProvider(root, root_uuid, rp in sharing, frozenset(own.get(rp, ())))
        for rp, root, root_uuid in rows
    }
    anchors = {k.root for k in kept.values() if not k.sharing}
    trees: dict = {root: set() for root in anchors}
    if anchors:
        for root, agg in _chunked(
            conn,
            sa.select(RP.c.root_provider_id, AGG.c.uuid)
            .join(RPA, RPA.c.resource_provider_id == RP.c.id)
            .join(AGG, AGG.c.id == RPA.c.aggregate_id)
            .where(RP.c.root_provider_id.in_(db_api.int_list("ids")))
            .distinct(),
            anchors,
        ):
            trees[root].add(agg)
    return KeptFacts(kept, {root: frozenset(a) for root, a in trees.items()})

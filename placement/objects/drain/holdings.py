"""The consumers of drained trees and everything they hold, in one
statement: every allocation of every consumer with some allocation in
those trees (the parts outside them too), with the consumer's
generation, owner and type."""

import collections
import dataclasses

import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables

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
        consumer, rp, rc, used, root, parent, generation, project, user, kind = row
        holding = found.get(consumer)
        if holding is None:
            holding = found[consumer] = Holding(
                consumer, generation, project, user, kind
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

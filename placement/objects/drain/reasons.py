"""Why a consumer fits nowhere: explain's document (doc/explain.md) for
its equivalent request, judged on the cloud as the plan leaves it (the
drained trees left out, the plan's own moves counted as usage)."""

import sqlalchemy as sa

from placement.objects.allocation_candidates import explain
from placement.objects.allocation_candidates import providers
from placement.objects.allocation_candidates import request as ac_request

# When every filter leaves something: the trees that take the request
# alone were filled by the consumers planned before it.
FILLED = (
    "candidates exist for it alone, but the consumers planned before it "
    "took the room it needed"
)


def narrowed(
    snapshot: providers.Snapshot, class_ids: set, allowed: set
) -> providers.Snapshot:
    """``snapshot`` with only the classes ``class_ids`` and the trees of
    the roots ``allowed``."""
    members = {rp: p for rp, p in snapshot.providers.items() if p.root_id in allowed}
    inventories = {
        key: inventory
        for key, inventory in snapshot.inventories.items()
        if key[1] in class_ids and key[0] in members
    }
    return providers.Snapshot(
        providers=members,
        inventories=inventories,
        used={k: n for k, n in snapshot.used.items() if k in inventories},
        traits={rp: t for rp, t in snapshot.traits.items() if rp in members},
        aggregates={rp: a for rp, a in snapshot.aggregates.items() if rp in members},
        serves={
            rp: roots & allowed
            for rp, roots in snapshot.serves.items()
            if rp in members
        },
        nested=snapshot.nested,
    )


class _Explainer(explain._Explainer):
    """Explain over the plan's snapshot instead of a fresh read."""

    def __init__(self, conn, index, request, snapshot, allowed):
        super().__init__(conn, index, request)
        self.plan_snapshot = snapshot
        self.allowed = allowed

    def snapshot(self, class_ids, trait_ids, aggregate_ids):
        return narrowed(self.plan_snapshot, set(class_ids.values()), self.allowed)


def explained(
    conn: sa.Connection,
    index: providers.Index,
    request: ac_request.Request,
    snapshot: providers.Snapshot,
    allowed: set,
) -> dict:
    """Explain's document (no ``candidates``) for ``request`` on
    ``snapshot`` narrowed to the trees of ``allowed``."""
    try:
        document = _Explainer(conn, index, request, snapshot, allowed).run()
    except providers.NoCandidates as e:
        document = explain.unmatched(e)
    if document["reason"] is None:
        document["reason"] = FILLED
    return document


def refused(reason: str) -> dict:
    """Explain's document for a consumer no request is equivalent to
    (the plan does not search for it): ``reason``, no filter run."""
    return {
        "groups": {},
        "request": [],
        "closest": [],
        "truncated": False,
        "reason": reason,
    }

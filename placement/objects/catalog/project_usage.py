"""A project's usage (and a user's in it) from the allocations the
catalog follows (catalog/consumers.py), for GET /usages: per consumer
type, each class's allocated amounts summed and the consumers counted,
as objects/usage.py's SQL sums them. Its inner joins are kept: a
consumer without its record, or whose project or user row is gone, and
a row of a class the catalog does not name, are not counted; a consumer
of no (known) type is of type None."""

import collections

import numpy as np

from placement.objects.catalog import consumers


def by_type(
    allocations: consumers.Allocations,
    project: str,
    user: str | None,
    classes: dict,
) -> dict:
    """{type (None: none): ({class id: used}, consumers counted)} of the
    consumers of ``project`` (and ``user``), over the rows of ``classes``
    ({id: name})."""
    sums: collections.Counter = collections.Counter()  # (type, rc) -> used
    counts: collections.Counter = collections.Counter()  # type -> consumers
    _base(allocations, project, user, classes, sums, counts)
    for consumer in allocations.changed.values():
        if consumer is None or consumer.project != project:
            continue
        if user is not None and consumer.user != user:
            continue
        rows = [row for row in consumer.rows if row.rc in classes]
        if rows:
            counts[consumer.type] += 1
            for row in rows:
                sums[consumer.type, row.rc] += row.used
    found: dict = {kind: ({}, n) for kind, n in counts.items()}
    for (kind, rc), used in sums.items():
        found[kind][0][rc] = used
    return found


def _base(allocations, project, user, classes, sums, counts):
    """``sums`` and ``counts`` of the consumers in the base columns that
    the overlay does not mask, in vector operations."""
    base = allocations.base
    chosen = np.isin(base.project, base.positions("project", project))
    if user is not None:
        chosen &= np.isin(base.user, base.positions("user", user))
    if not chosen.any():
        return
    chosen &= ~allocations.masked()
    rows = np.flatnonzero(chosen[base.owner])
    rc = base.rc[rows]
    rows = rows[np.isin(rc, np.fromiter(classes, dtype=np.int64), kind="table")]
    if not len(rows):
        return
    # The rows are grouped by consumer: each consumer's first is where
    # its owner changes.
    owner = base.owner[rows]
    first = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    kinds = base.type[owner].astype(np.int64)
    width = int(base.rc[rows].max()) + 1
    keys = kinds * width + base.rc[rows]
    used = base.used[rows]
    size = int(keys.max()) + 1
    if int(np.abs(used).sum(dtype=np.int64)) < 2**53:
        # Sums of floats below 2**53 are exact: bincount's float sums.
        totals = np.bincount(keys, weights=used, minlength=size).astype(np.int64)
    else:
        totals = np.zeros(size, dtype=np.int64)
        np.add.at(totals, keys, used)
    seen = np.bincount(keys, minlength=size)
    names = base.names["type"]
    for key in np.flatnonzero(seen).tolist():
        sums[names[key // width], key % width] += int(totals[key])
    kind_of, n = np.unique(kinds[first], return_counts=True)
    for kind, count in zip(kind_of.tolist(), n.tolist()):
        counts[names[kind]] += count

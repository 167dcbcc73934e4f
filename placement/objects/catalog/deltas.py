"""What changed since a catalog's counts, from the change log
(``tables.catalog_log``): {kind: ids} of the numbers between two counts,
or None when the catalog must be read whole instead."""

import collections
import functools

import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects.catalog import changes
from placement.objects.catalog import history
from placement.objects.catalog.store import Catalog

LOG = tables.catalog_log

# More logged changes than this since a worker's catalog: it reads the
# catalog whole instead.
MAX_DELTAS = 5000


def changed(
    conn: sa.Connection, then: dict, now: dict, tokens: tuple | None = None
) -> dict | None:
    """{kind: set of ids (CONSUMER: of uuids)} changed between the counts
    ``then`` and ``now`` ({shard: count}), from the log; None when the
    catalog must be read whole: a count went back (shard rows re-created)
    or came up again with another history (``tokens``: those of ``then``
    and of ``now``, ``history.same``), the log no longer has every
    change (pruned), too many changes, or one of EVERYTHING. One
    statement over the shards that moved only (usually one: a claim's),
    not all CATALOG_SHARDS: MariaDB's range optimizer paid for every
    shard's range, about 3 us each."""
    ranges = _ranges(then, now)
    if not ranges:
        if ranges is None or not history.same(then, now, tokens, ()):
            return None
        return {}
    params = {}
    for i, (shard, low, high) in enumerate(sorted(ranges)):
        params["shard_%d" % i] = shard
        params["low_%d" % i] = low
        params["high_%d" % i] = high
    rows = db_api.plain_rows(conn, _items(len(ranges)), params)
    if len(rows) > MAX_ITEMS or not history.same(then, now, tokens, rows):
        return None
    return _named(ranges, rows)


def _ranges(then, now):
    """[(shard, low, high)] of the shards whose counts moved from
    ``then`` to ``now``; None when one went back or too many changes
    (more than MAX_DELTAS) are between."""
    ranges = []
    for shard in then.keys() | now.keys():
        low, high = then.get(shard, 0), now.get(shard, 0)
        if high < low:
            return None
        if high > low:
            ranges.append((shard, low, high))
    if sum(high - low for _, low, high in ranges) > MAX_DELTAS:
        return None
    return ranges


def _named(ranges, rows):
    """``changed``'s answer from the log ``rows`` (shard, seq, kind, ref,
    uuid) of the numbers in ``ranges`` (those outside are left out)."""
    bounds = {shard: (low, high) for shard, low, high in ranges}
    changed = collections.defaultdict(set)
    numbers = set()
    for shard, seq, kind, ref, uuid, _token in rows:
        low, high = bounds.get(shard, (0, 0))
        if low < seq <= high:
            numbers.add((shard, seq))
            changed[kind].add(uuid if kind == changes.CONSUMER else ref)
    # Each number below a shard's count was committed with it: one that is
    # missing was pruned.
    if len(numbers) != sum(high - low for _, low, high in ranges):
        return None
    if changes.EVERYTHING in changed:
        return None
    return dict(changed)


# Log items one read past a catalog's counts takes at most (a number has
# up to 4 from the triggers, MAX_LOGGED from this service): more, and the
# catalog is read whole.
MAX_ITEMS = 4 * MAX_DELTAS


def _written(name: str, type_: type[sa.Integer]) -> sa.BindParameter:
    return sa.bindparam(name, type_=type_, literal_execute=True)


@functools.cache
def _items(count: int) -> sa.Select:
    """The log items of ``count`` shards (bound ``shard_<i>``), numbered
    from ``low_<i>`` (those at it, for their tokens) to ``high_<i>``; at
    most MAX_ITEMS + 1. Built once per count of shards."""
    wanted = sa.or_(
        *(
            sa.and_(
                # Written into the text, not bound: binding is most of
                # the CPU a read of a few rows costs (``db_api.plain_rows``).
                LOG.c.shard == _written("shard_%d" % i, sa.Integer),
                LOG.c.seq >= _written("low_%d" % i, sa.BigInteger),
                LOG.c.seq <= _written("high_%d" % i, sa.BigInteger),
            )
            for i in range(count)
        )
    )
    return (
        sa.select(
            LOG.c.shard, LOG.c.seq, LOG.c.kind, LOG.c.ref, LOG.c.uuid, LOG.c.token
        )
        .where(wanted)
        .limit(MAX_ITEMS + 1)
    )


def since(
    conn: sa.Connection, catalog: Catalog, seen: changes.Look | None = None
) -> tuple[dict, dict, dict | None]:
    """(counts now, their tokens, ``changed``'s answer for ``catalog``):
    the counts, as the look ``seen`` read them (``changes.shards``) or
    read here, then the log items of the shards that moved. At READ
    COMMITTED the log read reads a later snapshot: every number up to a
    count the look read had committed before it, so it is there unless
    pruned (``changed`` reads the catalog whole then), and numbers past
    the counts are left for the next catch-up."""
    now, marks = changes.shards(seen) or changes.marks(conn)
    return now, marks, changed(conn, catalog.seqs, now, (catalog.tokens, marks))

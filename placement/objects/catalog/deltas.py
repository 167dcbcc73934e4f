"""What changed since a catalog's counts, from the change log
(``tables.catalog_log``): {kind: ids} of the numbers between two counts,
or None when the catalog must be read whole instead."""

import collections

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
    change (pruned), too many changes, or one of EVERYTHING."""
    ranges = _ranges(then, now)
    if not ranges:
        if ranges is None or not history.same(then, now, tokens, ()):
            return None
        return {}
    wanted = sa.or_(
        *(
            sa.and_(LOG.c.shard == shard, LOG.c.seq >= low, LOG.c.seq <= high)
            for shard, low, high in ranges
        )
    )
    rows = conn.execute(
        sa.select(
            LOG.c.shard, LOG.c.seq, LOG.c.kind, LOG.c.ref, LOG.c.uuid, LOG.c.token
        ).where(wanted)
    ).all()
    if not history.same(then, now, tokens, rows):
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


def _since_statement():
    """Every shard's count and token, and the log items numbered from a
    catalog's counts on (bound ``low_<shard>``: those at it, for their
    tokens, and those past it), in one statement: one snapshot at READ
    COMMITTED, so every number up to a count read is there unless pruned.
    The counts are the rows without a kind."""
    past = sa.or_(
        *(
            sa.and_(
                # The shard's number and its count written into the text:
                # binding them is most of the CPU a read of a few rows
                # costs (``db_api.plain_rows``).
                LOG.c.shard == sa.literal_column(str(shard), sa.Integer),
                LOG.c.seq
                >= sa.bindparam(
                    "low_%d" % shard, type_=sa.BigInteger, literal_execute=True
                ),
            )
            for shard in range(tables.CATALOG_SHARDS)
        )
    )
    items = (
        sa.select(
            LOG.c.shard, LOG.c.seq, LOG.c.kind, LOG.c.ref, LOG.c.uuid, LOG.c.token
        )
        .where(past)
        .limit(MAX_ITEMS + 1)
        .subquery()
    )
    counts = sa.select(
        changes.CATALOG.c.shard,
        changes.CATALOG.c.changes,
        sa.cast(sa.null(), sa.SmallInteger),
        sa.cast(sa.null(), sa.Integer),
        sa.cast(sa.null(), sa.String(36)),
        changes.CATALOG.c.token,
    )
    return sa.union_all(counts, sa.select(items))


_SINCE = _since_statement()


def since(conn: sa.Connection, catalog: Catalog) -> tuple[dict, dict, dict | None]:
    """(counts now, their tokens, ``changed``'s answer for ``catalog``)
    in one statement, on the driver's cursor (``db_api.plain_rows``: a
    claim's next candidate request sends it, and SQLAlchemy's cache key
    of its 32 shards' terms costs more than its rows)."""
    then = catalog.seqs
    now, marks, items = {}, {}, []
    low = {"low_%d" % s: then.get(s, 0) for s in range(tables.CATALOG_SHARDS)}
    for row in db_api.plain_rows(conn, _SINCE, low):
        if row[2] is None:
            now[row[0]], marks[row[0]] = row[1], row[5]
        else:
            items.append(row)
    ranges = _ranges(then, now)
    if (
        ranges is None
        or len(items) > MAX_ITEMS
        or not history.same(then, now, (catalog.tokens, marks), items)
    ):
        return now, marks, None
    return now, marks, _named(ranges, items) if ranges else {}

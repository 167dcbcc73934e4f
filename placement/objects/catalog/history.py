"""Whether a catalog's counts and the counts the database shows now
belong to the same history: a restore can bring the counts back, and new
writes take them up to the catalog's again, with other tokens. The
catalog is read whole then, as for a count gone back."""

from collections.abc import Iterable

from placement.objects.catalog.store import Catalog


def diverged(catalog: Catalog, stamp: int, tokens: int | None) -> bool:
    """Whether the look's ``stamp`` and ``tokens`` (its token sum; None:
    not read) are the catalog's stamp with another history: a restore
    brought counts back and new writes took them up to it again, with new
    tokens. The catalog is read whole then, as for a count gone back."""
    return tokens is not None and catalog.stamp == stamp and catalog.token_sum != tokens


def same(then: dict, now: dict, tokens: tuple | None, rows: Iterable) -> bool:
    """Whether the counts ``now`` follow the history of a catalog at the
    counts ``then``, by ``tokens`` ({shard: token} of ``then``, of
    ``now``; None: not told): a shard at the catalog's count has the
    token the catalog read with it; one past it has, on the log rows at
    the catalog's count (``rows``: shard, seq, kind, ref, uuid, token),
    that token too. A shard whose row at the catalog's count is gone
    (pruned) passes: nothing tells, and the safety net (``verify.SAFETY_NET_S``)
    remains; its numbers past it must all be there (``deltas``), or the
    catalog is read whole."""
    if tokens is None:
        return True
    mine, marks = tokens
    for shard, count in now.items():
        if (
            count
            and count == then.get(shard, 0)
            and marks.get(shard) != mine.get(shard)
        ):
            return False
    for row in rows:
        shard, seq, token = row[0], row[1], row[5]
        low = then.get(shard, 0)
        if seq == low and low < now.get(shard, 0) and token != mine.get(shard):
            return False
    return True

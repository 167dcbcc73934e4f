"""Keeping the catalog current: one ``Cache`` per database in this
process, which a request asks for the catalog at the stamp its transaction
reads (``current``) and which brings the catalog up to date by following
the change log or, when the log cannot tell, by reading it whole
(``holder``), having compared it with the database first when that is due
(``verify``); and ``warm``, the first read before a process takes
requests."""

import time
from collections.abc import Callable

import sqlalchemy as sa

from placement import events
from placement.db import api as db_api
from placement.objects.catalog import changes
from placement.objects.catalog import history
from placement.objects.catalog import holder
from placement.objects.catalog import host_answers
from placement.objects.catalog import used as catalog_used
from placement.objects.catalog import verify
from placement.objects.catalog.store import Catalog

# How many times a request brings the catalog up to the count its
# transaction sees before it reads through SQL instead.
CHASES = 3

# After a search that answered from the held catalog found it behind the
# database (and so searched twice), searches read the stamp first for this
# long: under a steady stream of writes nearly every such answer would be
# thrown away, and a wasted search costs far more than the statement saved.
UNCONFIRMED_PAUSE_S = 1.0


class Cache(verify.Verifier):
    """One database's catalog in this process."""

    def current(
        self,
        db: db_api.Database,
        conn: sa.Connection,
        seen: changes.Look | None = None,
        used: Callable[[str], None] = events.catalog_used,
        shared: bool = False,
    ) -> Catalog | None:
        """The catalog when it is (or could be made) current, else None
        (the caller reads through SQL); ``used`` is told how. ``seen``:
        the look (``changes.look``) when the caller has read it (its
        ``tokens`` None: not read, the history is taken as the
        catalog's). ``shared``: ``conn`` is in autocommit, its looks are
        told to the host's other workers (``Holder.look``)."""
        if self.stale():
            self.verify(db, wait=self.followed, own=True)
            if self.below_floor():
                # Another comparison is under way here: another worker of
                # this host may have answered from rows this catalog lacks.
                used("sql")
                return None
        if seen is None:
            seen = self.look(conn, shared)
        stamp, tokens = seen.stamp, seen.tokens
        catalog = self.catalog
        outcome = "hit"
        for _ in range(CHASES):
            if (
                catalog is None
                or catalog.stamp < stamp
                or history.diverged(catalog, stamp, tokens)
            ):
                # One request brings the catalog up to date. Following
                # deltas takes milliseconds: others wait for it. A whole
                # read takes a second at 70,000 providers: others read
                # through SQL meanwhile.
                if not self._lock(wait=catalog is not None):
                    used("sql")
                    return None
                try:
                    held = self.catalog
                    if held is None or held.stamp < stamp:
                        if self._refresh(db, conn, look=seen) == "full":
                            outcome = "read"
                    elif history.diverged(held, stamp, tokens):
                        if self._refresh(db, conn, whole=True) == "full":
                            outcome = "read"
                    catalog = self.catalog
                finally:
                    self.reading.release()
            if catalog.stamp == stamp or db.dialect == "sqlite":
                break
            # Brought up to date past the count this transaction read: at
            # READ COMMITTED its next statements see those writes anyway,
            # so it takes the count they see, and catches up with writes
            # that committed meanwhile (under steady writes there is
            # usually one).
            seen = self.look(conn, shared)
            stamp, tokens = seen.stamp, seen.tokens
        # A catalog newer than this transaction (SQLite reads one snapshot)
        # is kept for the next request, but this one reads through SQL.
        if catalog.stamp != stamp or history.diverged(catalog, stamp, tokens):
            outcome = "sql"
        used(outcome)
        return catalog if outcome != "sql" else None


_CACHES = db_api.PerDatabase(Cache)


def _cache(db: db_api.Database) -> Cache:
    return _CACHES.of(db)


def current(
    db: db_api.Database,
    conn: sa.Connection,
    seen: changes.Look | None = None,
    shared: bool = False,
) -> Catalog | None:
    """The catalog of ``db`` at the stamp ``conn``'s transaction reads, or
    None when the caller should read through SQL (the catalog is off, or
    being read by another request, or newer than this transaction).
    ``seen``: the look (``changes.look``) the caller has just read in this
    transaction (it is read here otherwise). ``shared``: ``conn`` is in
    autocommit (``Database.several_reads``): its looks are told to the
    host's other workers (``Holder.look``)."""
    if not db.conf.placement.provider_catalog:
        return None
    return _cache(db).current(db, conn, seen, shared=shared)


def look(
    db: db_api.Database, conn: sa.Connection, shared: bool = False
) -> changes.Look:
    """The look ``conn`` reads (``Holder.look``: with the shards' counts
    where the last look found the catalog of ``db`` behind; told to the
    host's other workers when ``shared``)."""
    return _cache(db).look(conn, shared)


def host_saw(db: db_api.Database, arrived: float) -> tuple[int, int] | None:
    """The (stamp, tokens) a look of this host sent after ``arrived``
    (``time.monotonic()``) found on ``db`` (``host_look``), if the last
    one was: not on SQLite, whose reads see their transaction's snapshot
    (``Database.several_reads``)."""
    cache = _CACHES.get(db)
    if cache is None or db.dialect == "sqlite":
        return None
    return cache.host_look.since(arrived)


def shared_answers(db: db_api.Database) -> host_answers.HostAnswers | None:
    """The answers this host's workers share on ``db``
    (``host_answers``), when they do: the catalog and ``[placement]
    host_answers`` on, this process's Cache made (in placement-api's
    master, before the fork: ``warm``) and its store writable."""
    placement = db.conf.placement
    if not (placement.provider_catalog and placement.host_answers):
        return None
    cache = _CACHES.get(db)
    if cache is None or cache.host_answers.broken:
        return None
    return cache.host_answers


def structure_at(
    db: db_api.Database, conn: sa.Connection, seen: changes.Look
) -> object:
    """The ``structure`` of the catalog of ``db`` brought to the look
    ``seen`` (by the log, as ``current`` does, counted as no use of it),
    or None when it cannot be (read whole meanwhile, newer than the
    transaction)."""
    if not db.conf.placement.provider_catalog:
        return None
    catalog = _cache(db).current(db, conn, seen, used=lambda outcome: None)
    return catalog.structure if catalog is not None else None


def held(db: db_api.Database) -> Catalog | None:
    """The catalog this process holds for ``db``, when it is on, no
    request need compare it with the database first (``Cache.stale``)
    and it is likely current: at the stamp and tokens the host's last
    look found (``host_look``) or, where no look of the host is known
    (SQLite: not shared), no search found it behind in the last
    UNCONFIRMED_PAUSE_S; else None. Whether it is the one a transaction
    reads is for the caller to confirm (``current`` with the stamp it
    reads, when it is not)."""
    if not db.conf.placement.provider_catalog:
        return None
    cache = _CACHES.get(db)
    if cache is None or cache.stale():
        return None
    catalog = cache.catalog
    seen = cache.host_look.last() if db.dialect != "sqlite" else None
    if seen is not None and catalog is not None:
        return catalog if seen == (catalog.stamp, catalog.token_sum) else None
    if time.monotonic() - cache.behind_at < UNCONFIRMED_PAUSE_S:
        return None
    return catalog


def wrote_since_look(db: db_api.Database) -> bool:
    """Whether a write of this process committed after the host's last
    look was sent (``Holder.wrote_since_look``): the catalog ``held`` at
    that look's stamp then likely lacks it. False on SQLite (no host
    look) or before this process holds a catalog."""
    cache = _CACHES.get(db)
    return cache is not None and cache.wrote_since_look(db.engine)


def compares_first(db: db_api.Database) -> bool:
    """Whether a request using the catalog of ``db`` now would compare it
    with the database first (``Cache.stale``: a statement, and a whole
    read when another writer's change is found)."""
    cache = _CACHES.get(db)
    return cache is not None and cache.stale()


def found_behind(db: db_api.Database) -> None:
    """A search answering from ``held``'s catalog found it behind: the
    next ones read the stamp first for a while (UNCONFIRMED_PAUSE_S)."""
    cache = _CACHES.get(db)
    if cache is not None:
        cache.behind_at = time.monotonic()


def warm(db: db_api.Database) -> int | None:
    """Bring the catalog of ``db`` up to date now, outside any request (if
    it is on): a process calls this before it takes requests, so that no
    user's request waits for the first read. The number of providers it
    holds, or None when the catalog is off."""
    if not db.conf.placement.provider_catalog:
        return None
    cache = _cache(db)
    cache.warm(db)
    return len(cache.catalog.providers) if cache.catalog is not None else 0


def doubt(db: db_api.Database) -> None:
    """The catalog of ``db`` may be behind a write of another writer: the
    next request compares it with the database first (``Cache.verify``).
    Called when a claim finds less room than a search may have offered."""
    cache = _CACHES.get(db)
    if cache is not None:
        cache.doubt()


def logged_by_triggers(db: db_api.Database) -> bool:
    """Whether this process found the change-log triggers installed (all
    of them) at its last look: at the catalog's last whole read or
    safety-net comparison, or now if it never looked. When True, the log
    names every writer's changes; when False (the fallback), only this
    service's."""
    return _logged(db, _cache(db))


def _logged(db: db_api.Database, cache: Cache) -> bool:
    if cache.triggers is None:
        return cache.look_for_triggers(db)
    return cache.triggers


def with_allocations(db: db_api.Database, conn: sa.Connection) -> Catalog | None:
    """The catalog at the stamp ``conn`` reads when it answers allocations
    (``catalog/consumers.py``, the providers' generations ``catalog.used``'s,
    read whole with them): the triggers are there, and were at every look
    since its allocations were read whole (else it lacks the writes of the
    time they were not); else None (the caller reads SQL). The database's
    Cache found once (most reads come here)."""
    cache = _cache(db)
    if not _logged(db, cache) or not db.conf.placement.provider_catalog:
        return None
    catalog = cache.current(db, conn)
    if catalog is None or catalog.allocations is None or catalog.used is None:
        return None
    if catalog.allocations.read_at <= cache.unlogged_at:
        return None
    return catalog


def mode(db: db_api.Database) -> str:
    """How the catalog follows other writers (``MODES``), for the start-up
    log and the health check."""
    return holder.MODES[logged_by_triggers(db)]


def prune_if_due(db: db_api.Database) -> bool:
    """What the follower calls: the log pruned (``Cache.prune``)."""
    cache = _CACHES.get(db)
    return cache is not None and cache.prune(db)


def verify_if_due(db: db_api.Database, ahead: float = 0.0) -> str | None:
    """Compare the catalog of ``db`` with the database (``Cache.verify``)
    if it is on, read, and the last comparison is due within ``ahead``
    seconds: what the follower calls, busy or idle, so that requests
    need not compare (``follow``). What it found, or None when nothing was done."""
    if not db.conf.placement.provider_catalog:
        return None
    cache = _CACHES.get(db)
    if cache is None or not cache.due(ahead):
        return None
    return cache.verify(db)


def follow(db: db_api.Database, followed: bool) -> None:
    """A follower thread of this process starts (True) or stops (False)
    comparing the catalog of ``db`` with the database every
    VERIFY_EVERY_S (``verify_if_due``): requests then compare first only
    when it falls behind (FOLLOWED_VERIFY_S)."""
    _cache(db).follow(followed)


def catch_up(db: db_api.Database, told: float = 0.0) -> str | None:
    """Bring the catalog of ``db`` up to date now, if it is on and no
    request is at it: what an idle worker's follower calls, so that the
    next request finds it current (``cmd/follower.py``). "counts",
    "deltas", "full", "host" (by what another worker of this host read:
    ``host_deltas``) or "none" (it was current, or another worker of this
    host found it so in the last ``told`` seconds: ``host_look``); None
    when the catalog is off or busy, or it waits a period for the move
    another worker of this host is likely reading (``Holder.catch_up``)."""
    if not db.conf.placement.provider_catalog:
        return None
    return _cache(db).catch_up(db, told)


def used_of(db: db_api.Database, catalog: Catalog) -> catalog_used.Used | None:
    """The usage of ``catalog`` where answers may take it from memory: the
    triggers log every writer's allocations (``logged_by_triggers``) and
    it was read with them; else None (usage is read per request)."""
    if catalog.used is None or not logged_by_triggers(db):
        return None
    return catalog.used

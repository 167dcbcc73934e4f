"""The catalog a process holds for one database, and its lock: brought up
to date by following the change log (``deltas``) or, when the log cannot
tell, by reading it whole; the fingerprints of the catalogs it held, by
their counts; whether the change-log triggers are there."""

import collections
import logging
import threading
import time
import weakref

import sqlalchemy as sa

from placement import events
from placement.db import api as db_api
from placement.db import triggers
from placement.objects.catalog import changes
from placement.objects.catalog import currency
from placement.objects.catalog import deltas
from placement.objects.catalog import history
from placement.objects.catalog import host_deltas
from placement.objects.catalog import host_look
from placement.objects.catalog import snapshot
from placement.objects.catalog.store import Catalog

LOGGER = logging.getLogger(__name__)

# How long a request waits for another one to apply deltas.
WAIT_S = 1.0
# After the log could not tell what changed (a count gone back: a restore
# under way; a gap; EVERYTHING) or a comparison found another writer's
# rows, the comparison runs at the fallback's period for this long even
# with the triggers: a dump's restore loads its tables one by one after
# the counts, without the triggers (it creates a table's triggers after
# its rows), and a catalog read whole meanwhile lacks the tables loaded
# after it, at the counts the restore leaves.
WARY_S = 60.0
# Fingerprints of the catalogs a process held, by their counts, kept to
# compare with a published one taken at the same counts.
HISTORY = 64


# When a write transaction of this process last began its COMMIT, by the
# engine it wrote with and that engine's autocommit twin, which reads
# the look (``Holder.wrote_since_look``).
_WROTE: "weakref.WeakKeyDictionary[sa.Engine, float]" = weakref.WeakKeyDictionary()


@db_api.before_commit
def _wrote(conn: sa.Connection, notes: dict) -> None:
    _WROTE[conn.engine] = now = time.monotonic()
    twin = db_api.twin_of(conn.engine)
    if twin is not None:
        _WROTE[twin] = now


class Holder:
    """The catalog held, its lock, and following the log."""

    def __init__(self):
        self.catalog = None
        self.reading = threading.Lock()
        # True while the held lock reads the whole catalog (not deltas).
        self.reading_all = False
        # When a search last found the held catalog behind (``found_behind``).
        self.behind_at = float("-inf")
        # {currency.key(seqs): fingerprint} of the catalogs held since the
        # last whole read, to compare with the published comparison.
        self.history: collections.OrderedDict = collections.OrderedDict()
        # Whether the triggers were all there at the last look (None: not
        # looked yet), and when it looked (``logged_by_triggers``).
        self.triggers: bool | None = None
        # When the triggers were last found missing.
        self.unlogged_at = float("-inf")
        self.triggers_at = float("-inf")
        # Until when the comparison runs at the fallback's period (WARY_S).
        self.wary_until = float("-inf")
        # The last look of this host's followers (shared with the workers
        # forked after this was made).
        self.host_look = host_look.HostLook()
        # What its workers read to follow claims, for the others, and the
        # catalog (stamp, tokens) this process's follower last waited at.
        self.host_deltas = host_deltas.HostDeltas()
        self.awaited: tuple[int, int] | None = None
        # Whether the last look found the held catalog behind: the next
        # reads the shards' counts too (``look``).
        self.behind = False

    def look(self, conn: sa.Connection, shared: bool = False) -> changes.Look:
        """The look ``conn`` reads, with the shards' counts and tokens
        (sparing a catch-up its statement of them) where the last look
        found the catalog behind, or this process wrote since the host's
        last look (``wrote_since_look``): under a stream of claims nearly
        every look does, and the shards cost every look that does not some CPU
        and the database's time (``changes.STAMP_SHARDS``). ``shared``:
        ``conn`` is in autocommit (``Database.several_reads``), its
        statement a snapshot of its own: the host's other workers are
        told what it saw and when it was sent (``host_look``)."""
        sent = time.monotonic()
        shards = self.behind or self.wrote_since_look(conn.engine)
        seen = changes.look(conn, shards=shards)
        if shared:
            self.host_look.saw(seen.stamp, seen.tokens, sent)
        catalog = self.catalog
        self.behind = catalog is not None and catalog.stamp != seen.stamp
        return seen

    def wrote_since_look(self, engine: sa.Engine) -> bool:
        """Whether a write of this process on ``engine`` began its COMMIT
        after the host's last look was sent (``host_look``): a claim's
        PUT before its next GET. The catalog at that look's stamp then
        likely lacks it (its allocations, logged by the triggers): the
        next look reads the shards' counts too, and a search reads the
        stamp first rather than answer from the held catalog
        (``catalog_index.unconfirmed``). A guess, for the cost only; never
        on SQLite, which has no host look."""
        wrote = _WROTE.get(engine)
        if wrote is None or engine.dialect.name == "sqlite":
            return False
        sent = self.host_look.sent()
        return sent is None or wrote > sent

    def _lock(self, wait):
        if self.reading.acquire(blocking=False):
            return True
        return wait and not self.reading_all and self.reading.acquire(timeout=WAIT_S)

    def _refresh(self, db, conn, whole=False, look=None):
        """Bring the catalog up to date: by its deltas, or read whole when
        there is none yet or the log cannot tell what changed (or
        ``whole``: the look found the history diverged). ``look``: the
        ``changes.Look`` ``conn`` read, when the caller has read it (its
        shards' counts and tokens spare a statement).
        Returns "counts" (the log held no change of the structure: only
        the counts moved; "host" where another worker of the host had
        read it), "deltas", "full" or "none" (nothing new)."""
        old = self.catalog
        if old is not None and not whole:
            if look is not None and self._by_host(db, old, look.stamp, look.tokens):
                return "host"
            # Usage, consumers and generations (claims) need no snapshot:
            # the request's own transaction reads the counts (the look's),
            # then the log of the shards that moved.
            seqs, marks, changed = deltas.since(conn, old, look)
            if changed == {}:
                return "none"
            if changed is not None and changed.keys() <= changes.UNSTRUCTURED:
                fresh = old.fresh(conn, changed)
                self._install(db, old.advanced(conn, seqs, changed, marks, fresh))
                self.host_deltas.put(
                    host_deltas.Move(old.seqs, old.tokens, seqs, marks, changed, fresh)
                )
                events.catalog_updated("counts")
                return "counts"
        how = snapshot.read(db, conn, lambda reading: self._read(db, reading, whole))
        if how != "none":
            events.catalog_updated(how)
        return how

    def _read(self, db, reading, whole):
        """``_refresh``'s reads in the snapshot ``reading``: the deltas
        since the catalog held, or all of it."""
        old = self.catalog
        seqs, marks = changes.marks(reading)
        changed = None
        if old is not None and not whole:
            changed = deltas.changed(reading, old.seqs, seqs, (old.tokens, marks))
        if changed == {}:
            return "none"  # no newer than this request
        if changed is not None:
            self._install(db, old.advanced(reading, seqs, changed, marks))
            return "counts" if changed.keys() <= changes.UNSTRUCTURED else "deltas"
        if old is not None:
            self._wary()
        self.reading_all = True
        try:
            self._triggers_found(triggers.installed(reading))
            catalog = Catalog.read(reading, followed=bool(self.triggers))
            self._install(db, catalog, whole=True)
        finally:
            self.reading_all = False
        return "full"

    def _by_host(self, db, old, stamp, tokens):
        """Whether the catalog ``old`` was brought to the look (``stamp``,
        ``tokens``) by what other workers of this host read for the same
        moves (``host_deltas``: one, or a few one after another), with no
        statement."""
        if (old.stamp, old.token_sum) == (stamp, tokens):
            return False
        moves = self.host_deltas.path(old, stamp, tokens)
        if moves is None:
            return False
        catalog = old
        for move in moves:
            if not catalog.covers(move.changed, move.fresh):
                return False
            catalog = catalog.advanced(
                None, move.seqs, move.changed, move.tokens, move.fresh
            )
        self._install(db, catalog)
        events.catalog_updated("host")
        return True

    def _install(self, db, catalog, whole=False):
        """Hold ``catalog`` (made by following the log from the one held,
        or read ``whole``) and remember its fingerprint by its counts. A
        whole read means the log could not tell what changed (another
        writer's rows, counts gone back in a restore, a gap): the ids this
        process remembers may be gone too, and are forgotten."""
        if whole:
            self.history.clear()
            db_api.forget_remembered()
        self.catalog = catalog
        self._remember(db, catalog, compute=False)

    def _remember(self, db, catalog, compute=True):
        # Computing a fingerprint reads every provider of the catalog once;
        # the catalogs following it by the log keep it up to date. Not on a
        # request's path: the follower computes it (``compute``).
        if catalog is None or (catalog.content is None and not compute):
            return
        self.history[currency.key(catalog.seqs)] = catalog.fingerprint(db.dialect)
        self.history.move_to_end(currency.key(catalog.seqs))
        while len(self.history) > HISTORY:
            self.history.popitem(last=False)

    def look_for_triggers(self, db: db_api.Database) -> bool:
        """Whether the triggers are all there now (``triggers``)."""
        with db.engine.connect() as conn:
            self._triggers_found(triggers.installed(conn))
        return bool(self.triggers)

    def _triggers_found(self, found: bool) -> None:
        if found != self.triggers and (self.triggers is not None or not found):
            LOGGER.log(
                logging.INFO if found else logging.WARNING,
                "provider catalog: the change-log triggers are %s: %s",
                "there" if found else "missing",
                MODES[found],
            )
        self.triggers, self.triggers_at = found, time.monotonic()
        if not found:
            # Allocations followed through this have missed writes: none is
            # answered from memory until a whole read (``with_allocations``).
            self.unlogged_at = self.triggers_at

    def _wary(self) -> None:
        self.wary_until = time.monotonic() + WARY_S

    def warm(self, db: db_api.Database) -> str:
        """The catalog at the stamp a new read transaction sees: what
        ``_refresh`` did ("full": read whole in a snapshot taken after
        the call)."""
        with self.reading:
            return self._up_to_date(db)

    def catch_up(self, db: db_api.Database, told: float = 0.0) -> str | None:
        """As ``warm``, unless a request is bringing the catalog up to date
        already (None). What it did (``_refresh``'s answer); without a
        look where another worker of this host looked in the last
        ``told`` seconds and found this catalog's stamp and tokens
        ("none") or where this host's ring has the move there ("host");
        None also the first time that look found another stamp and the
        ring lacks the move (its looker is likely following it)."""
        if not self.reading.acquire(blocking=False):
            return None
        try:
            catalog = self.catalog
            seen = self.host_look.told(told)
            if catalog is not None and seen is not None:
                if seen == (catalog.stamp, catalog.token_sum):
                    return "none"
                # Another worker of this host looked a moment ago and
                # found where a claim took the counts: what it read to
                # follow is in the ring if it followed already. If not,
                # it is likely still reading (its workers' followers wake
                # within a period of each other, and a catch-up takes a
                # loaded host longer): this one waits one period for it
                # before reading the database itself.
                if self._by_host(db, catalog, *seen):
                    return "host"
                if self.awaited != (catalog.stamp, catalog.token_sum):
                    # Once per catalog: under a claim every period the
                    # looks move on each period.
                    self.awaited = (catalog.stamp, catalog.token_sum)
                    return None
            return self._up_to_date(db)
        finally:
            self.reading.release()

    def _up_to_date(self, db):
        """With ``reading`` held: the catalog at the stamp a new read
        transaction sees. Read as a request reads it, in autocommit
        (``several_reads``): an idle host's look every period is its one
        round trip, no COMMIT after it (the catch-up's statements need no
        snapshot in common; a whole read takes its own)."""
        with db.several_reads() as conn:
            catalog = self.catalog
            if catalog is None:
                return self._refresh(db, conn)
            seen = self.look(conn, shared=True)
            if history.diverged(catalog, seen.stamp, seen.tokens):
                return self._refresh(db, conn, whole=True)
            if catalog.stamp == seen.stamp:
                return "none"
            return self._refresh(db, conn, look=seen)


# What each mode means, for the logs and the health check.
MODES = {
    True: "triggers: every writer's changes are seen at the next request",
    False: "fallback: other writers' changes are found by the periodic"
    " comparison (see placement-status upgrade check)",
}

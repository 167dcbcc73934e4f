"""Keeping the catalog current: one ``Cache`` per database in this
process, which a request asks for the catalog at the stamp its transaction
reads (``current``) and which brings the catalog up to date by following
the change log or, when the log cannot tell, by reading it whole; and
``warm``, the first read before a process takes requests."""

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable

import sqlalchemy as sa

from placement import events
from placement.db import api as db_api
from placement.db import tables
from placement.db import triggers
from placement.objects.catalog import changes
from placement.objects.catalog import currency
from placement.objects.catalog import fingerprint
from placement.objects.catalog import floor
from placement.objects.catalog import precheck
from placement.objects.catalog import used as catalog_used
from placement.objects.catalog.store import Catalog

LOG = tables.catalog_log
LOGGER = logging.getLogger(__name__)

# More logged changes than this since a worker's catalog: it reads the
# catalog whole instead.
MAX_DELTAS = 5000
# How long a request waits for another one to apply deltas.
WAIT_S = 1.0
# How many times a request brings the catalog up to the count its
# transaction sees before it reads through SQL instead.
CHASES = 3
# How old the last comparison of the catalog with the database's
# fingerprint may be when a request uses the catalog: a write by another
# writer (which the change log does not name) shows in answers after at
# most this long, plus the comparison's own time. See "Writes by other
# writers" in doc/architecture.md.
VERIFY_EVERY_S = 0.5
# The same in a worker whose follower compares every VERIFY_EVERY_S
# (cmd/follower.py): a request compares first only when the follower has
# fallen this far behind, and waits for a comparison under way rather
# than answer without it. Nothing else of the comparison is on a
# request's path, which only reads the clock. Where the fingerprint
# comparison itself takes longer (1,000,000 providers, or a database short
# of CPU), the bound is BOUND_TOOK times its time plus VERIFY_EVERY_S
# instead (``bound``): the holder's next comparison may start a period
# after its last one ended, and the others read it up to a look later.
FOLLOWED_VERIFY_S = 1.0
BOUND_TOOK = 3
# A follower whose catalog could not be compared with the last published
# comparison (``currency``: its counts moved on meanwhile), and whose last
# comparison is this old, runs the statement itself, on its own thread,
# rather than leave it to a request at FOLLOWED_VERIFY_S.
OWN_AFTER_S = 0.7
# Where the triggers log every writer's changes (``logged_by_triggers``),
# the log names other writers' changes too: a request sees them at its
# stamp read, and the comparison is only a safety net (for what no trigger
# sees: a TRUNCATE, a restore whose counts and tokens are the catalog's,
# the history's log pruned), run this far apart (and each process
# compares by itself then: the published comparison's counts are long
# gone from its history). It is also how often a process in the fallback looks for
# triggers created since.
SAFETY_NET_S = 300.0
# After the log could not tell what changed (a count gone back: a restore
# under way; a gap; EVERYTHING) or a comparison found another writer's
# rows, the comparison runs at the fallback's period for this long even
# with the triggers: a dump's restore loads its tables one by one after
# the counts, without the triggers (it creates a table's triggers after
# its rows), and a catalog read whole meanwhile lacks the tables loaded
# after it, at the counts the restore leaves.
WARY_S = 60.0
# The lease holder's follower deletes the log's old rows this often (the
# triggers add rows for every claim; this service's own writes prune their
# shard too, now and then).
PRUNE_EVERY_S = 10.0
# Fingerprints of the catalogs a process held, by their counts, kept to
# compare with a published one taken at the same counts.
HISTORY = 64

# After a search that answered from the held catalog found it behind the
# database (and so searched twice), searches read the stamp first for this
# long: under a steady stream of writes nearly every such answer would be
# thrown away, and a wasted search costs far more than the statement saved.
UNCONFIRMED_PAUSE_S = 1.0


class Cache:
    """One database's catalog in this process."""

    def __init__(self):
        self.catalog = None
        self.reading = threading.Lock()
        # True while the held lock reads the whole catalog (not deltas).
        self.reading_all = False
        # time.monotonic() when the last comparison with the database's
        # fingerprint (``verify``) that found the catalog right started;
        # one comparison at a time.
        self.verified_at = float("-inf")
        self.verifying = threading.Lock()
        # When a failed claim last doubted the catalog (``doubt``): only a
        # comparison started after it counts.
        self.doubted_at = float("-inf")
        # Whether a follower thread compares the catalog (``follow``).
        self.followed = False
        # precheck's look taken just before the last comparison's snapshot
        # (None: none to compare a new look with).
        self.looked: precheck.Look | None = None
        # When a search last found the held catalog behind (``found_behind``).
        self.behind_at = float("-inf")
        # {currency.key(seqs): fingerprint} of the catalogs held since the
        # last whole read, to compare with the published comparison.
        self.history: collections.OrderedDict = collections.OrderedDict()
        # The last beat of catalog_currency this process compared with.
        self.seen_beat = -1
        # (counts, fingerprint) this process's last fingerprint statement
        # found, and how long the last comparison took (its own or the
        # published one).
        self.found: tuple | None = None
        self.took = 0.0
        self.me = currency.Identity()
        # Whether this process held the lease at its last look, and whether
        # its catalog never held the counts of the last published
        # comparison it read (it compares by itself past OWN_AFTER_S).
        self.holding = False
        self.unmatched = False
        # This host's floor (shared with the workers forked after this
        # Cache was made), and the value this process raised it to last:
        # its own catalog holds what it was raised for.
        self.floor = floor.Floor()
        self.raised = float("-inf")
        # Whether the triggers were all there at the last look (None: not
        # looked yet), and when it looked (``logged_by_triggers``).
        self.triggers: bool | None = None
        # When the triggers were last found missing.
        self.unlogged_at = float("-inf")
        self.triggers_at = float("-inf")
        # Until when the comparison runs at the fallback's period (WARY_S).
        self.wary_until = float("-inf")
        # When this process last pruned the log, and the counts it did at.
        self.pruned_at = float("-inf")
        self.pruned: dict[int, int] = {}

    def current(
        self,
        db: db_api.Database,
        conn: sa.Connection,
        stamp: int | None = None,
        used: Callable[[str], None] = events.catalog_used,
        tokens: int | None = None,
    ) -> Catalog | None:
        """The catalog when it is (or could be made) current, else None
        (the caller reads through SQL); ``used`` is told how. ``stamp`` and
        ``tokens``: the look's (``changes.look``) when the caller has read
        it (``tokens`` None: not read, the history is taken as the
        catalog's)."""
        if self.stale():
            self.verify(db, wait=self.followed, own=True)
            if self.below_floor():
                # Another comparison is under way here: another worker of
                # this host may have answered from rows this catalog lacks.
                used("sql")
                return None
        if stamp is None:
            stamp, tokens = changes.look(conn)
        catalog = self.catalog
        outcome = "hit"
        for _ in range(CHASES):
            if (
                catalog is None
                or catalog.stamp < stamp
                or diverged(catalog, stamp, tokens)
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
                        if self._refresh(db, conn) == "full":
                            outcome = "read"
                    elif diverged(held, stamp, tokens):
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
            stamp, tokens = changes.look(conn)
        # A catalog newer than this transaction (SQLite reads one snapshot)
        # is kept for the next request, but this one reads through SQL.
        if catalog.stamp != stamp or diverged(catalog, stamp, tokens):
            outcome = "sql"
        used(outcome)
        return catalog if outcome != "sql" else None

    def _lock(self, wait):
        if self.reading.acquire(blocking=False):
            return True
        return wait and not self.reading_all and self.reading.acquire(timeout=WAIT_S)

    def _refresh(self, db, conn, whole=False):
        """Bring the catalog up to date: by its deltas, or read whole when
        there is none yet or the log cannot tell what changed (or
        ``whole``: the look found the history diverged). Returns "counts"
        (the log held no change of the structure: only the counts moved),
        "deltas", "full" or "none" (nothing new)."""
        old = self.catalog
        if old is not None and not whole:
            # Usage, consumers and generations (claims) need no snapshot:
            # the request's own transaction reads the counts and the log,
            # in one statement.
            seqs, marks, changed = _since(conn, old)
            if changed == {}:
                return "none"
            if changed is not None and changed.keys() <= changes.UNSTRUCTURED:
                self._install(db, old.advanced(conn, seqs, changed, marks))
                events.catalog_updated("counts")
                return "counts"
        with _snapshot(db, conn) as reading:
            old = self.catalog
            seqs, marks = changes.marks(reading)
            changed = None
            if old is not None and not whole:
                changed = _changed(reading, old.seqs, seqs, (old.tokens, marks))
            if changed == {}:
                return "none"  # no newer than this request
            if changed is None:
                if old is not None:
                    self._wary()
                self.reading_all = True
                try:
                    self._triggers_found(triggers.installed(reading))
                    catalog = Catalog.read(reading, followed=bool(self.triggers))
                    self._install(db, catalog, whole=True)
                finally:
                    self.reading_all = False
                how = "full"
            else:
                self._install(db, old.advanced(reading, seqs, changed, marks))
                how = "counts" if changed.keys() <= changes.UNSTRUCTURED else "deltas"
        events.catalog_updated(how)
        return how

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

    def verify(
        self, db: db_api.Database, wait: bool = False, own: bool = False
    ) -> str | None:
        """Compare the catalog with the database's fingerprint, unless
        another comparison is under way (None; with ``wait``, once it is
        over, compare only if the catalog is still ``stale``). Where a
        follower compares (``followed``) on a server database, by the one
        comparison per cloud (``_shared``); elsewhere, or when that cannot
        tell and ``own``, by its own statement in a new snapshot
        (``_verified``). What it
        found: "unchanged" (by precheck's look, no table of the catalog
        changed since the last comparison: no statement read them), "same"
        (no other writer's change; the catalog is left as it is),
        "foreign" (another writer's change: the catalog was read whole
        again), "full" (the log could not tell: read whole again) or None
        (nothing new to compare with)."""
        if not self.verifying.acquire(blocking=False):
            if not wait:
                return None
            self.verifying.acquire()
            if not self.stale():
                self.verifying.release()
                return None
        try:
            if self.triggers or time.monotonic() - self.triggers_at >= SAFETY_NET_S:
                self.look_for_triggers(db)
            if not self.followed or db.dialect == "sqlite":
                # SQLite is one host's file: its look (a stat) costs no
                # database time, and publishing to the lease row twice a
                # second would change the file every look reads, and fail
                # other writers' transactions that read before it
                # committed (SQLite refuses their write then).
                return self._verified(db)
            found = self._shared(db)
            if (
                found is None
                and (own or (self.unmatched and self._age() >= OWN_AFTER_S))
            ) or self.below_floor():
                # The published comparison may be older than what another
                # worker of this host answered from.
                found = self._verified(db)
            return found
        except sa.exc.DBAPIError:
            # The comparison failed (a statement the database refused, a
            # lost connection): what the catalog lacks cannot be told, so
            # it is read whole again, as when it differs, rather than fail
            # the request that compares.
            LOGGER.warning(
                "provider catalog: the comparison with the database failed;"
                " reading it again",
                exc_info=True,
            )
            return self._read_again(db)
        finally:
            self.verifying.release()

    def prune(self, db: db_api.Database) -> bool:
        """As the holder of the comparison's lease (one process per cloud;
        on SQLite, any), delete the log's rows older than LOG_KEPT per
        shard every PRUNE_EVERY_S: whether it did."""
        if not (self.holding or db.dialect == "sqlite"):
            return False
        if time.monotonic() - self.pruned_at < PRUNE_EVERY_S:
            return False
        self.pruned_at = time.monotonic()
        with db.engine.begin() as conn:
            self.pruned = changes.prune(conn, self.pruned)
        return True

    def _read_again(self, db):
        """The catalog read whole in a new snapshot, without the
        fingerprint statement (``verify`` when it failed): "full"."""
        started = time.monotonic()
        self.looked = None
        self.found = None
        with _own_snapshot(db) as reading:
            self._reread(db, reading, None)
        self.verified_at = started
        events.catalog_updated("full")
        return "full"

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

    def period(self) -> float:
        """How often the catalog is compared with the database: with the
        triggers, every SAFETY_NET_S, unless the log lately could not tell
        what changed (WARY_S)."""
        if self.triggers and time.monotonic() >= self.wary_until:
            return SAFETY_NET_S
        return VERIFY_EVERY_S

    def due(self, ahead: float = 0.0) -> bool:
        """Whether a comparison is due (or will be within ``ahead`` s)."""
        return self._age() + ahead >= self.period() or self.below_floor()

    def stale(self) -> bool:
        """Whether a request must have the catalog compared before it
        uses it: the comparison is due, or overdue where a follower
        compares (``bound``), or another worker of this host answered
        from a catalog found right after this one (``below_floor``)."""
        return (
            self._age() >= (self.bound() if self.followed else self.period())
            or self.below_floor()
        )

    def below_floor(self) -> bool:
        """Whether another worker of this host read its catalog whole for
        another writer's change after this catalog was last found right
        (``catalog/floor.py``): this one may lack what that one answered."""
        return self.floor.value() > max(self.verified_at, self.raised)

    def bound(self) -> float:
        """How old a comparison may be where a follower compares: 1 s, or
        more where the fingerprint statement takes long (a safety-net
        period more with the triggers)."""
        slack = max(FOLLOWED_VERIFY_S, BOUND_TOOK * self.took + VERIFY_EVERY_S)
        return slack + self.period() - VERIFY_EVERY_S

    def _age(self) -> float:
        """Since the start of the last comparison that found the catalog
        right (infinite if a failed claim doubted it since)."""
        if self.verified_at < self.doubted_at:
            return float("inf")
        return time.monotonic() - self.verified_at

    def doubt(self) -> None:
        """Have the next request compare the catalog with the database
        first (a claim failed on a host the catalog may have offered),
        unless the triggers log every writer's changes: the claim's
        request read the stamp, so the catalog has them already."""
        if not self.triggers:
            self.doubted_at = time.monotonic()

    def follow(self, followed: bool) -> None:
        """A follower thread starts (True) or stops (False) comparing the
        catalog every VERIFY_EVERY_S."""
        self.followed = followed

    def _verified(self, db):
        # Without the reading lock: the statement reads every row of the
        # catalog's tables (0.4 s at 70,000 providers), and requests
        # following the log must not wait for it. The catalog of that
        # moment is brought, privately, to the snapshot's counts; if it
        # then matches, no other writer's change committed before the
        # snapshot is missing from it, nor from any catalog advanced from
        # it by the log since.
        started = time.monotonic()
        base = self.catalog
        if base is None:
            return None  # the first read is warm()'s or a request's
        looked, self.looked = self.looked, None
        # The database's clock before the look: if it finds nothing changed,
        # the database was then what the last statement found (the holder
        # publishes that).
        taken_at = _clock(db) if self.holding and self.found else None
        look = precheck.look(db)
        if look is not None and looked is not None and look.unchanged_since(looked):
            # Nothing committed since the last comparison's snapshot, by
            # any writer: what it found still holds.
            self.looked = looked
            self.verified_at = started
            if taken_at is not None:
                self._publish(db, *self.found, taken_at, started)
            return "unchanged"
        with _own_snapshot(db) as reading:
            taken_at = currency.db_time(reading)
            seqs, marks = changes.marks(reading)
            found = self._fingerprint(db, reading, looked if look else None)
            self.found = (seqs, found)
            changed = _changed(reading, base.seqs, seqs, (base.tokens, marks))
            if changed is not None:
                # Computed once per catalog read whole; the catalogs that
                # follow it by the log, this copy and the requests' alike,
                # keep it up to date.
                base.fingerprint(db.dialect)
                at = base.advanced(reading, seqs, changed, marks) if changed else base
                if at.fingerprint(db.dialect) == found:
                    self.looked = look
                    self.verified_at = started
                    self._publish(db, seqs, found, taken_at, started)
                    return "same"
                how = "foreign"
                _foreign()
            else:
                how = "full"
            self._reread(db, reading, found, seqs)
            self.looked = look
            self.verified_at = started
        self._publish(db, seqs, found, taken_at, started)
        events.catalog_updated(how)
        return how

    def _fingerprint(self, db, reading, looked):
        """The database's fingerprint in ``reading``'s snapshot: only the
        parts of the tables a second look (its snapshot is fixed) finds
        changed since ``looked``, the look before the last statement, whose
        parts hold for the others."""
        if looked is None or self.found is None:
            return fingerprint.of_database(reading)
        look = precheck.look(db)
        if look is None:
            return fingerprint.of_database(reading)
        changed = look.changed_since(looked)
        if not changed:
            return list(self.found[1])
        if len(changed) == len(precheck.TABLES):
            return fingerprint.of_database(reading)
        return fingerprint.of_database(reading, frozenset(changed), self.found[1])

    def _reread(self, db, reading, found, seqs=None):
        """Read the catalog whole in ``reading``'s snapshot, whose
        fingerprint statement found ``found`` at the counts ``seqs``
        (None: none ran)."""
        state = hash((currency.key(seqs), tuple(found))) if found else 0
        with self.reading:
            # Every other worker of this host compares before its next
            # answer from a catalog found right before now, so none answers
            # without what this one will (through SQL meanwhile, then from
            # the catalog read in a snapshot fixed by the time of the
            # second raise).
            self._raise_floor(state)
            self._wary()
            self.catalog = None
            self.reading_all = True
            try:
                self._triggers_found(triggers.installed(reading))
                catalog = Catalog.read(reading, followed=bool(self.triggers))
            finally:
                self.reading_all = False
            self._raise_floor(state)
            if found is not None:
                catalog.offset = [
                    db_value - mine
                    for db_value, mine in zip(found, catalog.fingerprint(db.dialect))
                ]
            self._install(db, catalog, whole=True)

    def _raise_floor(self, state):
        self.raised = self.floor.raise_to(time.monotonic(), state)

    def _publish(self, db, seqs, found, taken_at, started):
        """As the lease holder, publish a comparison started at ``started``
        (monotonic) whose snapshot had ``seqs`` and ``found`` at the
        database's time ``taken_at``."""
        self.took = time.monotonic() - started
        if self.followed and self.holding:
            self.holding = currency.publish(
                db.engine, str(self.me), seqs, found, taken_at, self.took
            )

    def _shared(self, db):
        """The one comparison per cloud (``catalog/currency.py``): as the
        lease holder (or taking a free lease), run it and publish it;
        otherwise compare this catalog's fingerprint at the published
        counts with the published one. None when there was nothing new to
        compare with, or this catalog never held the published counts."""
        if self.catalog is None:
            return None
        asked = time.monotonic()
        with db.engine.connect() as conn:
            row = currency.read(conn)
        me = str(self.me)
        self.holding = row is not None and row.holder == me
        if not self.holding and (row is None or row.expired()):
            self.holding = currency.take(db.engine, me, row)
        if self.holding:
            return self._verified(db)
        if row.beat == self.seen_beat:
            return None
        self.seen_beat, self.took = row.beat, row.took
        # The snapshot the row was taken in is no older than this.
        verified = asked - row.age
        mine = self._fingerprint_at(db, row.seqs)
        self.unmatched = mine is None
        if mine is None:
            return None
        if mine == row.found:
            self.verified_at = max(self.verified_at, verified)
            return "same"
        _foreign()
        started = time.monotonic()
        with _own_snapshot(db) as reading:
            seqs = changes.counts(reading)
            self._reread(db, reading, fingerprint.of_database(reading), seqs)
        self.verified_at = started
        events.catalog_updated("foreign")
        return "foreign"

    def _fingerprint_at(self, db, seqs):
        """This process's catalog's fingerprint when it was at the counts
        ``seqs`` (brought there by the log first if it is behind them), or
        None if it never was."""
        self._remember(db, self.catalog)
        key = currency.key(seqs)
        if key not in self.history and currency.behind(self.catalog.seqs, seqs):
            self.catch_up(db)
        return self.history.get(key)

    def warm(self, db: db_api.Database) -> None:
        with self.reading:
            self._up_to_date(db)

    def catch_up(self, db: db_api.Database) -> str | None:
        """As ``warm``, unless a request is bringing the catalog up to date
        already (None). What it did: "deltas", "full" or "none"."""
        if not self.reading.acquire(blocking=False):
            return None
        try:
            return self._up_to_date(db)
        finally:
            self.reading.release()

    def _up_to_date(self, db):
        """With ``reading`` held: the catalog at the stamp a new read
        transaction sees."""
        with db.reader() as conn:
            catalog = self.catalog
            if catalog is None:
                return self._refresh(db, conn)
            stamp, tokens = changes.look(conn)
            if diverged(catalog, stamp, tokens):
                return self._refresh(db, conn, whole=True)
            if catalog.stamp == stamp:
                return "none"
            return self._refresh(db, conn)


# What each mode means, for the logs and the health check.
MODES = {
    True: "triggers: every writer's changes are seen at the next request",
    False: "fallback: other writers' changes are found by the periodic"
    " comparison (see placement-status upgrade check)",
}


def _clock(db):
    """The database's clock now (on SQLite, the same as this process's: a
    connection opened only to read it would touch the files precheck
    looks at)."""
    if db.dialect == "sqlite":
        return time.time_ns() // 1000
    with db.engine.connect() as conn:
        return currency.db_time(conn)


def _foreign():
    LOGGER.info(
        "provider catalog: rows written by another writer (not "
        "in the change log); reading it again"
    )


def diverged(catalog: Catalog, stamp: int, tokens: int | None) -> bool:
    """Whether the look's ``stamp`` and ``tokens`` (its token sum; None:
    not read) are the catalog's stamp with another history: a restore
    brought counts back and new writes took them up to it again, with new
    tokens. The catalog is read whole then, as for a count gone back."""
    return tokens is not None and catalog.stamp == stamp and catalog.token_sum != tokens


def _changed(conn, then, now, tokens=None):
    """{kind: set of ids (CONSUMER: of uuids)} changed between the counts
    ``then`` and ``now`` ({shard: count}), from the log; None when the
    catalog must be read whole: a count went back (shard rows re-created)
    or came up again with another history (``tokens``: those of ``then``
    and of ``now``, ``_same_history``), the log no longer has every
    change (pruned), too many changes, or one of EVERYTHING."""
    ranges = _ranges(then, now)
    if not ranges:
        if ranges is None or not _same_history(then, now, tokens, ()):
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
    if not _same_history(then, now, tokens, rows):
        return None
    return _named(ranges, rows)


def _same_history(then, now, tokens, rows):
    """Whether the counts ``now`` follow the history of a catalog at the
    counts ``then``, by ``tokens`` ({shard: token} of ``then``, of
    ``now``; None: not told): a shard at the catalog's count has the
    token the catalog read with it; one past it has, on the log rows at
    the catalog's count (``rows``: shard, seq, kind, ref, uuid, token),
    that token too. A shard whose row at the catalog's count is gone
    (pruned) passes: nothing tells, and the safety net (SAFETY_NET_S)
    remains; its numbers past it must all be there (``_named``), or the
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
    """``_changed``'s answer from the log ``rows`` (shard, seq, kind, ref,
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
                LOG.c.shard == shard,
                LOG.c.seq >= sa.bindparam("low_%d" % shard, type_=sa.BigInteger),
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


def _since(conn, catalog):
    """(counts now, their tokens, ``_changed``'s answer for ``catalog``)
    in one statement."""
    then = catalog.seqs
    now, marks, items = {}, {}, []
    low = {"low_%d" % s: then.get(s, 0) for s in range(tables.CATALOG_SHARDS)}
    for row in conn.execute(_SINCE, low):
        if row[2] is None:
            now[row[0]], marks[row[0]] = row[1], row[5]
        else:
            items.append(row)
    ranges = _ranges(then, now)
    if (
        ranges is None
        or len(items) > MAX_ITEMS
        or not _same_history(then, now, (catalog.tokens, marks), items)
    ):
        return now, marks, None
    return now, marks, _named(ranges, items) if ranges else {}


@contextlib.contextmanager
def _own_snapshot(db):
    """A new transaction that reads one snapshot of the database, whatever
    commits meanwhile (``_snapshot``)."""
    if db.dialect == "sqlite":
        with db.reader() as conn:
            yield conn
        return
    with db.engine.connect() as own:
        own = own.execution_options(isolation_level="REPEATABLE READ")
        with own.begin():
            yield own


@contextlib.contextmanager
def _snapshot(db, conn):
    """A transaction that reads one snapshot of the database, whatever
    commits meanwhile: the catalog's statements must agree with each other
    (an inventory of a provider the provider statement did not see would
    have nowhere to go). A SQLite transaction, such as the request's, reads
    one snapshot already. MySQL sessions run READ COMMITTED, where every
    statement sees the latest commits, so the catalog is read on a
    connection of its own at REPEATABLE READ, whose first read fixes the
    snapshot for the whole transaction (the same on PostgreSQL). A
    request's read in autocommit (``single_read``) has no snapshot to lend:
    the catalog is read in one of its own there too."""
    if db.dialect == "sqlite" and conn.in_transaction():
        yield conn
        return
    with _own_snapshot(db) as own:
        yield own


_CACHES = db_api.PerDatabase(Cache)


def _cache(db: db_api.Database) -> Cache:
    return _CACHES.of(db)


def current(
    db: db_api.Database,
    conn: sa.Connection,
    stamp: int | None = None,
    tokens: int | None = None,
) -> Catalog | None:
    """The catalog of ``db`` at the stamp ``conn``'s transaction reads, or
    None when the caller should read through SQL (the catalog is off, or
    being read by another request, or newer than this transaction).
    ``stamp``, ``tokens``: the look (``changes.look``) the caller has just
    read in this transaction (it is read here otherwise)."""
    if not db.conf.placement.provider_catalog:
        return None
    return _cache(db).current(db, conn, stamp, tokens=tokens)


def structure_at(
    db: db_api.Database, conn: sa.Connection, stamp: int, tokens: int | None = None
) -> object:
    """The ``structure`` of the catalog of ``db`` brought to ``stamp`` (by
    the log, as ``current`` does, counted as no use of it), or None when
    it cannot be (read whole meanwhile, newer than the transaction)."""
    if not db.conf.placement.provider_catalog:
        return None
    catalog = _cache(db).current(
        db, conn, stamp, used=lambda outcome: None, tokens=tokens
    )
    return catalog.structure if catalog is not None else None


def held(db: db_api.Database) -> Catalog | None:
    """The catalog this process holds for ``db``, when it is on and no
    request need compare it with the database first (``Cache.stale``)
    and no search found it behind in the last UNCONFIRMED_PAUSE_S; else
    None. Whether it is the one a transaction reads is for the caller to
    confirm (``current`` with the stamp it reads, when it is not)."""
    if not db.conf.placement.provider_catalog:
        return None
    cache = _CACHES.get(db)
    if cache is None or cache.stale():
        return None
    if time.monotonic() - cache.behind_at < UNCONFIRMED_PAUSE_S:
        return None
    return cache.catalog


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
    cache = _cache(db)
    if cache.triggers is None:
        return cache.look_for_triggers(db)
    return cache.triggers


def with_allocations(db: db_api.Database, conn: sa.Connection) -> Catalog | None:
    """The catalog at the stamp ``conn`` reads when it answers allocations
    (``catalog/consumers.py``, the providers' generations ``catalog.used``'s,
    read whole with them): the triggers are there, and were at every look
    since its allocations were read whole (else it lacks the writes of the
    time they were not); else None (the caller reads SQL)."""
    if not logged_by_triggers(db):
        return None
    catalog = current(db, conn)
    if catalog is None or catalog.allocations is None or catalog.used is None:
        return None
    if catalog.allocations.read_at <= _cache(db).unlogged_at:
        return None
    return catalog


def mode(db: db_api.Database) -> str:
    """How the catalog follows other writers (``MODES``), for the start-up
    log and the health check."""
    return MODES[logged_by_triggers(db)]


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


def catch_up(db: db_api.Database) -> str | None:
    """Bring the catalog of ``db`` up to date now, if it is on and no
    request is at it: what an idle worker's follower calls, so that the
    next request finds it current (``cmd/follower.py``). "deltas", "full"
    or "none" (it was current); None when the catalog is off or busy."""
    if not db.conf.placement.provider_catalog:
        return None
    return _cache(db).catch_up(db)


def used_of(db: db_api.Database, catalog: Catalog) -> catalog_used.Used | None:
    """The usage of ``catalog`` where answers may take it from memory: the
    triggers log every writer's allocations (``logged_by_triggers``) and
    it was read with them; else None (usage is read per request)."""
    if catalog.used is None or not logged_by_triggers(db):
        return None
    return catalog.used

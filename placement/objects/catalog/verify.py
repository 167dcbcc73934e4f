"""Comparing the held catalog with the database's fingerprint
(``fingerprint``), which finds other writers' changes the change log does
not name: when it is due, by this process's own statement or by the one
comparison per cloud (``currency``), and the whole read again when they
differ; the log's pruning by the comparison's lease holder."""

import logging
import threading
import time

import sqlalchemy as sa

from placement import events
from placement.db import api as db_api
from placement.db import triggers
from placement.objects.catalog import changes
from placement.objects.catalog import currency
from placement.objects.catalog import deltas
from placement.objects.catalog import fingerprint
from placement.objects.catalog import floor
from placement.objects.catalog import holder
from placement.objects.catalog import host_answers
from placement.objects.catalog import precheck
from placement.objects.catalog import snapshot
from placement.objects.catalog.store import Catalog

LOGGER = logging.getLogger(__name__)

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
# The lease holder's follower deletes the log's old rows this often (the
# triggers add rows for every claim; this service's own writes prune their
# shard too, now and then).
PRUNE_EVERY_S = 10.0


class Verifier(holder.Holder):
    """A held catalog compared with the database now and then."""

    def __init__(self):
        super().__init__()
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
        # Answers its workers rendered, for the others (keyed with the
        # floor: none from before a raise is served past it).
        self.host_answers = host_answers.HostAnswers(self.floor)
        # When this process last pruned the log, and the counts it did at.
        self.pruned_at = float("-inf")
        self.pruned: dict[int, int] = {}

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

    def warm(self, db: db_api.Database) -> str:
        """``Holder.warm``; a whole read counts as a comparison that found
        the catalog right, started when the call was (its snapshot is
        later): placement-api's master reads it so before the fork, and
        its workers then answer without a fingerprint statement each at
        start (with the triggers, none is due for SAFETY_NET_S)."""
        started = time.monotonic()
        how = super().warm(db)
        if how == "full":
            self.verified_at = max(self.verified_at, started)
        return how

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
        with snapshot.own(db) as reading:
            self._reread(db, reading, None)
        self.verified_at = started
        events.catalog_updated("full")
        return "full"

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
        with snapshot.own(db) as reading:
            taken_at = currency.db_time(reading)
            seqs, marks = changes.marks(reading)
            found = self._fingerprint(db, reading, looked if look else None)
            self.found = (seqs, found)
            changed = deltas.changed(reading, base.seqs, seqs, (base.tokens, marks))
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
        with snapshot.own(db) as reading:
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

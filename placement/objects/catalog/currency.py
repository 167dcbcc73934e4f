"""One comparison of the provider catalog with the database per cloud, not
per worker: the row of ``catalog_currency``. See "Writes by other
writers" in doc/architecture.md.

The process holding the row's lease (``holder``) runs the fingerprint
statement (``fingerprint.of_database``) every period and publishes what
it found with the shard counts of its snapshot and the snapshot's time on
the database's clock; each publication adds one to ``beat``, which is
what renews the lease. Every other process reads the row (one statement
by primary key) and compares the fingerprint its own catalog had at those
counts with the one published. A lease is free when its holder has not
published for ``lease(took)`` seconds of the database's clock (it died,
or lost the database); the first process to see that takes it, by
compare-and-set on ``beat``, and runs the next comparison itself.
"""

import dataclasses
import json
import os
import socket
import uuid

import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables

TABLE = tables.catalog_currency
ROW = 1
# A holder that has not published for this long has lost its lease; a
# comparison taking longer (1,000,000 providers, a database short of CPU)
# stretches it to LEASE_TOOK times the comparison's time. Measured at
# 100,000 providers with 8 busy workers on 2 cores, a lease of 2 s passed
# from worker to worker 58 times in 30 s (a holder's follower thread
# waits for the interpreter's lock behind its requests).
LEASE_S = 5.0
LEASE_TOOK = 4


@dataclasses.dataclass(frozen=True)
class Published:
    holder: str | None
    beat: int
    seqs: dict | None  # {shard: count} of the holder's snapshot
    found: list | None  # the database's fingerprint in that snapshot
    age: float  # seconds from that snapshot to this read, database's clock
    took: float  # seconds the holder's comparison took

    def expired(self) -> bool:
        return self.holder is None or self.seqs is None or self.age > lease(self.took)


def lease(took: float) -> float:
    return max(LEASE_S, LEASE_TOOK * took)


def _now(dialect: str, at_statement_start: bool) -> sa.ColumnElement:
    """Microseconds since the epoch on the database's clock: when the
    statement started (a snapshot it opens is no older) or, for an age,
    now."""
    if dialect == "postgresql":
        clock = "statement_timestamp()" if at_statement_start else "clock_timestamp()"
        sql = "CAST(EXTRACT(EPOCH FROM %s) * 1000000 AS BIGINT)" % clock
    elif dialect == "mysql":
        sql = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))"
    else:
        sql = "CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)"
    return sa.literal_column(sql, sa.BigInteger)


def db_time(conn: sa.Connection) -> int:
    """The database's clock (us) as ``conn``'s statement starts: the first
    statement of a snapshot's transaction, so the snapshot is no older."""
    return int(conn.execute(sa.select(_now(conn.dialect.name, True))).scalar_one())


def read(conn: sa.Connection) -> Published | None:
    """The row as ``conn`` reads it (None: there is none)."""
    age = _now(conn.dialect.name, False) - TABLE.c.taken_us
    row = conn.execute(
        sa.select(
            TABLE.c.holder,
            TABLE.c.beat,
            TABLE.c.seqs,
            TABLE.c.fingerprint,
            TABLE.c.took_ms,
            age,
        ).where(TABLE.c.id == ROW)
    ).first()
    if row is None:
        return None
    holder, beat, seqs, found, took_ms, age_s = row
    return Published(
        holder=holder,
        beat=int(beat),
        seqs={int(k): int(v) for k, v in json.loads(seqs).items()} if seqs else None,
        found=json.loads(found) if found else None,
        age=int(age_s) / 1e6 if age_s is not None else float("inf"),
        took=(took_ms or 0) / 1000,
    )


def take(engine: sa.Engine, me: str, seen: Published | None) -> bool:
    """Take the lease from the holder of ``seen`` (None: there was no row)
    if nobody published since: whether it is now ``me``'s (not if another
    process took it at the same moment: on Galera its certification
    fails one of the two, on InnoDB one may deadlock)."""
    try:
        return _take(engine, me, seen)
    except sa.exc.DBAPIError as e:
        if not _not_written(e):
            raise
        return False


def _not_written(error: sa.exc.DBAPIError) -> bool:
    """Whether ``error`` is the database's refusal of the lease's write
    (a conflict, a lost connection, a read-only database: on PostgreSQL
    that one is no OperationalError), so the lease is not ``me``'s."""
    return isinstance(error, sa.exc.OperationalError) or db_api.is_read_only(error)


def _take(engine, me, seen):
    with engine.begin() as conn:
        if seen is None:
            try:
                with conn.begin_nested():
                    conn.execute(TABLE.insert().values(id=ROW, holder=me, beat=1))
                return True
            except sa.exc.IntegrityError:
                return False
        taken = conn.execute(
            TABLE.update()
            .where(TABLE.c.id == ROW, TABLE.c.beat == seen.beat)
            .values(holder=me, beat=TABLE.c.beat + 1)
        )
        return taken.rowcount == 1


def publish(
    engine: sa.Engine,
    me: str,
    seqs: dict,
    found: list,
    taken_us: int,
    took: float,
) -> bool:
    """Publish a comparison ``me`` made (renewing its lease): whether it
    still held the lease (not if the write failed: the next look reads
    the row again)."""
    try:
        return _publish(engine, me, seqs, found, taken_us, took)
    except sa.exc.DBAPIError as e:
        if not _not_written(e):
            raise
        return False


def _publish(engine, me, seqs, found, taken_us, took):
    with engine.begin() as conn:
        done = conn.execute(
            TABLE.update()
            .where(TABLE.c.id == ROW, TABLE.c.holder == me)
            .values(
                beat=TABLE.c.beat + 1,
                seqs=json.dumps({str(k): v for k, v in sorted(seqs.items())}),
                fingerprint=json.dumps(found),
                taken_us=taken_us,
                took_ms=int(took * 1000),
            )
        )
        return done.rowcount == 1


def key(seqs: dict) -> tuple:
    """What identifies the state of shard counts ``seqs``."""
    return tuple(sorted((int(s), int(n)) for s, n in seqs.items() if n))


def behind(mine: dict, theirs: dict) -> bool:
    """Whether counts ``mine`` are behind ``theirs`` on some shard."""
    return any(n > mine.get(s, 0) for s, n in theirs.items())


class Identity:
    """This process's name as a lease holder: new in each process (a
    forked worker does not inherit its parent's)."""

    def __init__(self) -> None:
        self._pid = -1
        self._name = ""

    def __str__(self) -> str:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._name = "%s:%d:%s" % (
                socket.gethostname()[:80],
                self._pid,
                uuid.uuid4().hex[:12],
            )
        return self._name

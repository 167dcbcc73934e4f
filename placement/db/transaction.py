"""The Database: its read and write transactions, the hooks a write runs
before its COMMIT, and what an error at the COMMIT means.

Objects open one transaction per operation with ``db.reader()`` or
``db.writer()``, or, for a read of exactly one statement, a connection in
autocommit with ``db.single_read()``.
"""

import contextlib
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any
from typing import Callable
from typing import TypeVar

import sqlalchemy as sa
from oslo_config import cfg
from sqlalchemy import exc as sa_exc

from placement.db import engine as db_engine
from placement.db import errors
from placement.db import statements

LOG = logging.getLogger(__name__)

_WRITE = "placement_write"
# Run by every write transaction just before its COMMIT, in order of
# registration (``before_commit``).
_BEFORE_COMMIT: list[Callable[[sa.Connection, dict[str, Any]], None]] = []

H = TypeVar("H", bound=Callable[[sa.Connection, dict[str, Any]], None])


def before_commit(hook: H) -> H:
    """Register ``hook(conn, notes)``: every write transaction runs it as
    its last statements before COMMIT (not when it rolls back), ``notes``
    being what was noted on the transaction (``write_notes``). A
    decorator."""
    _BEFORE_COMMIT.append(hook)
    return hook


def write_notes(conn: sa.Connection) -> dict[str, Any] | None:
    """The notes of ``conn``'s write transaction (a dict its
    ``before_commit`` hooks read; empty when it begins), or None when
    ``conn`` is not in one."""
    return conn.info.get(_WRITE)


# Pauses before each try to read back a write whose COMMIT failed.
READ_BACK_PAUSES = (0, 0.1, 0.3, 0.6)


class OutcomeUnknown(Exception):
    """A write's COMMIT failed, and the database could not be asked
    whether it was done (the text: the COMMIT's error)."""


# A function telling whether the database (read on ``conn``) holds what a
# write noted it leaves (``expect``): ``read_back(conn, expected)``.
ReadBack = Callable[[sa.Connection, dict[Any, Any]], bool]
_OUTCOME = "placement_outcome"


def expect(conn: sa.Connection, read_back: ReadBack, outcome: dict[Any, Any]) -> None:
    """Note what ``conn``'s write transaction leaves once committed:
    ``outcome``, {key: what the database holds of it then}, merged with
    what was noted before with the same ``read_back`` (a function made
    once, at import), which tells whether the database holds it (reading
    the keys of all the notes at once). Noted from the reads the write
    makes anyway, nothing is read for it unless the COMMIT fails
    (``Database.writer``). Each note must tell this write from another:
    a provider's generation, moved by one by each write, is what does.
    Noting nothing (or an empty ``outcome``) leaves the write answered
    as failed whenever its COMMIT fails."""
    if not outcome:
        return
    notes = write_notes(conn)
    assert notes is not None, "not in a write transaction"
    notes.setdefault(_OUTCOME, {}).setdefault(read_back, {}).update(outcome)


def may_conflict(conn: sa.Connection) -> contextlib.AbstractContextManager[Any]:
    """Context for a statement that may break a unique or foreign key when
    the transaction must go on afterwards (to find out which key): on
    PostgreSQL a failed statement spoils the whole transaction unless it ran
    inside a savepoint; elsewhere only the statement is undone."""
    if conn.dialect.name == "postgresql":
        return conn.begin_nested()
    return contextlib.nullcontext()


def holds_text(dialect: str, value: str) -> bool:
    """Whether a database of ``dialect`` can hold ``value``: PostgreSQL
    cannot store a NUL character, so such a value names nothing there
    (as on SQLite and MySQL) rather than failing the statement."""
    return not (dialect == "postgresql" and "\x00" in value)


# How long a thread keeps the connection of its reads of one statement
# before it gives it back to the pool and takes one again (as a read did
# each time before): the pool's recycling and a disposed pool are seen
# within this time.
KEEP_S = 1.0
# A kept connection the process inherited from its parent (a forked
# worker): the parent's session, never used nor closed here, and never
# collected (the pool's finalizer would close it).
_INHERITED: list[sa.Connection] = []


class _Kept:
    """A thread's kept connection for ``Database.single_read`` (the
    attributes of the Database's ``threading.local``): ``conn``, the
    pool and process it came from, when it was taken (``since``) and
    last given back (``used``). Given back to the pool (and taken
    again) after KEEP_S; idle for the pool's PING_AFTER_IDLE_S, it is
    given back as idle since its last use, so that the pool pings it
    before use as it would have (a session the server ended meanwhile
    is replaced unseen); lost (invalidated), after a database error, or
    taken from the pool's overflow, it is given back at once. A
    process forked with one never uses nor closes it (its parent's
    session)."""

    @staticmethod
    def take(kept: Any, engine: sa.Engine) -> sa.Connection:
        conn = getattr(kept, "conn", None)
        now = time.monotonic()
        if conn is not None and (
            kept.pool is not engine.pool
            or now - kept.since >= KEEP_S
            or now - kept.used >= db_engine.PING_AFTER_IDLE_S
            or conn.invalidated
        ):
            if kept.pool is not engine.pool and kept.pid == os.getpid():
                # Its pool was disposed of: closed as the pool's others.
                with contextlib.suppress(Exception):
                    conn.invalidate()
            _Kept.drop(kept)
            conn = None
        if conn is None:
            conn = engine.connect()
            pool = engine.pool
            kept.conn, kept.pool, kept.pid, kept.used = conn, pool, os.getpid(), now
            kept.since = now
            if isinstance(pool, sa.QueuePool) and pool.checkedout() > pool.size():
                # Taken from the pool's overflow: given back after this read
                # (idle threads hold no more than the pool's size).
                kept.since = -math.inf
        return conn

    @staticmethod
    def give_back(kept: Any) -> None:
        conn = kept.conn
        kept.used = now = time.monotonic()
        if now - kept.since >= KEEP_S:
            _Kept.drop(kept)
        elif conn.in_transaction():
            # An execute's autobegin (nothing is sent in autocommit).
            conn.rollback()

    @staticmethod
    def drop(kept: Any) -> None:
        conn, kept.conn = kept.conn, None
        if conn is None:
            return
        if kept.pid != os.getpid():
            _INHERITED.append(conn)
            return
        with contextlib.suppress(Exception):
            info = None if conn.invalidated else conn.info
            conn.close()
            if info is not None:
                db_engine.idle_since(info, kept.used)


class Database:
    """The engine plus the two kinds of transaction objects use, and the
    configuration of the service it serves: the handlers and objects of an
    app read their options there, when they use them (an app is built for
    one ConfigOpts and reads no other)."""

    def __init__(self, engine: sa.Engine, conf: cfg.ConfigOpts) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self._single = db_engine.autocommit(engine)
        # Each thread's connection for its reads of one statement
        # (``single_read``), kept between them on MySQL and PostgreSQL.
        self._kept = threading.local() if self.dialect != "sqlite" else None
        self.conf = conf
        # A test's fault at the COMMIT of every write transaction:
        # ``fault(conn, BEFORE_COMMIT)`` just before it is sent (raising
        # there, the COMMIT is not sent: nothing is written),
        # ``fault(conn, AFTER_COMMIT)`` once it succeeded (raising there, the
        # write is done but reported failed, as a connection lost while the
        # COMMIT's answer was on its way would be).
        self.commit_fault: Callable[[sa.Connection, str], None] | None = None

    @contextlib.contextmanager
    def reader(self) -> Iterator[sa.Connection]:
        with self.engine.connect() as conn:
            with conn.begin():
                yield conn

    @contextlib.contextmanager
    def single_read(self) -> Iterator[sa.Connection]:
        """A connection for a read of exactly ONE statement, in autocommit:
        the statement alone is sent (one round trip), no BEGIN, COMMIT or
        ROLLBACK around it. One statement is its own snapshot (READ
        COMMITTED gives each statement one), so it reads what ``reader``
        would; a second statement would read another snapshot (use
        ``reader``). Sessions are set up as the reader's are (the
        statement budget, Galera's wsrep_sync_wait, the idle ping) and
        its errors meet the same listeners (doc/architecture.md
        "Reads of one statement").

        On MySQL and PostgreSQL a thread keeps its connection from one
        such read to the next (``_Kept``): no pool checkout and checkin,
        no Connection made, per read."""
        kept = self._kept
        if kept is None or getattr(kept, "busy", False):
            # SQLite, or a read within a read of this thread.
            with self._single.connect() as conn:
                yield conn
            return
        conn = _Kept.take(kept, self._single)
        kept.busy = True
        try:
            yield conn
        except Exception as e:
            # A domain error (a 404) leaves the session as a read does.
            if isinstance(e, sa_exc.SQLAlchemyError):
                _Kept.drop(kept)
            else:
                _Kept.give_back(kept)
            raise
        except BaseException:
            _Kept.drop(kept)
            raise
        else:
            _Kept.give_back(kept)
        finally:
            kept.busy = False

    @contextlib.contextmanager
    def several_reads(self) -> Iterator[sa.Connection]:
        """A connection for a read of several statements that need no
        snapshot in common (READ COMMITTED's: each statement sees what
        committed before it): on MySQL and PostgreSQL the autocommit twin
        of ``single_read``, where each statement is its own snapshot as it
        would be in a transaction there, without the COMMIT's round trip
        (and psycopg's BEGIN); on SQLite, whose transaction reads one
        snapshot, ``reader``. A read that needs one snapshot for all its
        statements takes its own (``catalog/snapshot.py``)."""
        if self.dialect == "sqlite":
            with self.reader() as conn:
                yield conn
        else:
            with self._single.connect() as conn:
                yield conn

    @contextlib.contextmanager
    def writer(self) -> Iterator[sa.Connection]:
        """A write transaction. The ``before_commit`` hooks run just before
        it commits (the objects layer's catalog log is one). When its
        COMMIT fails and may have been done (``maybe_committed``), what
        the write noted it leaves (``expect``) is read back in a new
        transaction first: if it is all there the write was done and the
        block ends as if the COMMIT had answered; otherwise (nothing
        noted, not there, or the read failing too) the error is raised."""
        failed = None
        with self.engine.connect() as conn:
            conn = conn.execution_options(placement_writer=True)
            notes: dict[str, Any] = {}
            conn.info[_WRITE] = notes
            try:
                transaction = conn.begin()
                try:
                    yield conn
                    for hook in _BEFORE_COMMIT:
                        hook(conn, notes)
                except BaseException:
                    transaction.rollback()
                    raise
                try:
                    self._commit(conn, transaction)
                except Exception as e:
                    if not (maybe_committed(e) and notes.get(_OUTCOME)):
                        raise
                    failed = e
            finally:
                # A connection lost meanwhile has new (empty) info, or
                # refuses to be used until rolled back: nothing to remove.
                with contextlib.suppress(KeyError, sa_exc.InvalidRequestError):
                    del conn.info[_WRITE]
        if failed is not None:
            # Read on another connection, this one given back (it may be
            # the only one, or lost).
            self._answer_what_happened(failed, notes[_OUTCOME])

    def _answer_what_happened(
        self, error: Exception, outcome: dict[ReadBack, dict[Any, Any]]
    ) -> None:
        """Return if ``outcome`` (``expect``) is what the database holds,
        else raise ``error`` (the COMMIT's). A database that cannot be read
        either is asked again for up to about a second (a connection lost
        with the COMMIT is often back at once); after that the answer is
        OutcomeUnknown, never an error that says nothing was written."""
        for pause in READ_BACK_PAUSES:
            time.sleep(pause)
            try:
                with self.reader() as conn:
                    written = all(
                        read(conn, expected) for read, expected in outcome.items()
                    )
                break
            except Exception as read_error:
                LOG.warning(
                    "a write's COMMIT failed (%s) and what it leaves could not "
                    "be read back (%s)",
                    error,
                    read_error,
                )
        else:
            raise OutcomeUnknown(str(error)) from error
        if not written:
            raise error
        LOG.warning(
            "a write's COMMIT failed (%s) but it was written: answered as written",
            error,
        )

    def _commit(self, conn: sa.Connection, transaction: sa.RootTransaction) -> None:
        """COMMIT; an error met on the way (sending it, or the statements
        held for it, or reading their answers) is marked as such
        (``maybe_committed``)."""
        fault = self.commit_fault
        try:
            if fault is not None:
                fault(conn, BEFORE_COMMIT)
            transaction.commit()
            if fault is not None:
                fault(conn, AFTER_COMMIT)
        except Exception as e:
            setattr(e, _FAILED_AT_COMMIT, True)
            if transaction.is_active:
                # Its own failure (the connection lost) must not hide e.
                with contextlib.suppress(Exception):
                    transaction.rollback()
            raise

    def insert_ignore(self, table: sa.Table) -> sa.Insert:
        """An INSERT that skips rows whose unique key already exists."""
        return statements.insert_ignore(self.dialect, table)


# The two points of ``Database.commit_fault``.
BEFORE_COMMIT = "before commit"
AFTER_COMMIT = "after commit"
_FAILED_AT_COMMIT = "placement_failed_at_commit"


# Errors of a statement the server refused: one held for the COMMIT stops
# the query there, before the COMMIT, which then never runs (so does a
# held statement's failed row count check, ``errors.is_count_check``).
_REFUSED = (sa_exc.IntegrityError, sa_exc.DataError, sa_exc.ProgrammingError)


def maybe_committed(error: BaseException) -> bool:
    """Whether ``error``, which ended a write transaction, may have come
    after its COMMIT was done: it was met at the COMMIT (in the round trip
    that sent it, statements held for it included), and is not a statement
    refused before it (a lost connection, a deadlock or certification
    failure, anything else). Errors before the COMMIT wrote nothing."""
    return (
        getattr(error, _FAILED_AT_COMMIT, False)
        and not isinstance(error, _REFUSED)
        and not errors.is_count_check(error)
    )


class PerDatabase(weakref.WeakKeyDictionary):
    """{Database: value}: a process's value per database (a cache), made
    by ``factory`` on first use, gone with its Database."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        super().__init__()
        self._factory = factory
        self._lock = threading.Lock()

    def of(self, db: "Database") -> Any:
        with self._lock:
            value = self.get(db)
            if value is None:
                value = self[db] = self._factory()
        return value

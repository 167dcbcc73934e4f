"""Engine, transactions and small dialect helpers.

Objects open one transaction per operation with ``db.reader()`` or
``db.writer()``. On SQLite a writer starts with ``BEGIN IMMEDIATE`` so two
writers queue on the busy timeout instead of failing on a lock upgrade; on
MySQL sessions run READ COMMITTED with a strict sql_mode; PostgreSQL runs
READ COMMITTED too (its default).
"""

import contextlib
import functools
import logging
import os
import random
import struct
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any
from typing import Callable
from typing import TypeVar
from typing import cast

import sqlalchemy as sa
from oslo_config import cfg
from sqlalchemy import event
from sqlalchemy import exc as sa_exc

from placement import events
from placement import exception
from placement.db import errors
from placement.db import sqlite_file

LOG = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS = 30000
DEADLOCK_RETRIES = 5


def build_url(conf: cfg.ConfigOpts) -> sa.engine.URL:
    url = conf.placement_database.connection
    params = conf.placement_database.connection_parameters
    if params:
        url += ("&" if "?" in url else "?") + params
    return sa.engine.make_url(url)


# MySQL server errors at connect time that waiting does not fix.
_MYSQL_UNKNOWN_DATABASE = 1049
_MYSQL_ACCESS_DENIED = (1044, 1045, 1698)
# Words of a refused, reset or timed-out connection, in every driver's
# messages: a host that is down, starting or behind a proxy whose backend
# is down, which waiting may fix. (PyMySQL reports a reset as a lost
# connection; psycopg as a server that closed the connection.)
_TRANSIENT = (
    "connection refused",
    "connection reset",
    "lost connection",
    "closed the connection unexpectedly",
    "timed out",
    "timeout",
)


def connect_problem(error: BaseException, url: sa.engine.URL) -> tuple[bool, str]:
    """(worth retrying, one line saying what is wrong and what to do) for
    the DBAPIError of a first connection to ``url``."""
    orig = getattr(error, "orig", None) or error
    args: tuple[Any, ...] = getattr(orig, "args", ())
    code = args[0] if args and isinstance(args[0], int) else None
    # One line: psycopg's messages run over several.
    text = " ".join(
        str(args[1] if code is not None and len(args) > 1 else orig).split()
    )
    shown = url.render_as_string(hide_password=True)
    if code == _MYSQL_UNKNOWN_DATABASE:
        return False, (
            "database %r does not exist on %s: create it (CREATE DATABASE %s "
            "CHARACTER SET utf8mb4) or correct [placement_database] connection"
            % (url.database, url.host, url.database)
        )
    if code in _MYSQL_ACCESS_DENIED:
        return False, (
            "access denied to %s (%s): check the user and password in "
            "[placement_database] connection and the user's GRANT on the "
            "database" % (shown, text)
        )
    if url.get_backend_name() == "sqlite" and "not a database" in text:
        return False, (
            "%s is not a SQLite database (%s): point [placement_database] "
            "connection at a placement database file, or at a new path"
            % (url.database, text)
        )
    if url.get_backend_name() == "sqlite":
        return False, (
            "cannot open the SQLite database %s (%s): its directory must "
            "exist and be writable by this user" % (url.database, text)
        )
    if any(word in text.lower() for word in _TRANSIENT):
        return True, text
    return (
        False,
        "cannot connect to %s (%s): correct [placement_database] connection"
        % (
            shown,
            text,
        ),
    )


def create_engine(
    url: str | sa.engine.URL, conf: cfg.ConfigOpts | None = None
) -> sa.Engine:
    url = sa.engine.make_url(url)
    dbconf = conf.placement_database if conf is not None else None
    kwargs: dict[str, Any] = {"future": True}
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            _sqlite_directory(url.database)
        kwargs["connect_args"] = {
            "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000,
            "check_same_thread": False,
        }
        engine = sa.create_engine(url, **kwargs)
        synchronous = dbconf.sqlite_synchronous if dbconf else True
        _setup_sqlite(engine, synchronous)
        if url.database and url.database != ":memory:":
            sqlite_file.watch(engine, url.database)
        return engine
    if url.get_backend_name() in ("mysql", "postgresql"):
        kwargs["isolation_level"] = "READ COMMITTED"
        # The pool's own rollback-on-return is a round trip per request
        # after a transaction that already ended; _setup_mysql resets only
        # connections that may still be inside one.
        kwargs["pool_reset_on_return"] = None
        if dbconf is not None:
            kwargs["pool_recycle"] = dbconf.connection_recycle_time
            if dbconf.max_pool_size is not None:
                kwargs["pool_size"] = dbconf.max_pool_size
            if dbconf.max_overflow is not None:
                kwargs["max_overflow"] = dbconf.max_overflow
            if dbconf.pool_timeout is not None:
                kwargs["pool_timeout"] = dbconf.pool_timeout
        budget = dbconf.statement_timeout if dbconf is not None else 0
        if url.get_backend_name() == "postgresql":
            engine = sa.create_engine(url, **kwargs)
            _ping_when_idle(engine)
            _setup_postgresql(engine, budget)
            return engine
        # Whatever the URL says (many deployments have ?charset=utf8, the
        # 3-byte set): text outside the BMP must reach the tables intact.
        url = url.update_query_dict({"charset": "utf8mb4"})
        engine = sa.create_engine(url, **kwargs)
        _ping_when_idle(engine)
        sql_mode = dbconf.mysql_sql_mode if dbconf else "TRADITIONAL"
        sync_wait = dbconf.wsrep_sync_wait if dbconf else 1
        _setup_mysql(engine, sql_mode, sync_wait, budget)
        if engine.dialect.driver == "pymysql":
            _send_with_commit(engine)
        return engine
    return sa.create_engine(url, **kwargs)


def _sqlite_directory(path: str) -> None:
    """Create the missing directory of a new SQLite file (parents too:
    ``tools/serve`` needs no set-up), and say so in one line."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory, exist_ok=True)
        LOG.info("created the directory %s for the SQLite database %s", directory, path)


# A pooled connection idle for longer than this is pinged before use.
PING_AFTER_IDLE_S = 1.0
_IDLE_SINCE = "placement_idle_since"


def _ping_when_idle(engine):
    """The pool's pre-ping, but only for a connection that has been idle
    for a while (or never used): one was just in use and answered, and
    under load every request would otherwise pay a round trip for the
    ping. A server that went away since is still found out at once (the
    request's statement fails, a 503, and the whole pool is renewed), but
    no longer replaced silently for the first request that meets it."""

    @event.listens_for(engine, "connect")
    @event.listens_for(engine, "checkin")
    def _stamp(dbapi_conn, record):
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_conn, record, proxy):
        since = record.info.get(_IDLE_SINCE)
        if since is not None and time.monotonic() - since < PING_AFTER_IDLE_S:
            return
        # As pool_pre_ping does: a connection that does not answer makes
        # the pool renew every connection it holds, this one first.
        dialect = engine.dialect
        try:
            dialect.do_ping(dbapi_conn)
        except dialect.loaded_dbapi.Error as e:
            if dialect.is_disconnect(e, dbapi_conn, None):
                raise sa_exc.InvalidatePoolError() from e
            raise


def _setup_sqlite(engine, synchronous):
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn, record):
        # Take transaction control away from pysqlite: we emit BEGIN ourselves.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA busy_timeout=%d" % SQLITE_BUSY_TIMEOUT_MS)
        cur.execute("PRAGMA synchronous=%s" % ("NORMAL" if synchronous else "OFF"))
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn):
        if conn.get_execution_options().get("placement_writer"):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")


def _setup_mysql(engine, sql_mode, sync_wait, budget):
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn, record):
        cur = dbapi_conn.cursor()
        if budget:
            cur.execute(_mysql_budget(dbapi_conn, budget))
        # Empty on servers built without Galera (MySQL), OFF on a MariaDB
        # that is not in a cluster.
        cur.execute("SHOW VARIABLES LIKE 'wsrep_on'")
        row = cur.fetchone()
        if row and row[1] == "ON":
            # Galera reports a certification failure as a deadlock at
            # COMMIT: retry_on_deadlock runs the whole transaction again.
            record.info[_GALERA] = True
            cur.execute(
                "SET SESSION sql_mode = %s, wsrep_sync_wait = %s",
                (sql_mode, sync_wait),
            )
        else:
            cur.execute("SET SESSION sql_mode = %s", (sql_mode,))
        cur.close()

    _track_transaction_end(engine)


# Execution option of a statement that ``at_commit`` holds back; the
# connection's info key of the SQL held back (sent with the COMMIT).
_AT_COMMIT = "placement_at_commit"
_HELD = "placement_held"
# The connection's info key saying it is to a Galera node. Nothing is held
# back there: when a transaction is aborted by a write set replicated from
# another node (a "brute force" abort) between the statements of a
# multi-statement query, MariaDB Galera runs the statements that follow
# outside the transaction, each committed on its own, and reports the abort
# on one of them or (wsrep_retry_autocommit) not at all: half a write
# committed, answered as failed or as done.
_GALERA = "placement_galera"


def _send_with_commit(engine):
    """On a PyMySQL engine, ``at_commit`` statements are held back and sent
    with the COMMIT, as one multi-statement query: one round trip for the
    whole tail of a write. The server runs them in order and stops at the
    first that fails, before the COMMIT; the error is raised from the
    commit, which then rolls the transaction back."""
    dialect = engine.dialect
    _INSERT_VALUES = dialect.loaded_dbapi.cursors.RE_INSERT_VALUES

    def _held(context):
        """The list to hold the statement in, or None to run it now."""
        options = context.execution_options
        if not options.get("placement_writer"):
            return None  # at_commit is for write transactions
        info = context.root_connection.info
        if info.get(_GALERA):
            return None
        if options.get(_AT_COMMIT):
            return info.setdefault(_HELD, [])
        if info.get(_HELD):
            raise RuntimeError("a statement after one held back for the COMMIT")
        return None

    @event.listens_for(engine, "do_execute")
    def _hold(cursor, statement, parameters, context):
        held = _held(context)
        if held is None:
            return False
        held.append(cursor.mogrify(statement, parameters))
        cursor.lastrowid = None  # nothing inserted yet
        return True

    @event.listens_for(engine, "do_executemany")
    def _hold_many(cursor, statement, parameters, context):
        held = _held(context)
        if held is None:
            return False
        rows = _INSERT_VALUES.match(statement)
        if rows:
            # One multi-row INSERT, as PyMySQL's executemany sends.
            prefix, values, postfix = rows.group(1, 2, 3)
            held.append(
                (prefix % ())
                + ",".join(cursor.mogrify(values.rstrip(), each) for each in parameters)
                + ((postfix or "") % ())
            )
        else:
            held.extend(cursor.mogrify(statement, each) for each in parameters)
        cursor.lastrowid = None
        return True

    @event.listens_for(engine, "begin")
    @event.listens_for(engine, "rollback")
    def _drop(conn):
        if not conn.invalidated:
            conn.info.pop(_HELD, None)

    plain_commit = dialect.do_commit

    def do_commit(dbapi_connection):
        held = dbapi_connection.info.pop(_HELD, None)
        if not held:
            plain_commit(dbapi_connection)
            return
        held.append("COMMIT")
        _send_several(dbapi_connection.dbapi_connection, ";\n".join(held))

    # The dialect is this engine's own; no event can replace the COMMIT.
    dialect.do_commit = do_commit
    _SENDING.add(dialect)


# COM_SET_OPTION packets (length 3, sequence 0; the command and the
# option): MySQL's multi-statement queries allowed, then refused again.
_COM_QUERY = 0x03
_COM_SET_OPTION = 0x1B
_SEVERAL_ON = struct.pack("<iBH", 3, _COM_SET_OPTION, 0)
_SEVERAL_OFF = struct.pack("<iBH", 3, _COM_SET_OPTION, 1)


def _send_several(conn: Any, sql: str) -> None:
    """Run ``sql``, several statements, on the PyMySQL connection ``conn``
    and read all their answers; raises the first statement's error.

    The connections are opened without CLIENT.MULTI_STATEMENTS: a query
    with a ``;`` in it (an injection) runs nothing. This query alone is
    allowed several: multi-statement queries are switched on just before
    it and off just after it (COM_SET_OPTION), the three commands written
    together and their answers read after, in the query's round trip."""
    conn._write_bytes(_SEVERAL_ON)
    conn._execute_command(_COM_QUERY, sql)
    conn._write_bytes(_SEVERAL_OFF)
    try:
        conn._read_packet()  # switched on (each command's answer starts at 1)
        conn._next_seq_id = 1
        conn._read_query_result()
        while conn._result.has_next:
            conn.next_result()
    finally:
        # Read even after a statement's error, which ends the query but
        # not the switch; a lost connection has nothing more to read.
        if conn._sock is not None:
            conn._next_seq_id = 1
            conn._read_packet()  # switched off


# The dialects of the engines ``_send_with_commit`` set up.
_SENDING: "weakref.WeakSet[sa.Dialect]" = weakref.WeakSet()


def holds_for_commit(conn: sa.Connection) -> bool:
    """Whether ``at_commit`` statements on ``conn`` are held back and sent
    with the COMMIT (rather than run at once)."""
    return conn.dialect in _SENDING and not conn.info.get(_GALERA)


def at_commit(
    conn: sa.Connection, statement: sa.Executable, parameters: Any = None
) -> None:
    """Execute ``statement`` as one of the write transaction's last: on
    MySQL (PyMySQL) it is sent with the COMMIT, in the same round trip,
    elsewhere at once. Nothing of its result can be read (not even its row
    count), and only statements given to ``at_commit`` may follow it in
    the transaction; an error it meets fails the commit (nothing is
    written)."""
    conn.execute(statement, parameters, execution_options={_AT_COMMIT: True})


def _setup_postgresql(engine, budget):
    _track_transaction_end(engine)

    if budget:

        @event.listens_for(engine, "do_connect")
        def _budget(dialect, record, cargs, cparams):
            # A session setting given at connection start: no round trip.
            setting = "-c statement_timeout=%d" % max(1, round(budget * 1000))
            cparams["options"] = " ".join(
                filter(None, (cparams.get("options"), setting))
            )

    @event.listens_for(engine, "handle_error")
    def _nul(context):
        # PostgreSQL text cannot hold NUL; other databases store it. A value
        # with one is the client's mistake, not a server error.
        if "cannot contain NUL" in str(context.original_exception):
            return exception.BadRequest(
                "Text with a NUL (0x00) character is not accepted."
            )


def _mysql_budget(dbapi_conn, seconds):
    """The SET of a session's statement time budget (0: none): MariaDB's
    max_statement_time (seconds), MySQL's max_execution_time
    (milliseconds, reads only)."""
    if "mariadb" in dbapi_conn.get_server_info().lower():
        return "SET SESSION max_statement_time = %f" % seconds
    return "SET SESSION max_execution_time = %d" % round(seconds * 1000)


@contextlib.contextmanager
def unbounded(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A connection of ``engine`` without the statement time budget (for
    schema changes, which may take long on big tables). It is discarded
    afterwards, never returned to the pool."""
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":  # no budget there
            yield conn
            return
        try:
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql("SET statement_timeout = 0")
            else:
                dbapi_conn: Any = conn.connection.dbapi_connection
                conn.exec_driver_sql(_mysql_budget(dbapi_conn, 0))
            conn.commit()
            yield conn
        finally:
            conn.invalidate()


def int_list(name: str) -> sa.BindParameter[Any]:
    """A list of integers (ids) for ``IN``, written into the statement as
    it runs rather than bound value by value: about half the CPU for the
    thousands of ids a request can name. Integers only: nothing is quoted."""
    return sa.bindparam(name, expanding=True, literal_execute=True, type_=sa.Integer)


def text_equals(
    db: "Database", column: sa.ColumnElement[Any], value: str
) -> sa.ColumnElement[bool]:
    """``column == value``, except that on PostgreSQL (which cannot store
    NUL characters) a value with one matches nothing instead of failing."""
    if db.dialect == "postgresql" and "\x00" in value:
        return sa.false()
    return column == value


def _track_transaction_end(engine):
    # Whether the connection's last transaction ended with a COMMIT or
    # ROLLBACK that did not fail: then a reset on return has nothing to undo.
    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.info[_ENDED] = False

    @event.listens_for(engine, "commit")
    @event.listens_for(engine, "rollback")
    def _end(conn):
        # Fired just before the driver's commit/rollback: a failing one
        # reaches handle_error below, which takes this back. A connection
        # that was lost has nothing to reset (and no info to read).
        if not conn.invalidated:
            conn.info[_ENDED] = True

    @event.listens_for(engine, "handle_error")
    def _error(context):
        if context.connection is not None:
            context.connection.info[_ENDED] = False

    @event.listens_for(engine, "reset")
    def _reset(dbapi_conn, record, state):
        if not record.info.get(_ENDED):
            dbapi_conn.rollback()
        record.info[_ENDED] = False


_ENDED = "placement_transaction_ended"
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


def may_conflict(conn: sa.Connection) -> contextlib.AbstractContextManager[Any]:
    """Context for a statement that may break a unique or foreign key when
    the transaction must go on afterwards (to find out which key): on
    PostgreSQL a failed statement spoils the whole transaction unless it ran
    inside a savepoint; elsewhere only the statement is undone."""
    if conn.dialect.name == "postgresql":
        return conn.begin_nested()
    return contextlib.nullcontext()


def tables_not_utf8mb4(engine: sa.Engine) -> list[str]:
    """Names of placement's tables whose default or any column's character
    set is not utf8mb4 (MySQL; none elsewhere)."""
    if engine.dialect.name != "mysql":
        return []
    query = sa.text(
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = DATABASE() AND table_collation NOT LIKE 'utf8mb4%'"
        " UNION SELECT table_name FROM information_schema.columns"
        " WHERE table_schema = DATABASE() AND character_set_name IS NOT NULL"
        " AND character_set_name <> 'utf8mb4'"
    )
    # alembic's own table holds only revision ids.
    skip = "alembic_version"
    with engine.connect() as conn:
        return sorted(t for t in conn.execute(query).scalars() if t != skip)


class Database:
    """The engine plus the two kinds of transaction objects use, and the
    configuration of the service it serves: the handlers and objects of an
    app read their options there, when they use them (an app is built for
    one ConfigOpts and reads no other)."""

    def __init__(self, engine: sa.Engine, conf: cfg.ConfigOpts) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
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
    def writer(self) -> Iterator[sa.Connection]:
        """A write transaction. The ``before_commit`` hooks run just before
        it commits (the objects layer's catalog log is one)."""
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
                self._commit(conn, transaction)
            finally:
                del conn.info[_WRITE]

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
        return insert_ignore(self.dialect, table)


# The two points of ``Database.commit_fault``.
BEFORE_COMMIT = "before commit"
AFTER_COMMIT = "after commit"
_FAILED_AT_COMMIT = "placement_failed_at_commit"


# Errors of a statement the server refused: one held for the COMMIT stops
# the query there, before the COMMIT, which then never runs.
_REFUSED = (sa_exc.IntegrityError, sa_exc.DataError, sa_exc.ProgrammingError)


def maybe_committed(error: BaseException) -> bool:
    """Whether ``error``, which ended a write transaction, may have come
    after its COMMIT was done: it was met at the COMMIT (in the round trip
    that sent it, statements held for it included), and is not a statement
    refused before it (a lost connection, a deadlock or certification
    failure, anything else). Errors before the COMMIT wrote nothing."""
    return getattr(error, _FAILED_AT_COMMIT, False) and not isinstance(error, _REFUSED)


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


@functools.cache
def insert_ignore(dialect: str, table: sa.Table) -> sa.Insert:
    """An INSERT for ``dialect`` (name) that skips existing unique keys;
    built once per table (its cache key too), parameters given at
    execution."""
    if dialect == "sqlite":
        return table.insert().prefix_with("OR IGNORE")
    if dialect == "mysql":
        return table.insert().prefix_with("IGNORE")
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert

        return insert(table).on_conflict_do_nothing()
    raise NotImplementedError(dialect)


def inserted_id(result: sa.CursorResult[Any]) -> int | None:
    """The id of the row a one-row ``insert_ignore`` added; None if the row
    was there already."""
    if result.rowcount == 0:
        return None
    # PostgreSQL counts no rows for an INSERT .. RETURNING: whether a key
    # came back tells instead (elsewhere one row was added).
    key: Any = result.inserted_primary_key
    return key[0] if key else None


F = TypeVar("F", bound=Callable[..., Any])


def retry_on_deadlock(fn: F) -> F:
    """Re-run a whole transaction when the database reports a deadlock,
    after a random pause that grows with each try (racing writers fall
    out of step). When the tries run out the write is a 409
    placement.concurrent_update, which clients retry, never a 500."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        for attempt in range(DEADLOCK_RETRIES + 1):
            try:
                return fn(*args, **kwargs)
            except sa_exc.DBAPIError as e:
                if not errors.is_deadlock(e):
                    raise
                if attempt == DEADLOCK_RETRIES:
                    events.deadlock_retries_exhausted()
                    LOG.warning(
                        "%s: deadlock on each of %d tries, answered 409",
                        fn.__name__,
                        attempt + 1,
                    )
                    raise exception.ConcurrentUpdate(DEADLOCKED) from e
                LOG.debug("deadlock in %s, retrying (%d)", fn.__name__, attempt)
                time.sleep(random.uniform(0.001, 0.02) * 2**attempt)

    return cast(F, wrapper)


DEADLOCKED = (
    "The database kept refusing this write for conflicting with concurrent "
    "ones (deadlock); nothing was written. Please retry the request."
)

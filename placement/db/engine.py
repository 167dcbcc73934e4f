"""Engines and their dialects' set-up.

On SQLite a writer starts with ``BEGIN IMMEDIATE`` so two writers queue
on the busy timeout instead of failing on a lock upgrade; on MySQL
sessions run READ COMMITTED with a strict sql_mode; PostgreSQL runs READ
COMMITTED too (its default). A connection's reset on return to the pool
is a ROLLBACK only when its transaction may not have ended. A MySQL or
PostgreSQL engine has an autocommit twin, for reads of one statement
(``autocommit``; doc/architecture.md "Reads of one statement").
"""

import contextlib
import logging
import os
import re
import time
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from oslo_config import cfg
from sqlalchemy import event
from sqlalchemy import exc as sa_exc

from placement import exception
from placement.db import described
from placement.db import held
from placement.db import sqlite_file

LOG = logging.getLogger(__name__)


SQLITE_BUSY_TIMEOUT_MS = 30000


def create_engine(
    url: str | sa.engine.URL, conf: cfg.ConfigOpts | None = None
) -> sa.Engine:
    engine = _create_engine(sa.engine.make_url(url), conf)
    if conf is not None and _traces_statements(conf):
        from osprofiler import sqlalchemy as profiler_sqlalchemy

        # A span per statement of a traced request; without a trace in the
        # thread, two calls that find none. (The autocommit twin's
        # statements reach these listeners too: its events are joined.)
        profiler_sqlalchemy.add_tracing(sa, engine, "db")
    return engine


def _traces_statements(conf: cfg.ConfigOpts) -> bool:
    """[profiler] enabled and trace_sqlalchemy (doc/operations.md
    "Tracing"); check_profiler refused enabled without osprofiler."""
    profiler = conf.profiler if "profiler" in conf else None
    return bool(profiler and profiler.enabled and profiler.trace_sqlalchemy)


def _create_engine(url: sa.engine.URL, conf: cfg.ConfigOpts | None) -> sa.Engine:
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
    if url.get_backend_name() not in ("mysql", "postgresql"):
        return sa.create_engine(url, **kwargs)
    # The pool's own rollback-on-return is a round trip per request
    # after a transaction that already ended; _track_transaction_end
    # resets only connections that may still be inside one.
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
    if url.get_backend_name() == "mysql":
        # Whatever the URL says (many deployments have ?charset=utf8, the
        # 3-byte set): text outside the BMP must reach the tables intact.
        url = url.update_query_dict({"charset": "utf8mb4"})
        sql_mode = dbconf.mysql_sql_mode if dbconf else "TRADITIONAL"
        sync_wait = dbconf.wsrep_sync_wait if dbconf else 1

        def session(engine):
            _mysql_session(engine, sql_mode, sync_wait, budget)

    else:

        def session(engine):
            _postgresql_session(engine, budget)

    if url.get_backend_name() == "mysql":
        kwargs.update(MYSQL_DRIVERS.get(url.get_driver_name(), {"connect_args": {}}))
    engine = sa.create_engine(url, isolation_level="READ COMMITTED", **kwargs)
    session(engine)
    if url.get_backend_name() == "mysql":
        _mysql_transactions(engine)
        if engine.dialect.driver in held.SEND_SEVERAL:
            held.send_with_commit(engine)
    else:
        _postgresql_errors(engine)
    _track_transaction_end(engine)
    # The twin: no BEGIN, COMMIT nor ROLLBACK is ever sent on it (the
    # driver's rollback at the end of a read is skipped, as is the pool's
    # reset), so a read of one statement is one round trip.
    if url.get_backend_name() == "mysql":
        # Set as the connection opens: no SET AUTOCOMMIT afterwards.
        kwargs["connect_args"] = {**kwargs["connect_args"], "autocommit": True}
    twin = sa.create_engine(
        url, isolation_level="AUTOCOMMIT", skip_autocommit_rollback=True, **kwargs
    )
    session(twin)
    _twin(engine, twin)
    return engine


def _twin(engine: sa.Engine, twin: sa.Engine) -> None:
    """Make ``twin`` (the same database and session settings, its own pool
    of connections in autocommit) ``engine``'s autocommit twin: the
    listeners of statements and errors on ``engine`` (the error mapping,
    tracing, a test's) hear the twin's too, as they would an
    ``execution_options`` copy's (SQLAlchemy joins its events the same
    way); disposing of ``engine`` (before a fork, at exit) disposes of
    the twin."""
    twin.dispatch = twin.dispatch._join(engine.dispatch)
    setattr(engine, _TWIN, twin)

    @event.listens_for(engine, "engine_disposed")
    def _disposed(disposed):
        if disposed is engine:  # the twin's own, joined, also come here
            twin.dispose()


# The attribute of an engine holding its twin (which refers to it: its
# events are joined to the engine's).
_TWIN = "placement_autocommit_twin"
# The execution option of a read of one statement on SQLite: no BEGIN.
SINGLE = "placement_single"


def twin_of(engine: sa.Engine) -> sa.Engine | None:
    """``engine``'s autocommit twin (``autocommit``), if it has one."""
    return getattr(engine, _TWIN, None)


def autocommit(engine: sa.Engine) -> sa.Engine:
    """The engine of ``engine``'s reads of one statement, each its own
    snapshot: on MySQL and PostgreSQL its autocommit twin (no BEGIN,
    COMMIT nor reset: the statement alone is sent); on SQLite ``engine``
    itself, its connections sending no BEGIN for them (pysqlite's
    rollback without a transaction does nothing)."""
    twin = getattr(engine, _TWIN, None)
    if twin is not None:
        return twin
    return engine.execution_options(**{SINGLE: True})


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


def idle_since(info: dict[str, Any], since: float) -> None:
    """Note in a pooled connection's record ``info`` that it has been
    idle since ``since`` (time.monotonic()): the pool pings it before its
    next use once that is PING_AFTER_IDLE_S ago."""
    info[_IDLE_SINCE] = since


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
        options = conn.get_execution_options()
        if options.get("placement_writer"):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        elif not options.get(SINGLE):
            # A read of one statement is its own snapshot without one.
            conn.exec_driver_sql("BEGIN")


def _mysql_session(engine, sql_mode, sync_wait, budget):
    """Each new connection's session: the statement budget, the sql_mode,
    and on a Galera node wsrep_sync_wait (a read waits for what the
    cluster committed before it, in autocommit too)."""

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
            record.info[held.GALERA] = True
            cur.execute(
                "SET SESSION sql_mode = %s, wsrep_sync_wait = %s",
                (sql_mode, sync_wait),
            )
        else:
            cur.execute("SET SESSION sql_mode = %s", (sql_mode,))
        cur.close()

    if engine.dialect.driver == "pymysql":
        # mysqlclient parses column descriptions in C.
        described.parse_once(engine)
    _ping_when_idle(engine)


# A MySQL driver (the URL's) -> create_engine's arguments for it, as
# PyMySQL's defaults are: mysqlclient allows multi-statement queries
# unless told not to, and a query with a ``;`` in it (an injection) must
# run nothing (the held statements switch them on for the COMMIT's query
# alone); its dialect's positional placeholders cannot bind the lists
# ``plain_rows`` writes as placeholders by name.
MYSQL_DRIVERS = {
    "mysqldb": {"connect_args": {"multi_statements": False}, "paramstyle": "pyformat"}
}


def _mysql_transactions(engine):
    # A write transaction on a Galera node must start from what the cluster
    # committed before it. Its SELECTs wait for that (wsrep_sync_wait's
    # read bit), but a write whose first statement is a DELETE or UPDATE (a
    # consumer's allocations deleted just after another API host wrote
    # them) would run on this node's older state and miss rows: such a
    # transaction is opened with an explicit START TRANSACTION, which the
    # read bit makes wait too. Sent just before that first statement, so a
    # write opening with a SELECT (a claim) pays no extra round trip.
    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.info[_OPENING] = bool(
            conn.info.get(held.GALERA)
            and conn.get_execution_options().get("placement_writer")
        )

    @event.listens_for(engine, "before_cursor_execute")
    def _open(conn, cursor, statement, parameters, context, executemany):
        if conn.info.pop(_OPENING, False) and not _SELECT.match(statement):
            cursor.execute("START TRANSACTION")


# The info key of a Galera write transaction whose first statement is still
# to come; a statement that waits for the cluster by itself.
_OPENING = "placement_opening"
_SELECT = re.compile(r"\s*SELECT\b", re.IGNORECASE)


def _postgresql_session(engine, budget):
    """Each new connection's session: the statement budget."""
    if budget:

        @event.listens_for(engine, "do_connect")
        def _budget(dialect, record, cargs, cparams):
            # A session setting given at connection start: no round trip.
            setting = "-c statement_timeout=%d" % max(1, round(budget * 1000))
            cparams["options"] = " ".join(
                filter(None, (cparams.get("options"), setting))
            )

    _ping_when_idle(engine)


def _postgresql_errors(engine):
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

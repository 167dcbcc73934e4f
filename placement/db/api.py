"""Engine, transactions and small dialect helpers.

Objects open one transaction per operation with ``db.reader()`` or
``db.writer()``. On SQLite a writer starts with ``BEGIN IMMEDIATE`` so two
writers queue on the busy timeout instead of failing on a lock upgrade; on
MySQL sessions run READ COMMITTED with a strict sql_mode.
"""
import contextlib
import functools
import logging
import os
import random
import time

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import exc as sa_exc

from placement.db import tables

LOG = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS = 30000
DEADLOCK_RETRIES = 5


def build_url(conf):
    url = conf.placement_database.connection
    params = conf.placement_database.connection_parameters
    if params:
        url += ("&" if "?" in url else "?") + params
    return sa.engine.make_url(url)


def create_engine(url, conf=None):
    url = sa.engine.make_url(url)
    dbconf = conf.placement_database if conf is not None else None
    kwargs = {"future": True}
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(url.database)),
                        exist_ok=True)
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000,
                                  "check_same_thread": False}
        engine = sa.create_engine(url, **kwargs)
        synchronous = dbconf.sqlite_synchronous if dbconf else True
        _setup_sqlite(engine, synchronous)
        return engine
    if url.get_backend_name() == "mysql":
        kwargs["isolation_level"] = "READ COMMITTED"
        kwargs["pool_pre_ping"] = True
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
        if "charset" not in url.query:
            url = url.update_query_dict({"charset": "utf8mb4"})
        engine = sa.create_engine(url, **kwargs)
        sql_mode = dbconf.mysql_sql_mode if dbconf else "TRADITIONAL"
        _setup_mysql(engine, sql_mode)
        return engine
    return sa.create_engine(url, **kwargs)


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


def _setup_mysql(engine, sql_mode):
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn, record):
        cur = dbapi_conn.cursor()
        cur.execute("SET SESSION sql_mode = %s", (sql_mode,))
        cur.close()

    # Whether the connection's last transaction ended with a COMMIT or
    # ROLLBACK that did not fail: then a reset on return has nothing to undo.
    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.info[_ENDED] = False

    @event.listens_for(engine, "commit")
    @event.listens_for(engine, "rollback")
    def _end(conn):
        # Fired just before the driver's commit/rollback: a failing one
        # reaches handle_error below, which takes this back.
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


CATALOG = tables.catalog_changes
_BUMP = (CATALOG.update().where(CATALOG.c.shard == sa.bindparam("to_shard"))
         .values(changes=CATALOG.c.changes + 1))


def _count_catalog_change(conn):
    # Last statement before commit: the shard's row lock is held briefly and
    # its holder waits for nothing else, so it cannot join a deadlock.
    shard = random.randrange(tables.CATALOG_SHARDS)
    if conn.execute(_BUMP, {"to_shard": shard}).rowcount == 0:
        # A missing shard row would leave the count unchanged.
        conn.execute(insert_ignore(conn.dialect.name, CATALOG),
                     {"shard": shard, "changes": 0})
        conn.execute(_BUMP, {"to_shard": shard})


def catalog_stamp(conn):
    """The number of catalog changes committed so far (only grows)."""
    return conn.execute(sa.select(sa.func.coalesce(
        sa.func.sum(CATALOG.c.changes), 0))).scalar()


def is_deadlock(error):
    """True for errors a fresh transaction may not hit again."""
    orig = getattr(error, "orig", None)
    args = getattr(orig, "args", ())
    if args and args[0] in (1213, 1205):  # deadlock, lock wait timeout
        return True
    return "database is locked" in str(error)


class Database:
    """The engine plus the two kinds of transaction objects use."""

    def __init__(self, engine):
        self.engine = engine
        self.dialect = engine.dialect.name

    @contextlib.contextmanager
    def reader(self):
        with self.engine.connect() as conn:
            with conn.begin():
                yield conn

    @contextlib.contextmanager
    def writer(self, catalog=True):
        """A write transaction. ``catalog``: it may change providers,
        inventories, traits, aggregates or names (anything but allocations
        and consumers), so it is counted in ``catalog_changes`` just before
        commit, which tells every worker its cached catalog is out of date."""
        with self.engine.connect() as conn:
            conn = conn.execution_options(placement_writer=True)
            with conn.begin():
                yield conn
                if catalog:
                    _count_catalog_change(conn)

    def insert_ignore(self, table):
        """An INSERT that skips rows whose unique key already exists."""
        return insert_ignore(self.dialect, table)


def insert_ignore(dialect, table):
    """An INSERT for ``dialect`` (name) that skips existing unique keys."""
    if dialect == "sqlite":
        return table.insert().prefix_with("OR IGNORE")
    if dialect == "mysql":
        return table.insert().prefix_with("IGNORE")
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
        return insert(table).on_conflict_do_nothing()
    raise NotImplementedError(dialect)


def retry_on_deadlock(fn):
    """Re-run a whole transaction when the database reports a deadlock."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        for attempt in range(DEADLOCK_RETRIES + 1):
            try:
                return fn(*args, **kwargs)
            except sa_exc.DBAPIError as e:
                if attempt == DEADLOCK_RETRIES or not is_deadlock(e):
                    raise
                LOG.debug("deadlock in %s, retrying (%d)", fn.__name__, attempt)
                time.sleep(random.uniform(0.001, 0.02) * (attempt + 1))
    return wrapper

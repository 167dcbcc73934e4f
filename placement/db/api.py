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
    def writer(self):
        with self.engine.connect() as conn:
            conn = conn.execution_options(placement_writer=True)
            with conn.begin():
                yield conn

    def insert_ignore(self, table):
        """An INSERT that skips rows whose unique key already exists."""
        if self.dialect == "sqlite":
            return table.insert().prefix_with("OR IGNORE")
        if self.dialect == "mysql":
            return table.insert().prefix_with("IGNORE")
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
            return insert(table).on_conflict_do_nothing()
        raise NotImplementedError(self.dialect)


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

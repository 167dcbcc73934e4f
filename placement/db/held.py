"""Statements held back and sent with the COMMIT (``at_commit``).

On MySQL (not on a Galera node) the last statements of a write
transaction, which nothing reads, are held back and sent with its COMMIT
as one multi-statement query: the whole tail of a write in one round trip
with PyMySQL, three with mysqlclient (whose C library waits for the
answer to each command: the switch on, the query, the switch off).
Elsewhere ``at_commit`` runs the statement at once.
"""

import struct
import sys
import weakref
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from placement.db import described

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
GALERA = "placement_galera"


def send_with_commit(engine: sa.Engine) -> None:
    """On a MySQL engine, ``at_commit`` statements are held back and sent
    with the COMMIT, as one multi-statement query (``SEND_SEVERAL``): the
    whole tail of a write at once. The server runs them in order and stops
    at the first that fails, before the COMMIT; the error is raised from
    the commit, which then rolls the transaction back."""
    dialect = engine.dialect

    def _held(context):
        """The list to hold the statement in, or None to run it now."""
        options = context.execution_options
        if not options.get("placement_writer"):
            return None  # at_commit is for write transactions
        info = context.root_connection.info
        if info.get(GALERA):
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
        held.extend(mogrified(cursor, statement, parameters))
        cursor.lastrowid = None
        return True

    @event.listens_for(engine, "begin")
    @event.listens_for(engine, "rollback")
    def _drop(conn):
        if not conn.invalidated:
            conn.info.pop(_HELD, None)

    plain_commit = dialect.do_commit
    send = SEND_SEVERAL[dialect.driver]

    def do_commit(dbapi_connection):
        held = dbapi_connection.info.pop(_HELD, None)
        if not held:
            plain_commit(dbapi_connection)
            return
        held.append("COMMIT")
        send(dbapi_connection.dbapi_connection, ";\n".join(held))

    # The dialect is this engine's own; no event can replace the COMMIT.
    dialect.do_commit = do_commit  # type: ignore[method-assign]
    _SENDING.add(dialect)


# COM_SET_OPTION packets (length 3, sequence 0; the command and the
# option): MySQL's multi-statement queries allowed, then refused again.
_COM_QUERY = 0x03
_COM_SET_OPTION = 0x1B
_SEVERAL_ON = struct.pack("<iBH", 3, _COM_SET_OPTION, 0)
_SEVERAL_OFF = struct.pack("<iBH", 3, _COM_SET_OPTION, 1)


def _send_several_pymysql(conn: Any, sql: str) -> None:
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
        described.read_answers(conn)
    finally:
        # Read even after a statement's error, which ends the query but
        # not the switch; a lost connection has nothing more to read.
        if conn._sock is not None:
            conn._next_seq_id = 1
            conn._read_packet()  # switched off


# mysql_set_server_option's options (MySQLdb names no constants).
_MULTI_STATEMENTS_ON = 0
_MULTI_STATEMENTS_OFF = 1


def _send_several_mysqldb(conn: Any, sql: str) -> None:
    """``_send_several_pymysql`` on a mysqlclient connection (opened with
    ``multi_statements=False``): its C library waits for each command's
    answer, so the switch on and off are a round trip each."""
    conn.set_server_option(_MULTI_STATEMENTS_ON)
    try:
        conn.query(sql)  # raises the first statement's error
        while conn.next_result() == 0:  # raises a later one's; -1: the last
            pass
    finally:
        # After a statement's error too (it ends the query, not the
        # switch); on a lost connection this raises the loss again.
        conn.set_server_option(_MULTI_STATEMENTS_OFF)


# A MySQL driver (SQLAlchemy's name) -> how it sends the held statements
# and the COMMIT.
SEND_SEVERAL = {"pymysql": _send_several_pymysql, "mysqldb": _send_several_mysqldb}


def mogrified(cursor: Any, statement: str, parameters: list[Any]) -> list[str]:
    """The SQL the driver's ``cursor`` (PyMySQL's or MySQLdb's) would send
    for ``statement`` run with each of ``parameters``: an INSERT as one
    multi-row INSERT, as its ``executemany`` sends it."""
    # Both drivers' cursor modules name the pattern their executemany uses.
    cursors = sys.modules[type(cursor).__module__]
    rows = len(parameters) > 1 and cursors.RE_INSERT_VALUES.match(statement)
    if rows:
        prefix, values, postfix = rows.group(1, 2, 3)
        return [
            (prefix % ())
            + ",".join(cursor.mogrify(values.rstrip(), each) for each in parameters)
            + ((postfix or "") % ())
        ]
    return [cursor.mogrify(statement, each) for each in parameters]


# The dialects of the engines ``send_with_commit`` set up.
_SENDING: "weakref.WeakSet[sa.Dialect]" = weakref.WeakSet()


def held_list(conn: sa.Connection) -> list[str] | None:
    """The SQL held back for ``conn``'s COMMIT, to add to, or None where
    ``at_commit`` runs a statement at once."""
    if not holds_for_commit(conn):
        return None
    assert conn.get_execution_options().get("placement_writer")
    return conn.info.setdefault(_HELD, [])


def holds_for_commit(conn: sa.Connection) -> bool:
    """Whether ``at_commit`` statements on ``conn`` are held back and sent
    with the COMMIT (rather than run at once)."""
    return conn.dialect in _SENDING and not conn.info.get(GALERA)


def at_commit(
    conn: sa.Connection, statement: sa.Executable, parameters: Any = None
) -> None:
    """Execute ``statement`` as one of the write transaction's last: on
    MySQL it is sent with the COMMIT, in the same query,
    elsewhere at once. Nothing of its result can be read (not even its row
    count), and only statements given to ``at_commit`` may follow it in
    the transaction; an error it meets fails the commit (nothing is
    written)."""
    conn.execute(statement, parameters, execution_options={_AT_COMMIT: True})

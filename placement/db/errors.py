"""What a database error means, from one table of driver codes per
backend.

A statement's error reaches placement as SQLAlchemy's DBAPIError around
the driver's own exception (``orig``). Each backend's table maps the code
that driver gives (PyMySQL, MySQLdb: the server's or client's error
number; psycopg: the SQLSTATE, or its two-character class; sqlite3:
none, so words of its message) to one of the kinds below. Callers ask
``is_deadlock`` and its siblings; ``kind`` is what they share.
"""

import dataclasses
import re
from collections.abc import Mapping
from typing import Any
from typing import Callable

from sqlalchemy import exc as sa_exc

# The kinds of error placement tells apart.
DEADLOCK = "deadlock"  # a fresh transaction may not hit it again
UNAVAILABLE = "unavailable"  # down, unreachable, shutting down, crowded
READ_ONLY = "read-only"  # answers reads, refuses every write
FULL = "full"  # no room left for a write: disk, table or tablespace
OVER_TIME_BUDGET = "over time budget"  # cancelled after statement_timeout
INTERRUPTED = "interrupted"  # a statement cancelled or killed by someone
SCHEMA_MISSING = "schema missing"  # no database or no such table
UNSTORABLE_TEXT = "unstorable text"  # the tables' character set
TOO_MANY_PARAMETERS = "too many parameters"  # more than one statement binds
# A NULL where a statement read an id, or a foreign key without its row:
# a row the write relied on is gone (another writer's change).
FOREIGN_CHANGE = "foreign change"
# A statement held for the COMMIT matched fewer rows than it had to
# (``statements.plain_count_at_commit``): the query stopped before the
# COMMIT, nothing was written.
COUNT_CHECK = "count check"


@dataclasses.dataclass(frozen=True)
class Backend:
    code: Callable[[Any], int | str | None]  # of the driver's exception
    codes: Mapping[int | str, str]  # code -> kind
    messages: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # words in the message -> kind, for errors the driver gives no code
    missing: tuple[re.Pattern[str], ...] = ()
    # what a FOREIGN_CHANGE names as missing (its group 1), in the message


def _mysql_code(orig: Any) -> int | None:
    args: tuple[Any, ...] = getattr(orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


# The MySQL drivers' SQLSTATE is the server's (HY000 for most errors):
# the error number tells. libmariadb's client errors (2002-2055) have the
# numbers PyMySQL gives its own.
MYSQL = Backend(
    code=_mysql_code,
    codes={
        1213: DEADLOCK,
        1205: DEADLOCK,  # lock wait timeout
        # The server cannot be reached or went away, as opposed to a fault
        # of the statement.
        1040: UNAVAILABLE,  # too many connections
        1203: UNAVAILABLE,  # the user's max_user_connections
        1226: UNAVAILABLE,  # the user's resource limit (queries per hour...)
        1037: UNAVAILABLE,  # out of memory
        1041: UNAVAILABLE,  # out of memory (resources)
        1135: UNAVAILABLE,  # cannot create a thread
        1047: UNAVAILABLE,  # Galera node not in the primary component (yet)
        1053: UNAVAILABLE,  # server shutdown in progress
        1927: UNAVAILABLE,  # connection killed
        2002: UNAVAILABLE,  # can't connect (socket)
        2003: UNAVAILABLE,  # can't connect (TCP)
        2005: UNAVAILABLE,  # unknown host
        2006: UNAVAILABLE,  # server has gone away
        2013: UNAVAILABLE,  # lost connection during query
        2014: UNAVAILABLE,  # commands out of sync
        2045: UNAVAILABLE,  # can't open shared memory
        2055: UNAVAILABLE,  # lost connection (system error)
        4031: UNAVAILABLE,  # disconnected by the server (idle)
        # A server started or set read-only (SET GLOBAL read_only: a
        # replica, a primary demoted by a fail-over), for users without
        # SUPER (READ ONLY ADMIN on MariaDB 10.11); a read-only
        # transaction.
        1290: READ_ONLY,  # running with the --read-only option
        1836: READ_ONLY,  # running in read-only mode
        1792: READ_ONLY,  # a statement in a READ ONLY transaction
        1021: FULL,  # disk full
        1114: FULL,  # the table is full
        1317: INTERRUPTED,  # query execution was interrupted (KILL QUERY)
        1969: OVER_TIME_BUDGET,  # MariaDB: max_statement_time exceeded
        3024: OVER_TIME_BUDGET,  # MySQL: max_execution_time exceeded
        1049: SCHEMA_MISSING,  # unknown database
        1046: SCHEMA_MISSING,  # no database selected
        1146: SCHEMA_MISSING,  # table does not exist
        # A 4-byte character in a legacy 3-byte utf8 table, or text the
        # column's collation cannot compare.
        1267: UNSTORABLE_TEXT,
        1271: UNSTORABLE_TEXT,
        1366: UNSTORABLE_TEXT,
        1048: FOREIGN_CHANGE,  # column cannot be null
        1216: FOREIGN_CHANGE,  # no referenced row
        1452: FOREIGN_CHANGE,  # no referenced row (a child row's key)
        # SIGNAL's own error: placement signals only a held statement's
        # row count check (``statements.plain_count_at_commit``).
        1644: COUNT_CHECK,
    },
    # A storage engine's own error (1030, 1180...) naming a full disk.
    messages={"No space left on device": FULL},
    missing=(
        re.compile(r"Column '([^']+)' cannot be null"),
        re.compile(r"FOREIGN KEY \(`([^`]+)`\)"),
    ),
)

POSTGRESQL = Backend(
    code=lambda orig: getattr(orig, "sqlstate", None),
    codes={
        "40001": DEADLOCK,  # serialization failure
        "40P01": DEADLOCK,
        "08": UNAVAILABLE,  # connection exceptions, the whole class
        "57P01": UNAVAILABLE,  # shutting down
        "57P02": UNAVAILABLE,  # crashed
        "57P03": UNAVAILABLE,  # starting up
        "53": UNAVAILABLE,  # insufficient resources, the whole class
        "53300": UNAVAILABLE,  # too many connections
        "57P05": UNAVAILABLE,  # idle session timeout
        "25P03": UNAVAILABLE,  # idle in transaction session timeout
        # default_transaction_read_only, a hot standby, a read-only
        # transaction.
        "25006": READ_ONLY,  # read_only_sql_transaction
        "53100": FULL,  # disk_full
        # Also what pg_cancel_backend gives (the message tells).
        "57014": OVER_TIME_BUDGET,  # query_canceled
        "3D000": SCHEMA_MISSING,  # database does not exist
        "42P01": SCHEMA_MISSING,  # undefined table
        "23502": FOREIGN_CHANGE,  # not_null_violation
        "23503": FOREIGN_CHANGE,  # foreign_key_violation
    },
    messages={
        # psycopg's own check, before anything is sent.
        "number of parameters must be": TOO_MANY_PARAMETERS,
        # An I/O error (58030) when a file could not be extended.
        "No space left on device": FULL,
        # 57014 of pg_cancel_backend, not of statement_timeout.
        "canceling statement due to user request": INTERRUPTED,
    },
    missing=(
        re.compile(r'null value in column "([^"]+)"'),
        re.compile(r"Key \(([^)]+)\)=.* is not present"),
    ),
)

SQLITE = Backend(
    code=lambda orig: None,
    codes={},
    messages={
        "database is locked": DEADLOCK,  # the busy timeout ran out
        # SQLITE_READONLY: a file (or directory, or mount) the process may
        # not write, opened read-only.
        "attempt to write a readonly database": READ_ONLY,
        "database or disk is full": FULL,  # SQLITE_FULL
        "disk I/O error": UNAVAILABLE,  # SQLITE_IOERR
        # SQLITE_CANTOPEN: the file (or its directory) gone or unreadable.
        "unable to open database file": UNAVAILABLE,
        "no such table": SCHEMA_MISSING,
        # A build setting: 250,000 on Debian, 32,766 by default, 999 in
        # old builds.
        "too many SQL variables": TOO_MANY_PARAMETERS,
        "NOT NULL constraint failed": FOREIGN_CHANGE,
        "FOREIGN KEY constraint failed": FOREIGN_CHANGE,  # names nothing
    },
    missing=(re.compile(r"NOT NULL constraint failed: (\S+)"),),
)

# The top-level module of a driver's exceptions -> its backend.
BACKENDS = {
    "pymysql": MYSQL,
    "MySQLdb": MYSQL,
    "psycopg": POSTGRESQL,
    "sqlite3": SQLITE,
}


def backend(orig: Any) -> Backend | None:
    return BACKENDS.get(type(orig).__module__.partition(".")[0])


def kind(error: BaseException) -> str | None:
    """The kind of a DBAPIError, from its driver's table; None for other
    errors and for codes no table names."""
    if not isinstance(error, sa_exc.DBAPIError):
        return None
    table = backend(error.orig)
    if table is None:
        return None
    text = str(error.orig)
    for words, said in table.messages.items():
        if words in text:
            return said
    code = table.code(error.orig)
    if code is None:
        return None
    if isinstance(code, str) and code not in table.codes:
        code = code[:2]  # a SQLSTATE's class
    return table.codes.get(code)


def is_deadlock(error: BaseException) -> bool:
    """True for errors a fresh transaction may not hit again."""
    return kind(error) == DEADLOCK


def is_unavailable(error: BaseException | None) -> bool:
    """True when ``error`` says the database is down or unreachable (the
    request may succeed later), not that the request itself failed; also
    when it was raised while handling such an error (ending a transaction
    whose connection was lost fails in its turn, e.g. with
    PendingRollbackError)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if _says_unavailable(error):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def _says_unavailable(error: BaseException) -> bool:
    if isinstance(error, (sa_exc.TimeoutError, sa_exc.DisconnectionError)):
        return True
    if not isinstance(error, sa_exc.DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    said = kind(error)
    if said is not None:
        return said == UNAVAILABLE
    # psycopg gives no SQLSTATE when it could not connect at all.
    return (
        backend(error.orig) is POSTGRESQL
        and POSTGRESQL.code(error.orig) is None
        and isinstance(error, sa_exc.OperationalError)
    )


def is_read_only(error: BaseException) -> bool:
    """True when the database refused a write because it takes none
    (read-only): reads still work, writes may again once it is made
    writable (or the fail-over ends)."""
    return kind(error) == READ_ONLY


def is_full(error: BaseException) -> bool:
    """True when the database refused a write for lack of room (disk,
    table or tablespace full)."""
    return kind(error) == FULL


def is_interrupted(error: BaseException) -> bool:
    """True when a statement was cancelled or killed by someone (an
    operator's KILL QUERY or pg_cancel_backend), not for its time."""
    return kind(error) == INTERRUPTED


def is_count_check(error: BaseException) -> bool:
    """True when a statement held for the COMMIT matched fewer rows than
    it had to (``statements.plain_count_at_commit``): nothing written."""
    return kind(error) == COUNT_CHECK


def is_foreign_change(error: BaseException) -> bool:
    """True when a write's statement found a row it relies on gone: a
    NULL where it read an id, or a foreign key without its row."""
    return kind(error) == FOREIGN_CHANGE


def missing(error: BaseException) -> str | None:
    """What a FOREIGN_CHANGE error names as missing (a column, or a key),
    when its message says."""
    table = backend(getattr(error, "orig", None))
    if table is None:
        return None
    text = str(getattr(error, "orig", ""))
    found = (p.search(text) for p in table.missing)
    return next((m.group(1) for m in found if m), None)


def is_over_time_budget(error: BaseException) -> bool:
    """True when the database cancelled a statement that ran longer than
    [placement_database] statement_timeout."""
    return kind(error) == OVER_TIME_BUDGET


def is_schema_missing(error: BaseException) -> bool:
    """True when ``error`` says the database or one of its tables is not
    there (dropped, or never created): the service cannot answer until
    the schema is back, as in an outage."""
    return kind(error) == SCHEMA_MISSING


def is_unstorable_text(error: BaseException) -> bool:
    """True when MySQL refused text its tables' character set cannot hold."""
    return kind(error) == UNSTORABLE_TEXT


def is_too_many_parameters(error: BaseException) -> bool:
    """True when a statement had more bound parameters than the database
    takes: the request named too many items for one statement."""
    return kind(error) == TOO_MANY_PARAMETERS

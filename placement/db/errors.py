"""What a database error means, from one table of driver codes per
backend.

A statement's error reaches placement as SQLAlchemy's DBAPIError around
the driver's own exception (``orig``). Each backend's table maps the code
that driver gives (pymysql: the server's error number; psycopg: the
SQLSTATE, or its two-character class; sqlite3: none, so words of its
message) to one of the kinds below. Callers ask ``is_deadlock`` and its
siblings; ``kind`` is what they share.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any
from typing import Callable

from sqlalchemy import exc as sa_exc

# The kinds of error placement tells apart.
DEADLOCK = "deadlock"  # a fresh transaction may not hit it again
UNAVAILABLE = "unavailable"  # down, unreachable, shutting down, full
OVER_TIME_BUDGET = "over time budget"  # cancelled after statement_timeout
SCHEMA_MISSING = "schema missing"  # no database or no such table
UNSTORABLE_TEXT = "unstorable text"  # the tables' character set
TOO_MANY_PARAMETERS = "too many parameters"  # more than one statement binds
# A row the statement refers to is not there: a NULL id taken by name
# (NOT NULL), or a foreign key. Another writer took it away (a restore).
MISSING_ROW = "missing row"


@dataclasses.dataclass(frozen=True)
class Backend:
    code: Callable[[Any], int | str | None]  # of the driver's exception
    codes: Mapping[int | str, str]  # code -> kind
    messages: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # words in the message -> kind, for errors the driver gives no code


def _mysql_code(orig: Any) -> int | None:
    args: tuple[Any, ...] = getattr(orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


# pymysql's SQLSTATE is the server's (HY000 for most errors): the error
# number tells.
MYSQL = Backend(
    code=_mysql_code,
    codes={
        1213: DEADLOCK,
        1205: DEADLOCK,  # lock wait timeout
        # The server cannot be reached or went away, as opposed to a fault
        # of the statement.
        1040: UNAVAILABLE,  # too many connections
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
        1048: MISSING_ROW,  # column cannot be null
        1452: MISSING_ROW,  # foreign key: no parent row
    },
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
        "53300": UNAVAILABLE,  # too many connections
        "57014": OVER_TIME_BUDGET,  # query_canceled
        "3D000": SCHEMA_MISSING,  # database does not exist
        "42P01": SCHEMA_MISSING,  # undefined table
        "23502": MISSING_ROW,  # not_null_violation
        "23503": MISSING_ROW,  # foreign_key_violation
    },
    # psycopg's own check, before anything is sent.
    messages={"number of parameters must be": TOO_MANY_PARAMETERS},
)

SQLITE = Backend(
    code=lambda orig: None,
    codes={},
    messages={
        "database is locked": DEADLOCK,  # the busy timeout ran out
        "no such table": SCHEMA_MISSING,
        # A build setting: 250,000 on Debian, 32,766 by default, 999 in
        # old builds.
        "too many SQL variables": TOO_MANY_PARAMETERS,
        "NOT NULL constraint failed": MISSING_ROW,
        "FOREIGN KEY constraint failed": MISSING_ROW,
    },
)

# The top-level module of a driver's exceptions -> its backend.
BACKENDS = {"pymysql": MYSQL, "psycopg": POSTGRESQL, "sqlite3": SQLITE}


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


def is_missing_row(error: BaseException) -> bool:
    """True when a statement found a row it refers to gone (an id taken
    by name was NULL, or a foreign key had no row)."""
    return kind(error) == MISSING_ROW


# The columns that refer to a row by id -> what the row is, for a client.
REFERRED = {
    "project_id": "project",
    "user_id": "user",
    "consumer_type_id": "consumer type",
    "aggregate_id": "aggregate",
    "trait_id": "trait",
    "resource_class_id": "resource class",
    "resource_provider_id": "resource provider",
}


def missing_what(error: BaseException) -> str:
    """What ``is_missing_row`` found gone, as the error's text names it
    ("project"), or "row" when the text names no column (SQLite's
    foreign key error)."""
    text = str(getattr(error, "orig", error))
    for column, what in REFERRED.items():
        if column in text:
            return what
    return "row"

"""Small helpers for statements that differ by dialect or binding."""

import functools
import re
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.sql import schema as sa_schema

from placement.db import held


def int_list(name: str) -> sa.BindParameter[Any]:
    """A list of integers (ids) for ``IN``, written into the statement as
    it runs rather than bound value by value: about half the CPU for the
    thousands of ids a request can name. Integers only: nothing is quoted."""
    return sa.bindparam(name, expanding=True, literal_execute=True, type_=sa.Integer)


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


def plain_rows(
    conn: sa.Connection,
    statement: sa.Select[Any] | sa.CompoundSelect[Any],
    params: dict[str, Any] | None = None,
) -> Sequence[Any]:
    """The rows of ``statement`` (a SELECT; ``params``: the values of its
    bound parameters, plain integers or strings, None for NULL: no type
    processing; an expanding one's list, for IN: an empty one as NULL,
    which no value is IN; those marked ``literal_execute``, integers,
    None or ``int_list``'s lists, are written into the text, not escaped
    one by one by the driver) run on the driver's cursor
    directly, as plain tuples: no cache key, execution context, result
    or row objects of SQLAlchemy's, about 40% less CPU than
    ``conn.execute`` with PyMySQL, for the hottest small statement (the
    catalog's look, which most reads send), and a fraction of it for a
    large one (the catalog's log read, whose cache key alone costs more
    than its rows). Listeners see it as any
    statement (``before_cursor_execute`` and ``after_cursor_execute``,
    without an execution context: the statement counters, tracing); a
    driver error is raised as ``conn.execute`` raises it (the
    DBAPIError, the connection invalidated when it was lost), though
    without the ``handle_error`` listeners. Reads only: nothing notes
    what it would write."""
    return _plain(conn, statement, params, fetch=True)[0]


def plain_count(
    conn: sa.Connection,
    statement: sa.Update | sa.Delete,
    params: dict[str, Any] | None = None,
) -> int:
    """The rows ``statement`` (an UPDATE or DELETE) matched, run on the
    driver's cursor as ``plain_rows`` runs a SELECT (its parameters the
    same way: ``int_list``'s lists are written in, and lists of tuples of
    integers too, for a row-value IN). For statements that change nothing
    the catalog keeps (a generation swap): the listeners see it without
    an execution context, as a read, so nothing notes what it wrote
    (``catalog/changes.py``)."""
    return _plain(conn, statement, params, fetch=False)[1]


def plain_insert(
    conn: sa.Connection,
    statement: sa.Insert,
    rows: list[dict[str, Any]],
    at_commit: bool = False,
) -> None:
    """Insert ``rows`` (dicts of the same keys: the values of the columns
    or of ``statement``'s bound parameters) with ``statement`` on the
    driver's cursor, as ``plain_count`` runs its statement: the columns'
    Python defaults (``created_at``) filled in and the values given to
    the driver as ``conn.execute`` gives them (the types' bind
    processors), several rows as one ``executemany``. ``at_commit``: as
    ``db_api.at_commit`` runs it, held back and sent with the COMMIT where
    that is done (``holds_for_commit``), else run at once. Listeners see
    it without an execution context: for tables the catalog does not keep
    (it notes no write)."""
    dialect = conn.dialect
    keys = tuple(rows[0])
    template, written, listed, names, positional, fixed = _plain_text(
        dialect, statement, keys
    )
    assert not written and not listed, "plain_insert binds every value"
    defaults, processors = _insert_values(dialect, statement, keys)
    bound: list[Any] = []
    for row in rows:
        params = {**fixed, **row}
        for name, default in defaults:
            params[name] = default()
        for name, process in processors:
            params[name] = process(params[name])
        bound.append(
            tuple(params[n] for n in names)
            if positional
            else {n: params[n] for n in names}
        )
    text = template % {}
    several = len(bound) > 1
    sent = bound if several else bound[0]
    hold = held.held_list(conn) if at_commit else None
    if hold is not None:
        _hold(conn, hold, text, sent, several, lambda c: held.mogrified(c, text, bound))
        return
    _on_cursor(conn, text, sent, fetch=False, several=several)


def _hold(conn, hold, text, sent, several, made):
    """Hold in ``hold`` (``held.held_list``) what ``made(cursor)`` (a list
    of SQL) makes of ``text`` run with ``sent`` on the driver's cursor,
    the cursor listeners told of ``text`` as if it ran."""
    dbapi_conn = conn.connection.dbapi_connection
    assert dbapi_conn is not None
    cursor = dbapi_conn.cursor()
    try:
        for listener in conn.dispatch.before_cursor_execute:
            listener(conn, cursor, text, sent, None, several)
        hold.extend(made(cursor))
        for listener in conn.dispatch.after_cursor_execute:
            listener(conn, cursor, text, sent, None, several)
        cursor.close()
    except conn.dialect.loaded_dbapi.Error as e:
        raise _driver_error(conn, e, text, sent, cursor) from e


def plain_count_at_commit(
    conn: sa.Connection,
    statement: sa.Update | sa.Delete,
    params: dict[str, Any],
    count: int,
    message: str,
) -> bool:
    """Hold ``statement`` (parameters as ``plain_count``'s) for the COMMIT
    of ``conn``'s write transaction, checked: unless it matched exactly
    ``count`` rows the query stops there with an error (``errors.
    COUNT_CHECK``: ``message``, then ": none" when it matched no row, ":
    some" when fewer), so that nothing held after it, nor the COMMIT,
    runs. Held where a write's last statements are (``held.
    holds_for_commit``) on MariaDB, whose anonymous compound statement
    (``BEGIN NOT ATOMIC``) makes the check; True then, False (nothing
    done: run it with ``plain_count``) elsewhere. The listeners see the
    statement itself, as ``plain_count``'s."""
    mariadb = getattr(conn.dialect, "is_mariadb", False)
    hold = held.held_list(conn) if mariadb else None
    if hold is None:
        return False
    text, bound = _plain_sql(conn, statement, params)

    def checked(cursor):
        return [_CHECKED % (cursor.mogrify(text, bound), message, count, message)]

    _hold(conn, hold, text, bound, False, checked)
    return True


# MariaDB's check of a held statement's row count (``plain_count_at_
# commit``); SIGNAL's error is 1644 (ER_SIGNAL_EXCEPTION).
_CHECKED = (
    "BEGIN NOT ATOMIC DECLARE matched BIGINT DEFAULT 0; %s; "
    "SET matched = ROW_COUNT(); "
    "IF matched = 0 THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '%s: none'; "
    "ELSEIF matched <> %d THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '%s: some'; "
    "END IF; END"
)


def _plain(conn, statement, params, fetch):
    """(rows if ``fetch``, row count) of ``statement`` on the driver's
    cursor."""
    return _on_cursor(conn, *_plain_sql(conn, statement, params), fetch)


def _plain_sql(conn, statement, params):
    """(text, bound values) of ``statement`` with ``params`` for the
    driver's cursor (``plain_rows``)."""
    dialect = conn.dialect
    template, written, listed, names, positional, fixed = _plain_text(
        dialect, statement
    )
    params = {**fixed, **params} if params else fixed
    values = {n: _int_text(params[n]) for n in written}
    bound: Any
    if positional:
        for n in listed:
            values[n] = ", ".join("?" * len(params[n])) or "NULL"
        bound = tuple(
            v for n in names for v in (params[n] if n in listed else (params[n],))
        )
    else:
        bound = {n: params[n] for n in names if n not in listed}
        for n in listed:
            keys = ["%s__%d" % (n, i) for i in range(len(params[n]))]
            values[n] = ", ".join(["%%(%s)s" % k for k in keys]) or "NULL"
            bound.update(zip(keys, params[n]))
    return template % values, bound


def _on_cursor(conn, text, bound, fetch, several=False):
    """(rows if ``fetch``, row count) of ``text`` run with ``bound`` (a
    list of them if ``several``) on ``conn``'s driver cursor, seen by the
    cursor listeners; a driver error raised as ``conn.execute`` raises
    it."""
    dialect = conn.dialect
    dbapi_conn = conn.connection.dbapi_connection
    assert dbapi_conn is not None
    dispatch = conn.dispatch
    cursor = None
    try:
        cursor = dbapi_conn.cursor()
        for listener in dispatch.before_cursor_execute:
            listener(conn, cursor, text, bound, None, several)
        if fetch and not (several or bound) and dialect.driver == "mysqldb":
            rows = _mysqldb_rows(dbapi_conn, text, bound)
            count = len(rows)
        elif fetch and not several and dialect.driver == "pymysql":
            rows = _pymysql_rows(dbapi_conn, cursor, text, bound)
            count = len(rows)
        else:
            if several:
                cursor.executemany(text, bound)
            else:
                cursor.execute(text, bound)
            rows = cursor.fetchall() if fetch else ()
            count = cursor.rowcount
        for listener in dispatch.after_cursor_execute:
            listener(conn, cursor, text, bound, None, several)
        cursor.close()
    except dialect.loaded_dbapi.Error as e:
        raise _driver_error(conn, e, text, bound, cursor) from e
    return rows, count


def _mysqldb_rows(dbapi_conn, text, bound):
    """The rows of ``text`` (bound to none of ``bound``'s values: it has
    none) on a mysqlclient connection itself, as its cursor's ``execute``
    and ``fetchall`` give them (leftover results discarded, the text
    encoded and formatted, the rows stored and fetched as tuples), without
    their dozen Python calls: about two thirds of the client's
    instructions for the catalog's look, which most reads send."""
    while dbapi_conn.next_result() == 0:
        dbapi_conn.discard_result()
    dbapi_conn.query(text.encode(dbapi_conn.encoding) % bound)
    result = dbapi_conn.store_result()
    return result.fetch_row(0) if result is not None else ()


def _pymysql_rows(dbapi_conn, cursor, text, bound):
    """The rows of ``text`` with ``bound`` on a PyMySQL connection itself,
    as its ``cursor``'s ``execute`` and ``fetchall`` give them (the
    values escaped into the text by the cursor, leftover results read
    first by the query, the rows as the connection's result parsed them,
    a tuple of tuples), without the cursor's dozen Python calls around
    the query. Nothing reads the cursor's state after it (the listeners
    are given it as before)."""
    dbapi_conn.query(cursor.mogrify(text, bound))
    rows = dbapi_conn._result.rows
    return rows if rows is not None else []


def _driver_error(conn, error, text, bound, cursor):
    """The driver's ``error`` of ``text`` as ``conn.execute`` raises it
    (SQLAlchemy's wrapper; the connection invalidated if it was lost)."""
    dialect = conn.dialect
    lost = dialect.is_disconnect(error, conn.connection.dbapi_connection, cursor)
    if lost:
        conn.invalidate(error)
    return sa_exc.DBAPIError.instance(
        text,
        bound or None,
        error,
        dialect.loaded_dbapi.Error,
        connection_invalidated=lost,
        dialect=dialect,
    )


@functools.cache
def _insert_values(
    dialect: sa.Dialect, statement: sa.Insert, keys: tuple[str, ...]
) -> tuple[
    tuple[tuple[str, Callable[[], Any]], ...],
    tuple[tuple[str, Callable[..., Any]], ...],
]:
    """Of ``statement`` given the values of ``keys``: the parameters the
    columns' Python defaults fill in (their functions), and those whose
    type makes the value the driver's (their processors)."""
    compiled = statement.compile(dialect=dialect, column_keys=list(keys))
    defaults = []
    for column in compiled.insert_prefetch:
        default = column.default
        assert isinstance(default, sa_schema.CallableColumnDefault), column
        function: Any = default.arg  # takes the (unused) execution context
        defaults.append((column.key, functools.partial(function, None)))
    processors = []
    for name, bind in compiled.binds.items():
        process = bind.type._cached_bind_processor(dialect)
        if process is not None:
            processors.append((name, process))
    return tuple(defaults), tuple(processors)


@functools.cache
def _plain_text(
    dialect: sa.Dialect,
    statement: sa.ClauseElement,
    keys: tuple[str, ...] | None = None,
) -> tuple[str, frozenset[str], frozenset[str], tuple[str, ...], bool, dict[str, Any]]:
    """The text of ``statement`` for ``dialect`` as a %-template of the
    parameters written into it (``literal_execute``) and of the
    placeholders of the expanding ones, the names of each; the names of
    the bound ones (in order where the driver takes them by position),
    whether it does; the values of those the statement gives itself (its
    limits). ``keys``: the values an INSERT is given (one row each)."""
    compiled: Any = statement.compile(
        dialect=dialect, column_keys=keys and list(keys), for_executemany=bool(keys)
    )
    pieces = _WRITTEN.split(str(compiled))
    late = frozenset(pieces[1::2])
    # Expanding parameters bound, not written: their placeholders, one per
    # value, in the driver's style.
    listed = frozenset(n for n in late if not compiled.binds[n].literal_execute)
    if listed and dialect.paramstyle not in ("pyformat", "qmark"):
        raise ValueError("plain_rows cannot bind lists in %s" % dialect.paramstyle)
    template = "".join(
        "%%(%s)s" % piece if i % 2 else piece.replace("%", "%%")
        for i, piece in enumerate(pieces)
    )
    if compiled.positional:
        names = tuple(n for n in compiled.positiontup or () if n not in late - listed)
    else:
        names = tuple(n for n in compiled.params if n not in late - listed)
    fixed = {k: v for k, v in compiled.params.items() if v is not None and k in names}
    return template, late - listed, listed, names, compiled.positional, fixed


# Where a ``literal_execute`` parameter is written into a compiled text.
_WRITTEN = re.compile(r"__\[POSTCOMPILE_(\w+)\]")


def _int_text(value: int | Sequence[int | tuple[int, ...]] | None) -> str:
    """An integer, None or a list of integers (``int_list``'s, for IN:
    an empty one as NULL, which no value is IN) or of tuples of them (for
    a row-value IN) as written in SQL."""
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(int(value))
    return (
        ", ".join(
            [
                "(%s)" % ", ".join([str(int(i)) for i in v])
                if isinstance(v, tuple)
                else str(int(v))
                for v in value
            ]
        )
        or "NULL"
    )

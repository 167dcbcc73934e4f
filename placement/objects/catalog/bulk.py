"""Reading hundreds of thousands of rows as numpy columns in a few
hundred: the database joins each column's values, as text, per chunk of
CHUNK keys (``columns``). A driver pays per row and per value it decodes
(pymysql, in Python: 674,724 allocation rows of six values took 10 s on
a busy 2-core machine, one row a chunk well under a second), and numpy
parses the joined integers at C speed."""

from collections.abc import Sequence

import numpy as np
import sqlalchemy as sa
from sqlalchemy.ext import compiler

# Keys per chunk: the joined text of a chunk of uuids stays near 150 KB,
# well under MySQL's packet size.
CHUNK = 4096
# Keys per statement: one statement over a whole table grouped every row
# at once and ran past the statement time budget (30 s) for 1,700,000
# allocations on a loaded machine; a window is a range of the key's
# index, a few hundred milliseconds.
WINDOW = CHUNK * 16
SEPARATOR = ","


class _Joined(sa.sql.expression.FunctionElement):
    """A column's values in a group, as text joined by SEPARATOR, in the
    same order for every column of the group (on PostgreSQL by the
    arguments after the first, which together are unique). NULL values
    would be skipped: callers give none."""

    type = sa.Text()
    inherit_cache = True
    name = "joined"


@compiler.compiles(_Joined)
def _joined(element, compiler_, **kw):
    # MySQL and SQLite step every aggregate of a group through its rows in
    # one pass, so the columns stay aligned without an ORDER BY (which
    # doubled MariaDB's time).
    value = compiler_.process(list(element.clauses)[0], **kw)
    return "group_concat(%s, '%s')" % (value, SEPARATOR)


@compiler.compiles(_Joined, "mysql")
def _joined_mysql(element, compiler_, **kw):
    value = compiler_.process(list(element.clauses)[0], **kw)
    return "GROUP_CONCAT(CAST(%s AS CHAR) SEPARATOR '%s')" % (value, SEPARATOR)


@compiler.compiles(_Joined, "postgresql")
def _joined_postgresql(element, compiler_, **kw):
    # Ordered: a parallel plan combines partial aggregates.
    value, *order = (compiler_.process(c, **kw) for c in element.clauses)
    return "string_agg(CAST(%s AS TEXT), '%s' ORDER BY %s)" % (
        value,
        SEPARATOR,
        ", ".join(order),
    )


class _Chunk(sa.sql.expression.FunctionElement):
    """A key's chunk number: key divided by CHUNK, in integers."""

    type = sa.BigInteger()
    inherit_cache = True
    name = "chunk"


@compiler.compiles(_Chunk)
def _chunk(element, compiler_, **kw):
    return "%s / %d" % (compiler_.process(element.clauses, **kw), CHUNK)


@compiler.compiles(_Chunk, "mysql")
def _chunk_mysql(element, compiler_, **kw):
    return "%s DIV %d" % (compiler_.process(element.clauses, **kw), CHUNK)


class Seconds(sa.sql.expression.FunctionElement):
    """A DateTime in whole seconds since the epoch (read as UTC, as every
    time this service writes), computed by the database: integers cost
    far less to read than times."""

    type = sa.BigInteger()
    inherit_cache = True
    name = "seconds"


@compiler.compiles(Seconds, "sqlite")
def _seconds_sqlite(element, compiler_, **kw):
    # Only "YYYY-MM-DD HH:MM:SS": strftime would round the fraction.
    return "CAST(strftime('%%s', substr(%s, 1, 19)) AS INTEGER)" % (
        compiler_.process(element.clauses, **kw)
    )


@compiler.compiles(Seconds, "mysql")
def _seconds_mysql(element, compiler_, **kw):
    return "TIMESTAMPDIFF(SECOND, '1970-01-01 00:00:00', %s)" % compiler_.process(
        element.clauses, **kw
    )


@compiler.compiles(Seconds, "postgresql")
def _seconds_postgresql(element, compiler_, **kw):
    return "CAST(FLOOR(EXTRACT(EPOCH FROM %s)) AS BIGINT)" % compiler_.process(
        element.clauses, **kw
    )


def columns(
    conn: sa.Connection,
    source: sa.FromClause,
    key: sa.ColumnElement,
    values: list,
    text: tuple = (),
    unique: tuple = (),
    encoded: tuple = (),
) -> list:
    """The ``values`` (SQL expressions, none NULL) of every row of
    ``source``, each as an int64 array, or as a list of str for the
    positions in ``text``, or as a numpy array of their UTF-8 bytes for
    those also in ``encoded`` (read row by row where a text value holds
    SEPARATOR). ``key`` chunks the rows; where it is not unique,
    ``unique``: columns that make it so (PostgreSQL orders by them)."""
    if conn.dialect.name == "mysql":
        # GROUP_CONCAT's limit is 1 MB on MariaDB, 1 KB on MySQL.
        conn.exec_driver_sql("SET SESSION group_concat_max_len = %d" % (1 << 26))
    query = (
        sa.select(*(_Joined(value, key, *unique) for value in values))
        .select_from(source)
        .group_by(_Chunk(key))
    )
    parts: list[list[str]] = [[] for _ in values]
    start, top = conn.execute(
        sa.select(sa.func.min(key), sa.func.max(key)).select_from(source)
    ).one()
    while start is not None and start <= top:
        end = start + WINDOW
        window = conn.execute(query.where(key >= start, key < end)).all()
        for row in window:
            for part, joined in zip(parts, row):
                part.append(joined.decode() if isinstance(joined, bytes) else joined)
        # Past a window of nothing (ids far apart), to the next key.
        start = end if window else _first(conn, source, key, end)
    found: list = []
    for i, part in enumerate(parts):
        joined = SEPARATOR.join(part)
        if i in encoded:
            found.append(_encoded(joined, len(found[0]) if found else None))
        elif i in text:
            found.append(joined.split(SEPARATOR) if joined else [])
        else:
            found.append(np.fromstring(joined, dtype=np.int64, sep=SEPARATOR))
    if any(len(column) != len(found[0]) for column in found):
        rows = list(zip(*conn.execute(sa.select(*values).select_from(source)))) or [
            () for _ in values
        ]
        found = [
            encode(column)
            if i in encoded
            else list(column)
            if i in text
            else np.array(column, dtype=np.int64)
            for i, column in enumerate(rows)
        ]
    return found


def encode(texts: Sequence[str]) -> np.ndarray:
    """``texts`` as a numpy array of their UTF-8 bytes."""
    return np.array(
        [t.encode("utf-8", "surrogatepass") for t in texts],
        dtype=None if texts else "S36",
    )


def _encoded(joined: str, count: int | None) -> np.ndarray:
    """The values joined in ``joined`` as ``encode`` makes them. Values of
    one width (uuids), ``count`` of them where known, are cut from the
    joined bytes at once rather than one by one (900,000 uuids: 1.4 s
    of a 2-core machine's CPU)."""
    data = joined.encode("utf-8", "surrogatepass")
    width = data.find(SEPARATOR.encode())
    width = len(data) if width < 0 else width
    rows = (len(data) + 1) // (width + 1)
    if data and width and (count is None or rows == count):
        table = np.frombuffer(data + SEPARATOR.encode(), dtype=np.uint8)
        if len(table) == rows * (width + 1):
            table = table.reshape(rows, width + 1)
            separators = table == ord(SEPARATOR)
            if separators[:, width].all() and separators.sum() == rows:
                return np.ascontiguousarray(table[:, :width]).view("S%d" % width)[:, 0]
    return encode(joined.split(SEPARATOR) if joined else [])


def _first(
    conn: sa.Connection, source: sa.FromClause, key: sa.ColumnElement, at: int
) -> int | None:
    """The least ``key`` of ``source`` from ``at`` on (None: none)."""
    return conn.execute(
        sa.select(sa.func.min(key)).select_from(source).where(key >= at)
    ).scalar()

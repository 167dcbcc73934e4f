"""The catalog's write side: what a write transaction changed of what the
catalog keeps, counted in ``catalog_changes`` and logged in
``catalog_log`` just before commit, and the count readers compare with
(``stamp``). See "Catalog changes" and "Provider catalog" in
doc/architecture.md.

The rule "every write that changes what the catalog keeps records it" is
kept here, once. Write paths name what they changed (``record``: which
providers, classes, traits, aggregates), so that workers read again only
that. A watcher sees every INSERT, UPDATE and DELETE of a write
transaction on the catalog's tables; at commit, a table written without a
record of its kind is logged as EVERYTHING (every worker reads its
catalog whole again: slower, never wrong) and reported to
``on_unrecorded``, which the tests make fail.
"""

import functools
import logging
import random
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.compiler import compiles

from placement.db import api as db_api
from placement.db import tables
from placement.db import triggers

LOG = logging.getLogger(__name__)

CATALOG = tables.catalog_changes
CHANGE_LOG = tables.catalog_log

# What a write changed (catalog_log.kind): the ``ref`` provider (its row,
# inventories, traits, aggregates), resource class, trait or aggregate (one
# a provider joined: it may be new), or anything (ref 0: the catalog is
# read again).
PROVIDER, RESOURCE_CLASS, TRAIT, AGGREGATE = (
    triggers.PROVIDER,
    triggers.RESOURCE_CLASS,
    triggers.TRAIT,
    triggers.AGGREGATE,
)
EVERYTHING = 5
# Logged only by the triggers (db/triggers.py), of what the catalog's
# structure does not hold: the usage of provider ``ref`` (an allocation
# row of it written), the consumer ``uuid`` (its row, or one of its
# allocations, written; ref 0), provider ``ref``'s generation (only).
USAGE, CONSUMER, GENERATION = triggers.USAGE, triggers.CONSUMER, triggers.GENERATION
# Kinds that change nothing of the structure: a catalog following a log of
# only these advances its counts and keeps everything derived from it.
UNSTRUCTURED = frozenset((USAGE, CONSUMER, GENERATION))
# More changes than this in one transaction are logged as EVERYTHING.
MAX_LOGGED = 100
# Rows kept per shard: a worker that fell further behind reads its catalog
# again. A writer prunes its shard's old rows one time in PRUNE_EVERY.
LOG_KEPT = 1000
PRUNE_EVERY = 64

# The catalog's tables and the kind of change a write to each must record.
KIND_OF_TABLE = {
    tables.resource_providers.name: PROVIDER,
    tables.inventories.name: PROVIDER,
    tables.resource_provider_traits.name: PROVIDER,
    tables.resource_provider_aggregates.name: PROVIDER,
    tables.resource_classes.name: RESOURCE_CLASS,
    tables.traits.name: TRAIT,
    tables.placement_aggregates.name: AGGREGATE,
}
# Columns the catalog does not keep: an UPDATE of only these (a generation
# swap) changes nothing of it.
UNKEPT_COLUMNS = {
    tables.resource_providers.name: frozenset(("generation", "updated_at")),
}

# The write transaction's notes (db_api.write_notes) this module keeps.
_RECORDED = "catalog_recorded"  # {(kind, ref)}
_WRITTEN = "catalog_written"  # {table name}


def record(conn: sa.Connection, kind: int, refs: Iterable[int] = (0,)) -> None:
    """Note that ``conn``'s write transaction changed the ``refs`` (ids) of
    ``kind``: logged in ``catalog_log`` just before commit, which tells
    every worker what of its cached catalog is out of date."""
    notes = db_api.write_notes(conn)
    assert notes is not None, "catalog changes are recorded in db.writer()"
    recorded = notes.get(_RECORDED)
    if recorded is None:
        recorded = notes[_RECORDED] = set()
    recorded.update((kind, ref) for ref in refs)


def _report(tables_: set[str]) -> None:
    LOG.error(
        "a write to %s recorded no catalog change: logged as EVERYTHING",
        ", ".join(sorted(tables_)),
    )


# Called with the tables a write changed without recording it (after it is
# logged as EVERYTHING). The tests replace it with one that fails.
on_unrecorded: Callable[[set[str]], None] = _report


@event.listens_for(sa.engine.Engine, "after_cursor_execute")
def _watch(conn, cursor, statement, parameters, context, executemany):
    """Note which of the catalog's tables a write transaction wrote (a
    statement without a context is a read, ``db_api.plain_rows``, or
    one ``db_api.at_commit`` held: ``_watch_held``)."""
    if context is None:
        return
    if not (context.isinsert or context.isupdate or context.isdelete):
        return
    _note_written(conn, context.compiled, cursor.rowcount)


@db_api.watch_held
def _watch_held(conn: sa.Connection, compiled: Any) -> None:
    """``_watch`` for a statement held for the COMMIT (its row count is
    not known: as a held statement's through ``conn.execute``)."""
    _note_written(conn, compiled, -1)


def _note_written(conn: sa.Connection, compiled: Any, rowcount: int) -> None:
    notes = db_api.write_notes(conn)
    if notes is None or compiled is None:
        return
    dml = compiled.statement
    name = getattr(getattr(dml, "table", None), "name", None)
    if name not in KIND_OF_TABLE or rowcount == 0:
        return
    unkept = UNKEPT_COLUMNS.get(name)
    if unkept is not None and compiled.isupdate:
        values = getattr(dml, "_values", None)  # None: bound at execution
        if values and {getattr(c, "name", c) for c in values} <= unkept:
            return
    written = notes.get(_WRITTEN)
    if written is None:
        written = notes[_WRITTEN] = set()
    written.add(name)


@db_api.before_commit
def _log_at_commit(conn: sa.Connection, notes: dict[str, Any]) -> None:
    recorded = notes.get(_RECORDED, set())
    kinds = {kind for kind, _ in recorded}
    unrecorded = {
        name
        for name in notes.get(_WRITTEN, ())
        if KIND_OF_TABLE[name] not in kinds and EVERYTHING not in kinds
    }
    if unrecorded:
        recorded = recorded | {(EVERYTHING, 0)}
    if recorded:
        _log(conn, recorded)
    if unrecorded:
        on_unrecorded(unrecorded)


def _log(conn: sa.Connection, changes: set) -> None:
    # Last statements before commit (sent with it on MySQL): the shard's
    # row lock is held briefly and its holder waits for nothing else, so
    # it cannot join a deadlock. The lock (on Galera: certification of the
    # same row) orders a shard's writers, so its numbers commit in order
    # and without gaps. None of them is looked at: a missing shard row is
    # made again by the increment (its count starts again at 1: readers
    # see it go back and read their catalog whole), and its new numbers
    # overwrite the old ones' rows (items an old number had beyond the new
    # one's stay: a reader re-reads a few more things, never too few).
    # The shard is the connection's (db/triggers.py), the one the triggers
    # count its rows in: a transaction holds one shard row, never two.
    statements = _STATEMENTS[conn.dialect.name]
    db_api.at_commit(conn, statements.bump, {"token": new_token()})
    if len(changes) > MAX_LOGGED:
        changes = {(EVERYTHING, 0)}
    params: dict[str, int] = {}
    for item, (kind, ref) in enumerate(sorted(changes)):
        params["kind_%d" % item] = kind
        params["ref_%d" % item] = ref
    db_api.at_commit(conn, statements.log_rows(len(changes)), params)
    if random.randrange(PRUNE_EVERY) == 0:
        db_api.at_commit(conn, statements.prune, {"kept": LOG_KEPT})


def prune(conn: sa.Connection, since: dict[int, int]) -> dict[int, int]:
    """Delete the log rows of every shard older than its last LOG_KEPT
    numbers (where the triggers write the log, this service's own writes,
    which prune their shard now and then, may be few), in one statement
    over ranges of the key: only the shards whose counts moved since the
    counts ``since`` (those of the last prune). The counts it pruned at."""
    now = counts(conn)
    ranges = [
        sa.and_(CHANGE_LOG.c.shard == shard, CHANGE_LOG.c.seq <= count - LOG_KEPT)
        for shard, count in now.items()
        if count > LOG_KEPT and count != since.get(shard)
    ]
    if ranges:
        conn.execute(CHANGE_LOG.delete().where(sa.or_(*ranges)))
    return now


class _Statements:
    """The log's statements in one dialect (``upsert``: its INSERT
    construct; ``on_conflict(insert, keys, values)``: the INSERT updating
    the row it finds under ``keys`` with ``values(new row)`` instead).
    Built once: building a statement and its cache key took more time than
    running it."""

    def __init__(self, dialect, upsert, on_conflict):
        self.shard = sa.literal_column(triggers.shard_of(dialect), sa.Integer)
        # inline: no RETURNING of a key given as SQL (nothing is read).
        insert = (
            upsert(CATALOG)
            .values(
                shard=self.shard,
                changes=1,
                token=sa.bindparam("token", type_=sa.Integer),
            )
            .inline()
        )
        self.bump = on_conflict(
            insert,
            [CATALOG.c.shard],
            lambda new: {"changes": CATALOG.c.changes + 1, "token": new.token},
        )
        self.prune = CHANGE_LOG.delete().where(
            CHANGE_LOG.c.shard == self.shard,
            CHANGE_LOG.c.seq
            <= sa.select(CATALOG.c.changes)
            .where(CATALOG.c.shard == self.shard)
            .scalar_subquery()
            - sa.bindparam("kept", type_=sa.BigInteger),
        )
        self._upsert, self._on_conflict = upsert, on_conflict
        self.log_rows = functools.cache(self._log_rows)

    def _log_rows(self, count: int) -> sa.Insert:
        """The INSERT of ``count`` log rows (kind_<i>, ref_<i>) into the
        connection's shard: one statement, the rows taking the shard's new
        count from its row, overwriting any left under that number."""
        rows = [
            sa.select(
                CATALOG.c.shard,
                CATALOG.c.changes,
                sa.literal(item, sa.Integer),
                sa.bindparam("kind_%d" % item, type_=sa.SmallInteger),
                sa.bindparam("ref_%d" % item, type_=sa.Integer),
                CATALOG.c.token,
            ).where(CATALOG.c.shard == self.shard)
            for item in range(count)
        ]
        insert = self._upsert(CHANGE_LOG).from_select(
            ["shard", "seq", "item", "kind", "ref", "token"],
            rows[0] if count == 1 else sa.union_all(*rows),
        )
        keys = [CHANGE_LOG.c.shard, CHANGE_LOG.c.seq, CHANGE_LOG.c.item]
        return self._on_conflict(
            insert,
            keys,
            lambda new: {
                "kind": new.kind,
                "ref": new.ref,
                "uuid": new.uuid,
                "token": new.token,
            },
        )


def _on_duplicate_key(insert, keys, values):
    return insert.on_duplicate_key_update(values(insert.inserted))


def _on_conflict(insert, keys, values):
    return insert.on_conflict_do_update(
        index_elements=keys, set_=values(insert.excluded)
    )


_STATEMENTS = {
    "mysql": _Statements("mysql", mysql.insert, _on_duplicate_key),
    "postgresql": _Statements("postgresql", postgresql.insert, _on_conflict),
    "sqlite": _Statements("sqlite", sqlite.insert, _on_conflict),
}


# Tokens are below this (a sum of CATALOG_SHARDS of them fits 64 bits).
TOKENS = 2**31


def new_token() -> int:
    """The token a new count of a shard is given (catalog_changes.token)."""
    return random.randrange(TOKENS)


# The stamp: the number of catalog changes committed so far (only grows
# but for a restore), and the identity of that history: the sum of the
# shards' tokens, which a restore followed by as many new writes cannot
# bring back (but by a chance of one in 2**31). Built once: every request
# that consults the catalog reads them, in one statement.
COUNT = sa.select(sa.func.coalesce(sa.func.sum(CATALOG.c.changes), 0))
# SUM leaves NULL tokens out (they count as 0), and NULL (no token, no
# shard) is 0. The look's statement has no COALESCE: it cost 15 us more on
# MariaDB (tools/bench/alloc_reads.py).
TOKEN_SUM = sa.select(sa.func.coalesce(sa.func.sum(CATALOG.c.token), 0))


class _Shards(sa.sql.functions.FunctionElement):
    """Every shard's ``shard:count:token`` (token empty when NULL), joined
    by commas in no particular order: the look's third value."""

    type = sa.String()
    inherit_cache = True
    name = "shards"


_ITEM = "catalog_changes.shard || ':' || catalog_changes.changes || ':' || "


@compiles(_Shards, "mysql")
def _shards_mysql(element, compiler, **kw):
    return (
        "GROUP_CONCAT(catalog_changes.shard, ':', catalog_changes.changes,"
        " ':', IFNULL(catalog_changes.token, ''))"
    )


@compiles(_Shards, "postgresql")
def _shards_postgresql(element, compiler, **kw):
    return "string_agg(%s coalesce(catalog_changes.token::text, ''), ',')" % _ITEM


@compiles(_Shards, "sqlite")
def _shards_sqlite(element, compiler, **kw):
    return "group_concat(%s ifnull(catalog_changes.token, ''))" % _ITEM


STAMP = sa.select(sa.func.sum(CATALOG.c.changes), sa.func.sum(CATALOG.c.token))
# The same with every shard's count and token: a catch-up's counts with
# no statement of their own (``marks``), for 14 us more CPU (PyMySQL; 8
# us with mysqlclient) and 30 us more of MariaDB's: read where a catch-up
# is likely (tools/bench/README, "the shards' counts in the look").
STAMP_SHARDS = STAMP.add_columns(_Shards())


class Look(NamedTuple):
    """What the look reads in one statement: the stamp, the token sum, and
    every shard's count and token as ``text`` (None where the caller read
    only the sums: ``marks`` reads them then, ``shards``)."""

    stamp: int
    tokens: int | None
    text: str | None = None


def look(conn: sa.Connection, shards: bool = False) -> Look:
    """The ``Look`` ``conn`` reads, in one statement, on the driver's
    cursor directly (``db_api.plain_rows``: most reads send it); with the
    shards' text when ``shards`` (``STAMP_SHARDS``)."""
    if not shards:
        ((count, tokens),) = db_api.plain_rows(conn, STAMP)
        return Look(int(count or 0), int(tokens or 0))
    ((count, tokens, text),) = db_api.plain_rows(conn, STAMP_SHARDS)
    return Look(int(count or 0), int(tokens or 0), text)


def stamp(conn: sa.Connection) -> int:
    """The stamp ``conn`` reads."""
    return look(conn).stamp


def counts(conn: sa.Connection) -> dict[int, int]:
    """{shard: count} of catalog changes."""
    return marks(conn)[0]


MARKS = sa.select(CATALOG.c.shard, CATALOG.c.changes, CATALOG.c.token)


def marks(conn: sa.Connection) -> tuple[dict[int, int], dict[int, int | None]]:
    """({shard: count}, {shard: token}) of catalog changes, in one statement
    (on the driver's cursor: every catch-up of a worker reads them)."""
    rows = db_api.plain_rows(conn, MARKS)
    return {r[0]: r[1] for r in rows}, {r[0]: r[2] for r in rows}


def shards(
    seen: Look | None,
) -> tuple[dict[int, int], dict[int, int | None]] | None:
    """``marks``' answer as the look ``seen`` read it, with no statement;
    None when it has no text, or one that does not add up to its sums (a
    server's GROUP_CONCAT cut short at ``group_concat_max_len``):
    ``marks`` reads them then."""
    if seen is None or not seen.text:
        return None
    seqs: dict[int, int] = {}
    tokens: dict[int, int | None] = {}
    try:
        for item in seen.text.split(","):
            shard, count, token = item.split(":")
            seqs[int(shard)] = int(count)
            tokens[int(shard)] = int(token) if token else None
    except ValueError:  # cut short within an item
        return None
    if sum(seqs.values()) != seen.stamp or (
        sum(t or 0 for t in tokens.values()) != seen.tokens
    ):
        return None
    return seqs, tokens

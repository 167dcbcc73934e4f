"""The database triggers that log every row change of the catalog's tables
in ``catalog_log``, whoever writes it (this service, the reference
placement beside it, an operator's SQL, a tool): per row, one count added
to a shard of ``catalog_changes`` and one log number under the shard's new
count, whose items say what changed (the kinds of
``objects/catalog/changes.py``, kept in step by a test). On MySQL,
MariaDB and SQLite they fire per row; on PostgreSQL once per statement,
counting all its rows in one update of the shard (``_statement_body``).
See "Change log" and "Writes by other writers" in doc/architecture.md.

A connection writes one shard (MySQL: its CONNECTION_ID(), PostgreSQL: its
backend pid, modulo the shards; SQLite has one writer at a time: shard 0),
the one this service's own log statement writes too, so a transaction
never holds two shard rows (two writers holding one each and wanting the
other's would deadlock).

``create`` returns False, having made none, where the database refuses
them: a user without the TRIGGER privilege (MySQL, MariaDB), without
CREATE on the schema or ownership of the tables (PostgreSQL), or MySQL
binary logging without log_bin_trust_function_creators for a user without
SUPER. The catalog then relies on this service's own log and the periodic
comparison (the fallback, ``refresh.logged_by_triggers``).
"""

import logging
from collections.abc import Callable

import sqlalchemy as sa

from placement.db import tables

LOG = logging.getLogger(__name__)

PREFIX = "catalog_log_"
SHARDS = tables.CATALOG_SHARDS

# The kinds of change (catalog_log.kind; objects/catalog/changes.py).
PROVIDER, RESOURCE_CLASS, TRAIT, AGGREGATE = 1, 2, 3, 4
USAGE, CONSUMER, GENERATION = 6, 7, 8

# Per table, what a row names: (kind, ref column or None (0), uuid column
# or None). An UPDATE logs the new row's and, where they differ, the old
# one's.
_PROVIDER_OF_ROW = ((PROVIDER, "resource_provider_id", None),)
LOGGED = {
    "resource_providers": ((PROVIDER, "id", None),),
    "inventories": _PROVIDER_OF_ROW,
    "resource_provider_traits": _PROVIDER_OF_ROW,
    "resource_provider_aggregates": _PROVIDER_OF_ROW,
    "resource_classes": ((RESOURCE_CLASS, "id", None),),
    "traits": ((TRAIT, "id", None),),
    "placement_aggregates": ((AGGREGATE, "id", None),),
    "allocations": (
        (USAGE, "resource_provider_id", None),
        (CONSUMER, None, "consumer_id"),
    ),
    "consumers": ((CONSUMER, None, "uuid"),),
}
# A provider UPDATE changing none of these (only its generation or
# updated_at, which the catalog does not keep) is logged as GENERATION.
KEPT_PROVIDER_COLUMNS = ("id", "uuid", "name", "root_provider_id", "parent_provider_id")
EVENTS = ("insert", "update", "delete")


# The triggers' names, one per table and event.
def _name(table: str, event: str) -> str:
    return "%s%s_%s" % (PREFIX, table[:24], event)


NAMES = frozenset(_name(table, event) for table in LOGGED for event in EVENTS)


class _Dialect:
    """What differs per database in a trigger's body."""

    def __init__(
        self,
        shard,
        distinct,
        no_table,
        bump,
        token,
        token_update,
        log_insert,
        log_conflict,
    ):
        self.shard = shard  # this connection's shard
        self.distinct = distinct  # "%s differs from %s", NULL-safe
        self.no_table = no_table  # FROM of a one-row SELECT with a WHERE
        # Statements adding one to the shard ({tc}, {tv}, {tu}: where the
        # token column, its new value and its update go).
        self.bump = bump
        self.token = token  # a new token's SQL, where the INSERT gives it
        self.token_update = token_update  # the bump's "SET token" part
        self.log_insert = log_insert
        self.log_conflict = log_conflict


_MYSQL = _Dialect(
    shard="MOD(CONNECTION_ID(), %d)" % SHARDS,
    distinct="NOT (%s <=> %s)",
    no_table=" FROM DUAL",
    bump=(
        "INSERT INTO catalog_changes (shard, changes{tc})"
        " VALUES ({shard}, 1{tv})"
        " ON DUPLICATE KEY UPDATE changes = changes + 1{tu}",
    ),
    token="FLOOR(RAND() * 2147483648)",
    token_update=", token = VALUES(token)",
    log_insert="INSERT INTO catalog_log",
    log_conflict=(
        " ON DUPLICATE KEY UPDATE kind = VALUES(kind), ref = VALUES(ref),"
        " uuid = VALUES(uuid){tu}"
    ),
)
_POSTGRESQL = _Dialect(
    shard="mod(pg_backend_pid(), %d)" % SHARDS,
    distinct="%s IS DISTINCT FROM %s",
    no_table="",
    bump=(
        "INSERT INTO catalog_changes (shard, changes{tc})"
        " VALUES ({shard}, 1{tv}) ON CONFLICT (shard) DO UPDATE"
        " SET changes = catalog_changes.changes + 1{tu}",
    ),
    token="floor(random() * 2147483648)::integer",
    token_update=", token = EXCLUDED.token",
    log_insert="INSERT INTO catalog_log",
    log_conflict=(
        " ON CONFLICT (shard, seq, item) DO UPDATE SET kind = EXCLUDED.kind,"
        " ref = EXCLUDED.ref, uuid = EXCLUDED.uuid{tu}"
    ),
)
_SQLITE = _Dialect(
    shard="0",
    distinct="%s IS NOT %s",
    no_table="",
    bump=(
        "INSERT OR IGNORE INTO catalog_changes (shard, changes) VALUES ({shard}, 0)",
        "UPDATE catalog_changes SET changes = changes + 1{tu} WHERE shard = {shard}",
    ),
    # The log rows read it back from the shard's row (as on the others).
    token="",
    token_update=", token = random() & 2147483647",
    log_insert="INSERT OR REPLACE INTO catalog_log",
    log_conflict="",
)
DIALECTS = {"mysql": _MYSQL, "postgresql": _POSTGRESQL, "sqlite": _SQLITE}


def shard_of(dialect: str) -> str:
    """The SQL expression of the shard a connection's writes count in."""
    return DIALECTS[dialect].shard


def _entries(
    d: _Dialect,
    table: str,
    event: str,
    column: Callable[[str, str], str] | None = None,
    here: Callable[[str], str] | None = None,
) -> list[str]:
    """The SELECTs of the log items one row change writes. ``column(row,
    name)``: the SQL of a column of the row "NEW" or "OLD" (by default
    ``NEW.name``); ``here(row)``: the condition that the row is there
    (an UPDATE's rows paired by key, ``_statement_body``), or None."""
    if column is None:
        column = "{}.{}".format
    rows = {"insert": ("NEW",), "update": ("NEW", "OLD"), "delete": ("OLD",)}[event]
    selects = []
    for row in rows:
        for kind, ref, uuid in LOGGED[table]:
            kind_sql = str(kind)
            if table == "resource_providers" and event == "update":
                kept_changed = " OR ".join(
                    d.distinct % (column("OLD", c), column("NEW", c))
                    for c in KEPT_PROVIDER_COLUMNS
                )
                kind_sql = "CASE WHEN %s THEN %d ELSE %d END" % (
                    kept_changed,
                    PROVIDER,
                    GENERATION,
                )
            ref_sql = column(row, ref) if ref else "0"
            uuid_sql = column(row, uuid) if uuid else "NULL"
            conditions = [here(row)] if here and event == "update" else []
            if row == "OLD" and event == "update":
                name = ref or uuid or ""
                conditions.append(
                    d.distinct % (column("OLD", name), column("NEW", name))
                )
            where = "%s WHERE %s" % (d.no_table, " AND ".join(conditions))
            selects.append((kind_sql, ref_sql, uuid_sql, where if conditions else ""))
    return [
        "SELECT %d AS e_item, %s AS e_kind, %s AS e_ref, CAST(%s AS CHAR(36))"
        " AS e_uuid%s" % (item, kind_sql, ref_sql, uuid_sql, where)
        for item, (kind_sql, ref_sql, uuid_sql, where) in enumerate(selects)
    ]


def _body(d: _Dialect, table: str, event: str, tokens: bool) -> list[str]:
    """The statements of one trigger: the shard's count (with a new token),
    then the log items under it with its token (overwriting any left
    under that number, as this service's own log statement does).
    ``tokens`` False: those before the tokens (the downgrade's)."""
    shard = d.shard
    token = {
        "tc": ", token" if tokens and d.token else "",
        "tv": ", " + d.token if tokens and d.token else "",
        "tu": d.token_update if tokens else "",
    }
    log = (
        "%s (shard, seq, item, kind, ref, uuid%s)"
        " SELECT c.shard, c.changes, e.e_item, e.e_kind, e.e_ref, e.e_uuid%s"
        " FROM catalog_changes c, (%s) e WHERE c.shard = %s%s"
        % (
            d.log_insert,
            ", token" if tokens else "",
            ", c.token" if tokens else "",
            " UNION ALL ".join(_entries(d, table, event)),
            shard,
            d.log_conflict.format(tu=token["tu"]),
        )
    )
    return [s.format(shard=shard, **token) for s in d.bump] + [log]


# A statement trigger's transition tables, per event.
_TRANSITIONS = {
    "insert": "NEW TABLE AS new_rows",
    "update": "NEW TABLE AS new_rows OLD TABLE AS old_rows",
    "delete": "OLD TABLE AS old_rows",
}


def _statement_body(table: str, event: str) -> str:
    """The body of PostgreSQL's trigger of one statement: the log items
    ``_body`` writes for each row, from the statement's transition tables
    (``new_rows``, ``old_rows``; an UPDATE's paired by the table's key,
    a row whose key changed being logged as its old and its new row), the
    rows numbered past the shard's count, which one statement adds them
    all to with one token. A statement changing no row logs nothing, as
    none of the per-row triggers fires then. One update of the shard's
    row per statement, where per row each update added a version of it
    that the next one's look walked past: time quadratic in the rows."""
    d = _POSTGRESQL
    key = [c.name for c in tables.metadata.tables[table].primary_key.columns]
    names = {n for _, ref, uuid in LOGGED[table] for n in (ref, uuid) if n}
    if table == "resource_providers":
        names |= set(KEPT_PROVIDER_COLUMNS)
    sides = {"insert": ("NEW",), "update": ("NEW", "OLD"), "delete": ("OLD",)}[event]
    source = {
        "insert": "new_rows n",
        "delete": "old_rows o",
        "update": "new_rows n FULL JOIN old_rows o ON %s"
        % " AND ".join("n.%s = o.%s" % (c, c) for c in key),
    }[event]
    picked = ", ".join(
        "%s.%s AS %s_%s" % (side[0].lower(), c, side[0].lower(), c)
        for side in sides
        for c in sorted(names | set(key))
    )
    entries = _entries(
        d,
        table,
        event,
        column=lambda row, name: "r.%s_%s" % (row[0].lower(), name),
        here=lambda row: "r.%s_%s IS NOT NULL" % (row[0].lower(), key[0]),
    )
    return (
        "DECLARE changed bigint; counted bigint; given integer;"
        " BEGIN SELECT count(*) INTO changed FROM {source};"
        " IF changed = 0 THEN RETURN NULL; END IF;"
        " INSERT INTO catalog_changes (shard, changes, token)"
        " VALUES ({shard}, changed, {token}) ON CONFLICT (shard) DO UPDATE"
        " SET changes = catalog_changes.changes + EXCLUDED.changes,"
        " token = EXCLUDED.token RETURNING changes, token INTO counted, given;"
        " INSERT INTO catalog_log (shard, seq, item, kind, ref, uuid, token)"
        " SELECT {shard}, counted - changed + r.r_n, e.e_item, e.e_kind,"
        " e.e_ref, e.e_uuid, given"
        " FROM (SELECT row_number() OVER () AS r_n, {picked} FROM {source}) r"
        " CROSS JOIN LATERAL ({entries}) e{conflict};"
        " RETURN NULL; END"
    ).format(
        source=source,
        shard=d.shard,
        token=d.token,
        picked=picked,
        entries=" UNION ALL ".join(entries),
        conflict=d.log_conflict.format(tu=d.token_update),
    )


def statements(dialect: str, tokens: bool = True, per_row: bool = False) -> list[str]:
    """The DDL creating every trigger on ``dialect``: on PostgreSQL one
    per statement, elsewhere one per row (``per_row``: on PostgreSQL too,
    as before revision b8e3f1a6c9d4, for its downgrade; ``tokens`` False,
    per row without the tokens: as before revision a7c2e9f4b1d3)."""
    d = DIALECTS[dialect]
    per_row = per_row or not tokens
    made = []
    for table in LOGGED:
        for event in EVENTS:
            name = _name(table, event)
            when = "AFTER %s ON %s" % (event.upper(), table)
            if dialect == "postgresql" and not per_row:
                made.append(
                    "CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$ %s $$"
                    % (name, _statement_body(table, event))
                )
                made.append(
                    "CREATE TRIGGER %s %s REFERENCING %s FOR EACH STATEMENT"
                    " EXECUTE FUNCTION %s()" % (name, when, _TRANSITIONS[event], name)
                )
                continue
            body = "; ".join(_body(d, table, event, tokens))
            if dialect == "postgresql":
                made.append(
                    "CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$"
                    " BEGIN %s; RETURN NULL; END $$" % (name, body)
                )
                made.append(
                    "CREATE TRIGGER %s %s FOR EACH ROW EXECUTE FUNCTION %s()"
                    % (name, when, name)
                )
            else:
                made.append(
                    "CREATE TRIGGER %s %s FOR EACH ROW BEGIN %s; END"
                    % (name, when, body)
                )
    return made


def create(conn: sa.Connection, tokens: bool = True, per_row: bool = False) -> bool:
    """Create the triggers (dropping any of an older definition first;
    ``tokens``, ``per_row``: see ``statements``): whether the database
    let us. Where it refuses, logs a warning, leaves
    none behind and returns False (the fallback)."""
    dialect = conn.dialect.name
    drop(conn)
    savepoint = conn.begin_nested() if dialect == "postgresql" else None
    try:
        for statement in statements(dialect, tokens, per_row):
            conn.exec_driver_sql(statement)
    except sa.exc.DBAPIError as e:
        if savepoint is not None:
            savepoint.rollback()
        else:
            drop(conn)
        LOG.warning(
            "the catalog's change-log triggers could not be created (%s):"
            " other writers' changes are found by the periodic comparison"
            " instead (the fallback). Grant the TRIGGER privilege (MySQL:"
            " with binary logging, also SUPER or"
            " log_bin_trust_function_creators=1) and run"
            " `placement-manage db sync` again to have them.",
            str(e.orig).splitlines()[0] if e.orig is not None else e,
        )
        return False
    if savepoint is not None:
        savepoint.commit()
    return True


def drop(conn: sa.Connection) -> None:
    """Drop the triggers (those there are)."""
    dialect = conn.dialect.name
    for name in sorted(NAMES & present(conn)):
        if dialect == "postgresql":
            conn.exec_driver_sql("DROP FUNCTION IF EXISTS %s() CASCADE" % name)
        else:
            conn.exec_driver_sql("DROP TRIGGER IF EXISTS %s" % name)


def present(conn: sa.Connection) -> set[str]:
    """The names of this module's triggers the database has."""
    dialect = conn.dialect.name
    if dialect == "mysql":
        query = (
            "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS"
            " WHERE TRIGGER_SCHEMA = DATABASE()"
        )
    elif dialect == "postgresql":
        query = (
            "SELECT tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
            " WHERE c.relnamespace = current_schema()::regnamespace"
            " AND NOT t.tgisinternal"
        )
    else:
        query = "SELECT name FROM sqlite_master WHERE type = 'trigger'"
    found = {row[0] for row in conn.exec_driver_sql(query)}
    return {name for name in found if name.startswith(PREFIX)}


def installed(conn: sa.Connection) -> bool:
    """Whether every trigger is there (one missing: the log misses that
    table's changes, and the catalog takes the fallback)."""
    return NAMES <= present(conn)

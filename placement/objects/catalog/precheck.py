"""A cheap look at whether the catalog's tables can have changed since the
last comparison with the database's fingerprint (``fingerprint.py``),
taken before that comparison's snapshot: when they cannot have, by any
writer, the comparison is not needed and its statement, which reads every
row of those tables, is not run. See "Writes by other writers" in
doc/architecture.md.

A look is what marks each table's changes, plus ``since``: a time that
no change committed after the look (so after the snapshot that follows
it) is marked before. The tables are unchanged since an earlier look
when the marks are the same and all of them are older than its
``since``. The second test is needed because a mark has a coarse clock
and may stay the same through a second change.

- MariaDB (not in a Galera cluster): from information_schema, per table
  InnoDB's table id (new on TRUNCATE, a drop and create, a rename or a
  rebuild), CREATE_TIME and UPDATE_TIME. InnoDB sets UPDATE_TIME, in
  whole seconds, to the start of the transaction that commits a change,
  which may be long before the commit: ``since`` is the start of the
  oldest transaction open at the look (INNODB_TRX), or the look's own
  time if none is older. Both InnoDB views need the PROCESS privilege;
  without it there is no look. MySQL caches these columns: no look.
  Nor on a Galera node: writes applied from other nodes do mark the
  tables, but the bound is untested against the cluster's appliers.
On MariaDB a look tells the tables apart (``changed_since``): a
comparison then re-reads only the tables whose marks moved (under a
stream of claims, which bump providers' generations, the providers but
not their inventories, traits and aggregates).

- SQLite: the database file and its WAL, by os.stat (device, inode,
  size, mtime and ctime in nanoseconds): every commit writes one of
  them, which sets its ctime to the kernel's clock, and nothing sets it
  back (a restore that copies old mtimes does not).
- PostgreSQL: no look (None). Its table statistics are flushed late, so
  they cannot say "unchanged" in time; the fingerprint runs every time.
"""

import dataclasses
import os
import time
import weakref
from typing import Any

import sqlalchemy as sa

from placement.db import api as db_api

TABLES = (
    "resource_providers",
    "inventories",
    "resource_provider_traits",
    "resource_provider_aggregates",
    "resource_classes",
    "traits",
)
# How far the kernel's clock for file times may lag time.time_ns(): a
# tick of its coarse clock, 10 ms at most; 1 s leaves room.
FILE_CLOCK_SLACK_NS = 1_000_000_000
# MariaDB's error when the user lacks PROCESS for the InnoDB views.
ACCESS_DENIED = 1227

_MARIADB_LOOK = sa.text(
    "SET STATEMENT time_zone = '+00:00' FOR"
    " SELECT t.TABLE_NAME, s.TABLE_ID, UNIX_TIMESTAMP(t.CREATE_TIME),"
    " UNIX_TIMESTAMP(t.UPDATE_TIME), UNIX_TIMESTAMP(NOW()),"
    " UNIX_TIMESTAMP((SELECT MIN(trx_started)"
    " FROM information_schema.INNODB_TRX)), @@wsrep_on"
    " FROM information_schema.TABLES t"
    " LEFT JOIN information_schema.INNODB_SYS_TABLES s"
    " ON s.NAME = CONCAT(t.TABLE_SCHEMA, '/', t.TABLE_NAME)"
    " WHERE t.TABLE_SCHEMA = DATABASE() AND t.TABLE_NAME IN (%s)"
    % ", ".join("'%s'" % name for name in TABLES)
)


@dataclasses.dataclass(frozen=True)
class Look:
    marks: tuple[Any, ...]
    # The marks' times, on the clock of ``since``.
    times: tuple[int, ...]
    since: int

    # Per table (TABLES' order), its marks and times, where a look can
    # tell tables apart (MariaDB); None where it cannot (SQLite's files).
    per_table: tuple | None = None

    def unchanged_since(self, before: "Look") -> bool:
        """Whether no change of the tables committed between ``before``'s
        snapshot (the one that followed it) and this look."""
        return self.marks == before.marks and all(t < before.since for t in self.times)

    def changed_since(self, before: "Look") -> set[str]:
        """The tables a change of which may have committed between
        ``before``'s snapshot and this look (every one, where a look
        cannot tell tables apart)."""
        if self.unchanged_since(before):
            return set()
        if self.per_table is None or before.per_table is None:
            return set(TABLES)
        return {
            name
            for name, (mark, times), (old, _) in zip(
                TABLES, self.per_table, before.per_table
            )
            if mark != old or any(t >= before.since for t in times)
        }


def look(db: db_api.Database) -> Look | None:
    """A look at ``db``'s catalog tables, or None where there is no sound
    one (then the fingerprint is compared every time)."""
    if db.dialect == "sqlite":
        return _sqlite_look(db.engine.url.database)
    if db.dialect == "mysql" and getattr(db.engine.dialect, "is_mariadb", False):
        return _mariadb_look(db.engine)
    return None


# Engines whose server can give no look for as long as they live (no
# PROCESS privilege, a Galera node): their comparisons do not ask again.
_NEVER: "weakref.WeakSet[sa.Engine]" = weakref.WeakSet()


def _mariadb_look(engine: sa.Engine) -> Look | None:
    if engine in _NEVER:
        return None
    try:
        with engine.connect() as conn:
            rows = conn.execute(_MARIADB_LOOK).all()
    except sa.exc.DBAPIError as e:
        if e.orig is not None and e.orig.args[:1] == (ACCESS_DENIED,):
            _NEVER.add(engine)
            return None
        raise
    if len(rows) != len(TABLES) or any(row[1] is None for row in rows):
        return None  # a table missing, or not InnoDB
    now, oldest, wsrep = rows[0][4], rows[0][5], rows[0][6]
    if wsrep:
        _NEVER.add(engine)
        return None
    marks = tuple(sorted(tuple(row[:4]) for row in rows))
    times = tuple(int(t) for row in rows for t in row[2:4] if t is not None)
    since = int(now) if oldest is None else min(int(now), int(oldest))
    by_name = {row[0]: row for row in rows}
    per_table = tuple(
        (
            tuple(by_name[name][:4]),
            tuple(int(t) for t in by_name[name][2:4] if t is not None),
        )
        for name in TABLES
    )
    return Look(marks, times, since, per_table)


def _sqlite_look(path: str | None) -> Look | None:
    if not path or path == ":memory:":
        return None
    since = time.time_ns() - FILE_CLOCK_SLACK_NS
    marks: list[Any] = []
    for name in (path, path + "-wal"):
        try:
            st = os.stat(name)
        except FileNotFoundError:
            if name == path:
                return None  # not a file of this name (a URI, memory)
            marks.append(None)
            continue
        marks.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    times = tuple(mark[4] for mark in marks if mark is not None)
    return Look(tuple(marks), times, since)

"""The database layer's front: what the objects layer uses, from the
modules that do one job each (``engine``: engines and dialect set-up;
``connect``: the URL and first-connection problems; ``transaction``: the
Database and its transactions; ``held``: statements sent with the COMMIT;
``held_text``: their text made without a SQLAlchemy execution;
``retry``: deadlock retries; ``remembered``: ids kept between writes;
``statements``: dialect helpers; ``errors``: what a database error
means)."""

from placement.db.connect import build_url
from placement.db.connect import connect_problem
from placement.db.engine import PING_AFTER_IDLE_S
from placement.db.engine import SQLITE_BUSY_TIMEOUT_MS
from placement.db.engine import create_engine
from placement.db.engine import tables_not_utf8mb4
from placement.db.engine import twin_of
from placement.db.engine import unbounded
from placement.db.errors import is_count_check
from placement.db.errors import is_read_only
from placement.db.held import holds_for_commit
from placement.db.held_text import at_commit
from placement.db.held_text import watch_held
from placement.db.remembered import Learned
from placement.db.remembered import forget as forget_remembered
from placement.db.remembered import known
from placement.db.remembered import remember
from placement.db.retry import DEADLOCK_RETRIES
from placement.db.retry import DEADLOCKED
from placement.db.retry import retry_on_deadlock
from placement.db.statements import insert_ignore
from placement.db.statements import inserted_id
from placement.db.statements import int_list
from placement.db.statements import plain_count
from placement.db.statements import plain_count_at_commit
from placement.db.statements import plain_insert
from placement.db.statements import plain_rows
from placement.db.transaction import AFTER_COMMIT
from placement.db.transaction import BEFORE_COMMIT
from placement.db.transaction import Database
from placement.db.transaction import OutcomeUnknown
from placement.db.transaction import PerDatabase
from placement.db.transaction import ReadBack
from placement.db.transaction import before_commit
from placement.db.transaction import expect
from placement.db.transaction import holds_text
from placement.db.transaction import may_conflict
from placement.db.transaction import maybe_committed
from placement.db.transaction import write_notes

__all__ = [
    "AFTER_COMMIT",
    "BEFORE_COMMIT",
    "DEADLOCKED",
    "DEADLOCK_RETRIES",
    "Database",
    "Learned",
    "OutcomeUnknown",
    "PING_AFTER_IDLE_S",
    "PerDatabase",
    "ReadBack",
    "SQLITE_BUSY_TIMEOUT_MS",
    "at_commit",
    "before_commit",
    "build_url",
    "connect_problem",
    "create_engine",
    "expect",
    "forget_remembered",
    "holds_for_commit",
    "holds_text",
    "insert_ignore",
    "is_count_check",
    "is_read_only",
    "inserted_id",
    "int_list",
    "known",
    "plain_count",
    "plain_count_at_commit",
    "plain_insert",
    "plain_rows",
    "may_conflict",
    "maybe_committed",
    "remember",
    "retry_on_deadlock",
    "tables_not_utf8mb4",
    "twin_of",
    "unbounded",
    "watch_held",
    "write_notes",
]

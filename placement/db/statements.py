"""Small helpers for statements that differ by dialect or binding."""

import functools
from typing import Any

import sqlalchemy as sa


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

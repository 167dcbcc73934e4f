"""What this process remembers of the database, per engine, to save
lookups on every write: the ids of standard resource classes and traits,
of aggregates, and which projects, users and consumer types exist.

Another writer can take any of those rows away or give their ids to
other names: a restore from a backup taken earlier, an operator's SQL.
So the memory is forgotten when the provider catalog sees such a change
(a comparison that finds another writer's rows, or counts gone back),
and a write whose statement finds a remembered row gone (a NULL id
taken by name, a foreign key) is run again once with it forgotten
(``retry.retry_on_deadlock``). See "Remembered ids" in
doc/architecture.md.
"""

import weakref
from typing import Any

import sqlalchemy as sa

# {engine: {table name: {key: value}}}. A name remembered with the value
# None is known to exist, its id not known.
_KNOWN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
KNOWN_MAX = 50000  # per table; forgotten all at once past that

# What a write looked up or created, to ``remember`` once it committed:
# [(table, {name: id})].
Learned = list[tuple[sa.Table, dict[Any, Any]]]


def known(conn: sa.Connection | Any, table: sa.Table) -> dict[Any, Any]:
    """{key: value} remembered for ``table`` on the engine of ``conn`` (a
    connection or a Database)."""
    per_engine = _KNOWN.get(conn.engine)
    if per_engine is None:
        per_engine = _KNOWN.setdefault(conn.engine, {})
    found = per_engine.get(table.name)
    if found is None or len(found) > KNOWN_MAX:
        found = per_engine[table.name] = {}
    return found


def remember(conn: sa.Connection | Any, learned: Learned) -> None:
    """Remember ``learned`` once the transaction that read or created
    those rows has committed."""
    for table, values in learned:
        known(conn, table).update(values)


def forget() -> None:
    """Forget everything remembered, on every engine of this process:
    another writer may have changed what it was about."""
    for per_engine in list(_KNOWN.values()):
        per_engine.clear()

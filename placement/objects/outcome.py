"""What a write leaves once committed, noted for ``db_api.expect``: when
its COMMIT fails and may have been done, ``db.writer()`` reads it back
and answers the write as done if it is there (doc/architecture.md, "A
failed COMMIT").

A provider write notes the provider's new generation (each write moves
it by one, from the one the client sent or the one it read) with what it
wrote of the provider: its row's columns, inventories, traits or
aggregates, or its absence. Creating or deleting a resource class or a
trait notes its row, or its absence. Allocation writes note their
consumers (``allocation._expect``).

The generation tells this write from another one made after it failed,
except from one that wrote the same content from the same generation
(two clients sending the same traits, aggregates or inventories at once;
the other one's COMMIT going through after ours failed): the database
then holds exactly what this write would have left, at the generation it
would have answered, and the write is answered as done. No client can
tell the two apart, and the next write from either, sent with that
generation, is checked against it as usual.
"""

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables

RP = tables.resource_providers
INV = tables.inventories
RPT = tables.resource_provider_traits
RPA = tables.resource_provider_aggregates

_INTEGER_FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size")


@dataclasses.dataclass(frozen=True)
class Leaves:
    """What a write leaves of one provider (``uuid``) once committed.
    None (and ``()``) tells nothing of that part."""

    uuid: str
    exists: bool = True  # False: the provider is gone
    generation: int | None = None
    columns: tuple[tuple[str, Any], ...] = ()  # (column, value) of its row
    # {class id: record (the six fields), or None for no inventory of it}
    inventories: Mapping[int, Mapping[str, Any] | None] | None = None
    all_inventories: bool = False  # it has no inventories but those
    traits: frozenset[int] | None = None  # its trait ids, all of them
    aggregates: frozenset[int] | None = None  # its aggregate ids, all


def provider(conn: sa.Connection, provider_id: int, leaves: Leaves) -> None:
    """Note that the transaction on ``conn`` leaves provider
    ``provider_id`` as ``leaves`` says."""
    db_api.expect(conn, _providers_written, {provider_id: leaves})


def names(conn: sa.Connection, table: sa.Table, rows: Mapping[int, Any]) -> None:
    """Note that the transaction on ``conn`` leaves the rows of ``table``
    (resource classes, traits) as ``rows`` says: {id: (name, whether a
    row of that id and name exists)}."""
    db_api.expect(conn, _NAMES_WRITTEN[table.name], dict(rows))


def _locked(query: sa.Select[Any]) -> sa.Select[Any]:
    """``query`` reading rows as a writer would: on MySQL and PostgreSQL
    it waits for a transaction still holding them (one whose COMMIT is on
    its way) to end, and reads what it left."""
    return query.with_for_update(read=True)


def _providers_written(conn: sa.Connection, expected: dict[int, Leaves]) -> bool:
    """Whether the database holds every provider as ``expected``
    ({provider id: Leaves}) says."""
    found = {
        row["id"]: row
        for row in conn.execute(
            _locked(sa.select(RP).where(RP.c.id.in_(list(expected))))
        ).mappings()
    }
    present = {}
    for provider_id, leaves in expected.items():
        row = found.get(provider_id)
        if row is not None and row["uuid"] != leaves.uuid:
            row = None  # the id taken again (SQLite reuses the last)
        if row is None or not leaves.exists:
            if (row is None) == leaves.exists:
                return False
            continue
        if leaves.generation is not None and row["generation"] != leaves.generation:
            return False
        if any(row[column] != value for column, value in leaves.columns):
            return False
        present[provider_id] = leaves
    return (
        _inventories_are(conn, present)
        and _links_are(conn, present, RPT.c.trait_id, "traits")
        and _links_are(conn, present, RPA.c.aggregate_id, "aggregates")
    )


def _inventories_are(conn: sa.Connection, present: dict[int, Leaves]) -> bool:
    told = {pid: lv for pid, lv in present.items() if lv.inventories is not None}
    if not told:
        return True
    found: dict[int, dict[int, Any]] = {pid: {} for pid in told}
    for row in conn.execute(
        sa.select(INV).where(INV.c.resource_provider_id.in_(list(told)))
    ).mappings():
        found[row["resource_provider_id"]][row["resource_class_id"]] = row
    for provider_id, leaves in told.items():
        have = found[provider_id]
        wanted = leaves.inventories or {}
        if leaves.all_inventories and set(have) != {
            rc for rc, record in wanted.items() if record is not None
        }:
            return False
        for rc, record in wanted.items():
            stored = have.get(rc)
            if stored is None or record is None:
                if (stored is None) != (record is None):
                    return False
            elif not _same_record(stored, record):
                return False
    return True


def _same_record(row: Mapping[str, Any], record: Any) -> bool:
    """Whether an inventory row holds ``record`` (a FLOAT column keeps
    the allocation ratio to single precision on MySQL)."""
    return all(
        int(row[field]) == int(record[field]) for field in _INTEGER_FIELDS
    ) and math.isclose(
        float(row["allocation_ratio"]), float(record["allocation_ratio"]), rel_tol=1e-6
    )


def _links_are(
    conn: sa.Connection, present: dict[int, Leaves], column: sa.Column[Any], part: str
) -> bool:
    told = {pid: getattr(lv, part) for pid, lv in present.items()}
    told = {pid: ids for pid, ids in told.items() if ids is not None}
    if not told:
        return True
    table = column.table
    have: dict[int, set[int]] = {pid: set() for pid in told}
    for provider_id, value in conn.execute(
        sa.select(table.c.resource_provider_id, column).where(
            table.c.resource_provider_id.in_(list(told))
        )
    ):
        have[provider_id].add(value)
    return all(have[pid] == ids for pid, ids in told.items())


def _names_written_of(table: sa.Table) -> db_api.ReadBack:
    def written(conn: sa.Connection, expected: dict[int, Any]) -> bool:
        found: dict[int, str] = dict(
            conn.execute(
                _locked(
                    sa.select(table.c.id, table.c.name).where(
                        table.c.id.in_(list(expected))
                    )
                )
            ).all()
        )
        return all(
            (found.get(row_id) == name) == exists
            for row_id, (name, exists) in expected.items()
        )

    return written


# Made once: ``db_api.expect`` merges the notes of one read-back function.
_NAMES_WRITTEN = {
    table.name: _names_written_of(table)
    for table in (tables.resource_classes, tables.traits)
}

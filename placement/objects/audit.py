"""The data audit (``placement-manage audit``, ``GET /maintenance/audit``;
doc/audit.md): what in the database is wrong, read-only.

Each check is one set-based query (a second one for the consumers of what
the first found) in one read transaction, so the checks see one snapshot.
A check returns its items: the rows involved, as an operator looks them up
(uuids and names, the internal ids where the fix is SQL). ``CHECKS`` says,
per kind, whether it is an error or information and what to do about it.
"""

import dataclasses
from collections.abc import Callable
from collections.abc import Collection
from typing import Any

import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects import common
from placement.objects import standard_names

RP = tables.resource_providers
ROOT = RP.alias("root")
PARENT = RP.alias("parent")
INV = tables.inventories
ALLOC = tables.allocations
RC = tables.resource_classes
CONSUMERS = tables.consumers
PROJECTS = tables.projects
USERS = tables.users
TRAITS = tables.traits
RP_TRAITS = tables.resource_provider_traits

ERROR, INFO = "error", "info"
# Items listed per kind (the count is always the whole number).
ITEMS = 1000
# Consumers fetched per query for the providers found over capacity.
CHUNK = 500

Item = dict[str, Any]

# MariaDB, given a join from a grouped subquery of allocations, pushes the
# join into it (a "lateral derived" table) and looks allocations up by
# their class index alone: every allocation of a class per inventory,
# minutes at 100,000 hosts. The audit's scans of allocations never gain
# from that index; MySQL and MariaDB are told to leave it.
_NOT_BY_CLASS = "IGNORE INDEX (allocations_resource_class_id_idx)"


def _scan(select: sa.Select) -> sa.Select:
    return select.with_hint(ALLOC, _NOT_BY_CLASS, "mysql")


@dataclasses.dataclass(frozen=True)
class Check:
    kind: str
    severity: str
    title: str
    fix: str
    # Every item found; those past ``reads.limit`` may lack their details.
    find: Callable[["Reads"], list[Item]]


class Reads:
    """One audit's read transaction. Checks that share a query (a scan of
    every allocation) ask for it through ``once``: it runs once per audit.
    ``providers``, when not None, are the ids of the providers the
    per-provider checks (``TREE_KINDS``) look at: those of the trees asked
    about (``in_tree``)."""

    def __init__(
        self,
        db: db_api.Database,
        conn: sa.Connection,
        limit: int,
        providers: list[int] | None = None,
    ):
        self.db, self.conn, self.limit = db, conn, limit
        self.providers = providers
        self._done: dict[Callable[[Reads], Any], Any] = {}

    def only(self, select: sa.Select, column: sa.ColumnElement) -> sa.Select:
        """``select`` limited to the providers asked about, if any."""
        if self.providers is None:
            return select
        return select.where(column.in_(self.providers))

    def once(self, query: Callable[["Reads"], Any]) -> Any:
        if query not in self._done:
            self._done[query] = query(self)
        return self._done[query]


def _per_class(reads):
    """Per (provider, class) with allocations: their sum, smallest and
    largest amount, against its inventory (none: inventory columns None),
    where something is wrong: no inventory, over capacity, or an amount
    outside max_unit/min_unit. One grouped scan of the allocations."""
    usage = (
        reads.only(
            _scan(
                sa.select(
                    ALLOC.c.resource_provider_id.label("rp_id"),
                    ALLOC.c.resource_class_id.label("rc_id"),
                    sa.func.sum(ALLOC.c.used).label("used"),
                    sa.func.min(ALLOC.c.used).label("lo"),
                    sa.func.max(ALLOC.c.used).label("hi"),
                )
            ),
            ALLOC.c.resource_provider_id,
        )
        .group_by(ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id)
        .subquery("usage")
    )
    return reads.conn.execute(
        sa.select(
            usage,
            RP.c.uuid,
            RP.c.name,
            ROOT.c.uuid.label("root"),
            RC.c.name.label("rc"),
            INV.c.id.label("inventory"),
            INV.c.total,
            INV.c.reserved,
            INV.c.allocation_ratio,
            INV.c.min_unit,
            INV.c.max_unit,
            INV.c.step_size,
        )
        .select_from(
            usage.outerjoin(
                INV,
                sa.and_(
                    INV.c.resource_provider_id == usage.c.rp_id,
                    INV.c.resource_class_id == usage.c.rc_id,
                ),
            )
            .outerjoin(RP, RP.c.id == usage.c.rp_id)
            .outerjoin(ROOT, ROOT.c.id == RP.c.root_provider_id)
            .outerjoin(RC, RC.c.id == usage.c.rc_id)
        )
        .where(
            sa.or_(
                INV.c.id.is_(None),
                usage.c.used > (INV.c.total - INV.c.reserved) * INV.c.allocation_ratio,
                usage.c.hi > INV.c.max_unit,
                usage.c.lo < INV.c.min_unit,
            )
        )
        .order_by(RP.c.uuid, RC.c.name)
    ).all()


def _consumers_on(reads, pairs):
    """{(provider id, class id): [{consumer, used}]} for ``pairs``."""
    found: dict[tuple[int, int], list[Item]] = {pair: [] for pair in pairs}
    ids = sorted({rp for rp, _ in pairs})
    for start in range(0, len(ids), CHUNK):
        rows = reads.conn.execute(
            sa.select(
                ALLOC.c.resource_provider_id,
                ALLOC.c.resource_class_id,
                ALLOC.c.consumer_id,
                sa.func.sum(ALLOC.c.used),
            )
            .where(ALLOC.c.resource_provider_id.in_(ids[start : start + CHUNK]))
            .group_by(
                ALLOC.c.resource_provider_id,
                ALLOC.c.resource_class_id,
                ALLOC.c.consumer_id,
            )
            .order_by(ALLOC.c.consumer_id)
        )
        for rp, rc, consumer, used in rows:
            if (rp, rc) in found:
                found[rp, rc].append({"consumer": consumer, "used": int(used)})
    return found


def _items(reads, rows, item, keep=lambda row, consumer: True):
    """``item(row)`` per row, the first ``reads.limit`` with the consumers
    holding that class there (those ``keep`` accepts)."""
    listed = rows[: reads.limit]
    consumers = _consumers_on(reads, [(r.rp_id, r.rc_id) for r in listed])
    return [
        dict(
            item(r),
            consumers=[c for c in consumers[r.rp_id, r.rc_id] if keep(r, c)],
        )
        for r in listed
    ] + [item(r) for r in rows[reads.limit :]]


def over_capacity(reads: Reads) -> list[Item]:
    rows = [
        r
        for r in reads.once(_per_class)
        if r.inventory is not None
        and r.used > (r.total - r.reserved) * r.allocation_ratio
    ]
    return _items(
        reads,
        rows,
        lambda r: {
            "resource_provider": r.uuid,
            "name": r.name,
            "root_provider": r.root,
            "resource_class": r.rc,
            "capacity": int((r.total - r.reserved) * r.allocation_ratio),
            "used": int(r.used),
        },
    )


def no_inventory(reads: Reads) -> list[Item]:
    rows = [r for r in reads.once(_per_class) if r.inventory is None]
    return _items(
        reads,
        rows,
        lambda r: {
            "resource_provider": r.uuid,
            "name": r.name,
            "resource_provider_id": r.rp_id,
            "resource_class": r.rc,
            "used": int(r.used),
        },
    )


def _off_step(reads):
    """(provider, class) whose inventory has a step_size some allocation
    there is not a multiple of: allocations are matched only to the
    inventories whose step_size is above 1."""
    remainder = sa.case((INV.c.step_size > 1, ALLOC.c.used % INV.c.step_size), else_=0)
    return reads.conn.execute(
        reads.only(
            _scan(
                sa.select(
                    INV.c.resource_provider_id.label("rp_id"),
                    INV.c.resource_class_id.label("rc_id"),
                    RP.c.uuid,
                    RP.c.name,
                    RC.c.name.label("rc"),
                    INV.c.min_unit,
                    INV.c.max_unit,
                    INV.c.step_size,
                )
            ),
            INV.c.resource_provider_id,
        )
        .select_from(
            INV.join(
                ALLOC,
                sa.and_(
                    ALLOC.c.resource_provider_id == INV.c.resource_provider_id,
                    ALLOC.c.resource_class_id == INV.c.resource_class_id,
                ),
            )
            .outerjoin(RP, RP.c.id == INV.c.resource_provider_id)
            .outerjoin(RC, RC.c.id == INV.c.resource_class_id)
        )
        .where(INV.c.step_size > 1, remainder != 0)
        .distinct()
    ).all()


def _violates(row, used):
    return [
        name
        for name, broken in (
            ("max_unit", used > row.max_unit),
            ("min_unit", used < row.min_unit),
            ("step_size", row.step_size > 0 and used % row.step_size != 0),
        )
        if broken
    ]


def unit_limits(reads: Reads) -> list[Item]:
    rows = {
        (r.rp_id, r.rc_id): r
        for r in reads.once(_per_class)
        if r.inventory is not None and (r.hi > r.max_unit or r.lo < r.min_unit)
    }
    rows.update(((r.rp_id, r.rc_id), r) for r in _off_step(reads))
    ordered = sorted(rows.values(), key=lambda r: (r.uuid or "", r.rc or ""))
    items = _items(
        reads,
        ordered,
        lambda r: {
            "resource_provider": r.uuid,
            "name": r.name,
            "resource_class": r.rc,
            "min_unit": r.min_unit,
            "max_unit": r.max_unit,
            "step_size": r.step_size,
        },
        keep=lambda r, consumer: bool(_violates(r, consumer["used"])),
    )
    for item, row in zip(items, ordered):
        for consumer in item.get("consumers", ()):
            consumer["violates"] = _violates(row, consumer["used"])
    return items


def _owners():
    return (
        sa.select(
            CONSUMERS.c.uuid,
            CONSUMERS.c.project_id,
            CONSUMERS.c.user_id,
            PROJECTS.c.external_id.label("project"),
            USERS.c.external_id.label("user"),
        )
        .select_from(
            CONSUMERS.outerjoin(
                PROJECTS, PROJECTS.c.id == CONSUMERS.c.project_id
            ).outerjoin(USERS, USERS.c.id == CONSUMERS.c.user_id)
        )
        .order_by(CONSUMERS.c.uuid)
    )


def empty_consumers(reads: Reads) -> list[Item]:
    rows = reads.conn.execute(
        _owners().where(~sa.exists().where(ALLOC.c.consumer_id == CONSUMERS.c.uuid))
    )
    return [{"consumer": r.uuid, "project": r.project, "user": r.user} for r in rows]


def missing_consumers(reads: Reads) -> list[Item]:
    # Grouped first: each consumer uuid is looked up once, not once per
    # allocation.
    held = (
        sa.select(ALLOC.c.consumer_id, sa.func.count().label("allocations"))
        .group_by(ALLOC.c.consumer_id)
        .subquery("held")
    )
    rows = reads.conn.execute(
        sa.select(held)
        .where(~sa.exists().where(CONSUMERS.c.uuid == held.c.consumer_id))
        .order_by(held.c.consumer_id)
    )
    return [{"consumer": consumer, "allocations": count} for consumer, count in rows]


def missing_owners(reads: Reads) -> list[Item]:
    rows = reads.conn.execute(
        _owners().where(sa.or_(PROJECTS.c.id.is_(None), USERS.c.id.is_(None)))
    )
    return [
        {
            "consumer": r.uuid,
            "project_id": r.project_id,
            "user_id": r.user_id,
            "missing": [
                name
                for name, external in (("project", r.project), ("user", r.user))
                if external is None
            ],
        }
        for r in rows
    ]


def _tops():
    """(provider id, the id of the top of its parent chain) for every
    provider with a parent whose chain ends at a provider without one:
    walked down from the children of those, so a chain that loops is never
    reached and the walk ends after as many steps as the deepest tree has
    levels (none on a cloud of flat hosts)."""
    child, parent = RP.alias("child"), RP.alias("parent_top")
    tops = (
        sa.select(child.c.id.label("id"), parent.c.id.label("top"))
        .where(
            child.c.parent_provider_id == parent.c.id,
            parent.c.parent_provider_id.is_(None),
        )
        .cte("tops", recursive=True)
    )
    below = RP.alias("below")
    return tops.union_all(
        sa.select(below.c.id, tops.c.top).where(below.c.parent_provider_id == tops.c.id)
    )


def _tree_rows(reads):
    """Providers whose root id is not the top of their parent chain (their
    own id for a provider without a parent), or whose chain loops (no
    top)."""
    tops = _tops()
    expected = sa.case((RP.c.parent_provider_id.is_(None), RP.c.id), else_=tops.c.top)
    top = RP.alias("top")
    return reads.conn.execute(
        sa.select(
            RP.c.id,
            RP.c.uuid,
            RP.c.name,
            RP.c.root_provider_id,
            ROOT.c.uuid.label("root"),
            PARENT.c.uuid.label("parent"),
            expected.label("top"),
            top.c.uuid.label("top_uuid"),
        )
        .select_from(
            RP.outerjoin(tops, tops.c.id == RP.c.id)
            .outerjoin(top, top.c.id == expected)
            .outerjoin(ROOT, ROOT.c.id == RP.c.root_provider_id)
            .outerjoin(PARENT, PARENT.c.id == RP.c.parent_provider_id)
        )
        .where(
            # On the provider alone first (a database filters on it before
            # joining): a root that is its own root is fine.
            sa.or_(
                RP.c.parent_provider_id.is_not(None),
                RP.c.root_provider_id.is_(None),
                RP.c.root_provider_id != RP.c.id,
            ),
            sa.or_(
                expected.is_(None),
                RP.c.root_provider_id.is_(None),
                RP.c.root_provider_id != expected,
            ),
        )
        .order_by(RP.c.uuid)
    ).all()


def wrong_roots(reads: Reads) -> list[Item]:
    return [
        {
            "resource_provider": r.uuid,
            "name": r.name,
            "id": r.id,
            "root_provider": r.root,
            "root_provider_id": r.root_provider_id,
            "expected_root_provider": r.top_uuid,
            "expected_root_provider_id": r.top,
        }
        for r in reads.once(_tree_rows)
        if r.top is not None
    ]


def parent_loops(reads: Reads) -> list[Item]:
    return [
        {
            "resource_provider": r.uuid,
            "name": r.name,
            "id": r.id,
            "parent_provider": r.parent,
        }
        for r in reads.once(_tree_rows)
        if r.top is None
    ]


def _custom(column):
    return column.startswith("CUSTOM_", autoescape=True)


def unused_classes(reads: Reads) -> list[Item]:
    rows = reads.conn.scalars(
        sa.select(RC.c.name)
        .where(
            _custom(RC.c.name),
            ~sa.exists().where(INV.c.resource_class_id == RC.c.id),
            ~sa.exists().where(ALLOC.c.resource_class_id == RC.c.id),
        )
        .order_by(RC.c.name)
    )
    return [{"name": name} for name in rows]


def unused_traits(reads: Reads) -> list[Item]:
    rows = reads.conn.scalars(
        sa.select(TRAITS.c.name)
        .where(
            _custom(TRAITS.c.name),
            ~sa.exists().where(RP_TRAITS.c.trait_id == TRAITS.c.id),
        )
        .order_by(TRAITS.c.name)
    )
    return [{"name": name} for name in rows]


def standard_class_ids(reads: Reads) -> list[Item]:
    """What ``placement-status upgrade check`` reports as "Standard
    Resource Class IDs"."""
    return [{"problem": line} for line in standard_names.wrong_class_ids(reads.db)]


SQL_BEHIND = (
    " Rows changed with SQL are seen by the service after its comparison "
    'period (doc/architecture.md, "Catalog changes").'
)

CHECKS = (
    Check(
        "over_capacity",
        ERROR,
        "Resource providers using a class beyond its capacity "
        "((total - reserved) * allocation_ratio)",
        "Free the difference: move or delete allocations of the consumers "
        "listed (migrate the instance, or DELETE /allocations/{consumer} "
        "for one that no longer exists), or raise the inventory "
        "(PUT /resource_providers/{uuid}/inventories/{class}: total or "
        "allocation_ratio). Until then no claim of that class fits there; "
        "a consumer's claim that does not grow its use is still accepted.",
        over_capacity,
    ),
    Check(
        "unit_limits",
        ERROR,
        "Allocations outside their inventory's max_unit, min_unit or step_size",
        "Resize the consumer so the amount is allowed (PUT "
        "/allocations/{consumer}), or change the inventory's max_unit, "
        "min_unit or step_size to allow it. Until then rewriting that "
        "consumer's allocations with the same amount is refused.",
        unit_limits,
    ),
    Check(
        "no_inventory",
        ERROR,
        "Allocations of a class the resource provider has no inventory of",
        "Put the inventory back (PUT /resource_providers/{uuid}/inventories"
        "), or rewrite the consumers' allocations without that class on "
        "that provider (PUT /allocations/{consumer}).",
        no_inventory,
    ),
    Check(
        "empty_consumers",
        ERROR,
        "Consumers with no allocations",
        "The service deletes a consumer with its last allocation; these were "
        "left behind. Delete them: DELETE FROM consumers WHERE uuid = "
        "'<consumer>'. A new claim by the same uuid creates it again." + SQL_BEHIND,
        empty_consumers,
    ),
    Check(
        "missing_consumers",
        ERROR,
        "Allocations whose consumer row is missing",
        "Run `placement-manage db online_data_migrations`: it creates their "
        "consumer rows, owned by [placement] incomplete_consumer_project_id "
        "and incomplete_consumer_user_id.",
        missing_consumers,
    ),
    Check(
        "missing_owners",
        ERROR,
        "Consumers whose project or user row is missing",
        "Add the row back with the id the consumer names: INSERT INTO "
        "projects (id, external_id) VALUES (<project_id>, '<keystone "
        "project id>') (users likewise), or point the consumer at an "
        "existing one: UPDATE consumers SET project_id = <id> WHERE uuid = "
        "'<consumer>'. Until then the consumer counts under no project in "
        "GET /usages." + SQL_BEHIND,
        missing_owners,
    ),
    Check(
        "wrong_roots",
        ERROR,
        "Resource providers whose root_provider_id is not the top of their "
        "parent chain",
        "UPDATE resource_providers SET root_provider_id = "
        "<expected_root_provider_id> WHERE id = <id>, for each listed. "
        "Until then the provider is searched and shown in the wrong tree." + SQL_BEHIND,
        wrong_roots,
    ),
    Check(
        "parent_loops",
        ERROR,
        "Resource providers whose parent chain loops (or hangs below a loop)",
        "Break the loop: UPDATE resource_providers SET parent_provider_id = "
        "<the real parent's id, or NULL for a root> WHERE id = <id> for one "
        "provider of the loop, then run the audit again and set the root "
        "ids it lists under wrong_roots." + SQL_BEHIND,
        parent_loops,
    ),
    Check(
        "standard_class_ids",
        ERROR,
        "Standard resource classes without the ids the reference service "
        "gives them (as `placement-status upgrade check` reports)",
        'See "Standard resource class ids" in doc/operations.md for the repair.',
        standard_class_ids,
    ),
    Check(
        "unused_resource_classes",
        INFO,
        "Custom resource classes no inventory or allocation uses",
        "Nothing needs doing. DELETE /resource_classes/{name} removes one "
        "that is no longer wanted.",
        unused_classes,
    ),
    Check(
        "unused_traits",
        INFO,
        "Custom traits no resource provider has",
        "Nothing needs doing. DELETE /traits/{name} removes one that is no "
        "longer wanted.",
        unused_traits,
    ),
)
KINDS = tuple(check.kind for check in CHECKS)
# The checks of a provider's allocations against its inventories: those
# ``in_tree`` can limit to some trees.
TREE_KINDS = ("over_capacity", "unit_limits", "no_inventory")
# Providers ``in_tree`` may name (the console asks about a page of roots).
IN_TREE = 1000


def _tree_members(conn: sa.Connection, uuids: Collection[str]) -> list[int]:
    """The ids of every provider in the trees of the providers ``uuids``
    (two statements on indexed columns; uuids naming nothing: none)."""
    roots = conn.scalars(
        sa.select(RP.c.root_provider_id)
        .where(RP.c.uuid.in_(sorted(uuids)), RP.c.root_provider_id.is_not(None))
        .distinct()
    ).all()
    if not roots:
        return []
    return list(
        conn.scalars(sa.select(RP.c.id).where(RP.c.root_provider_id.in_(roots)))
    )


def unknown_providers(db: db_api.Database, uuids: Collection[str]) -> list[str]:
    """Those of ``uuids`` that name no resource provider (as written)."""
    wanted = sorted(set(uuids))
    with db.reader() as conn:
        rows = conn.execute(sa.select(RP.c.uuid).where(RP.c.uuid.in_(wanted))).all()
    known = {row[0] for row in common.exact_in(rows, wanted)}
    return [u for u in wanted if u not in known]


def run(
    db: db_api.Database,
    kinds: Collection[str] = KINDS,
    limit: int | None = None,
    in_tree: Collection[str] | None = None,
) -> dict[str, Any]:
    """The audit of the checks ``kinds`` (all by default): ``problems`` is
    how many rows the error kinds found (0: nothing is wrong), ``checks``
    each kind's severity, title, fix, count and first ``limit`` items
    (default ``ITEMS``). ``in_tree`` (provider uuids, with ``kinds`` among
    ``TREE_KINDS`` only) limits the checks to the rows of those providers'
    trees: the console's cloud view asks about the roots it shows, so that
    none of them is beyond the first ``ITEMS``."""
    if limit is None:
        limit = ITEMS
    if in_tree is not None and set(kinds) - set(TREE_KINDS):
        raise ValueError("in_tree applies to %s only" % ", ".join(TREE_KINDS))
    checks: list[dict[str, Any]] = []
    with db.reader() as conn:
        providers = None if in_tree is None else _tree_members(conn, in_tree)
        reads = Reads(db, conn, limit, providers)
        for check in CHECKS:
            if check.kind not in kinds:
                continue
            items = check.find(reads)
            checks.append(
                {
                    "kind": check.kind,
                    "severity": check.severity,
                    "title": check.title,
                    "fix": check.fix,
                    "count": len(items),
                    "items": items[:limit],
                }
            )
    problems = sum(c["count"] for c in checks if c["severity"] == ERROR)
    return {"problems": problems, "checks": checks}

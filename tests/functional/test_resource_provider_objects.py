"""Resource provider objects on real SQLite, MySQL and PostgreSQL databases:
the list and tree moves issue a fixed number of statements whatever the
number of providers, and concurrent creates of one name leave exactly one
winner.
"""

import uuid

from placement import exception
from placement import versions
from placement.db import tables
from placement.handlers import query_params
from placement.objects import provider_list
from placement.objects import resource_provider as rp_obj
from placement.objects.catalog import changes
from tests import helpers
from tests.helpers import statements

LATEST = versions.MAX


def _queries(seen):
    # A writer prunes the catalog's change log one time in PRUNE_EVERY, at
    # random: that statement is the catalog's, not the operation's.
    heads = [s.lstrip().upper() for s in seen]
    return [
        head
        for head in heads
        if head.startswith(("SELECT", "WITH", "UPDATE", "INSERT", "DELETE"))
        and not head.startswith("DELETE FROM CATALOG_LOG")
    ]


def _add_providers(db, count, parent_uuid=None, trait="CUSTOM_ANY"):
    """``count`` providers, each with VCPU inventory, ``trait`` and an
    aggregate; returns their uuids."""
    uuids = [str(uuid.uuid4()) for _ in range(count)]
    for rp_uuid in uuids:
        rp_obj.create(db, rp_uuid, rp_uuid, parent_uuid)
    with db.writer() as conn:
        # Rows written directly: every catalog reads them whole.
        changes.record(conn, changes.EVERYTHING)
        trait_id = conn.execute(
            tables.traits.insert().values(name=trait)
        ).inserted_primary_key[0]
        agg_id = conn.execute(
            tables.placement_aggregates.insert().values(uuid=str(uuid.uuid4()))
        ).inserted_primary_key[0]
        ids = [rp_obj.get(db, u)["id"] for u in uuids]
        conn.execute(
            tables.inventories.insert(),
            [
                dict(
                    resource_provider_id=i,
                    resource_class_id=0,
                    total=8,
                    reserved=0,
                    min_unit=1,
                    max_unit=8,
                    step_size=1,
                    allocation_ratio=1.0,
                )
                for i in ids
            ],
        )
        conn.execute(
            tables.resource_provider_traits.insert(),
            [dict(resource_provider_id=i, trait_id=trait_id) for i in ids],
        )
        conn.execute(
            tables.resource_provider_aggregates.insert(),
            [dict(resource_provider_id=i, aggregate_id=agg_id) for i in ids],
        )
    return uuids


def _list_everything(db, root_uuid, trait, version=LATEST):
    agg = "%s" % uuid.uuid4()
    with statements(db) as seen:
        found, _ = provider_list.list_providers(
            db,
            resources={"VCPU": 1},
            in_tree=root_uuid,
            member_of=query_params.parse_member_of(["!" + agg], version),
            required=query_params.parse_required([trait], version),
        )
    return found, len(_queries(seen))


def test_list_statement_count_does_not_grow(db):
    small_root = _add_providers(db, 1, trait="CUSTOM_ROOT1")[0]
    _add_providers(db, 2, small_root, trait="CUSTOM_T_2")
    big_root = _add_providers(db, 1, trait="CUSTOM_ROOT2")[0]
    _add_providers(db, 40, big_root, trait="CUSTOM_T_40")
    small, small_count = _list_everything(db, small_root, "CUSTOM_T_2")
    big, big_count = _list_everything(db, big_root, "CUSTOM_T_40")
    assert (len(small), len(big)) == (2, 40)
    assert small_count == big_count <= 5


def test_moving_a_deep_subtree_is_a_fixed_number_of_statements(db):
    def chain(length):
        parent = None
        created = []
        for _ in range(length):
            parent = rp_obj.create(db, str(uuid.uuid4()), str(uuid.uuid4()), parent)[
                "uuid"
            ]
            created.append(parent)
        return created

    counts = []
    for length in (3, 30):
        nodes = chain(length)
        new_root = chain(1)[0]
        with statements(db) as seen:
            rp_obj.update(
                db, nodes[1], "moved-%d" % length, new_root, allow_reparenting=True
            )
        counts.append(len(_queries(seen)))
        assert rp_obj.get(db, nodes[-1])["root_provider_uuid"] == new_root
        assert rp_obj.get(db, nodes[0])["root_provider_uuid"] == nodes[0]
    assert counts[0] == counts[1]


def test_concurrent_creates_of_one_name_have_one_winner(db):
    writers = 6
    outcomes = helpers.run_together(
        lambda i: rp_obj.create(db, str(uuid.uuid4()), "contended"), writers
    )
    losers = [o for o in outcomes if isinstance(o, Exception)]
    assert len(losers) == writers - 1
    assert all(isinstance(e, exception.DuplicateName) for e in losers), losers

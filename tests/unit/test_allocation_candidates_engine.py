"""The candidate engine (stages 2-5) on real databases, rows inserted
directly. Layouts are two small worked deployments (D1: flat with one
sharing provider, D2: one nested host) plus the
capacity rules and wide trees."""

import itertools
import uuid as uuidlib

import orjson
import pytest
import sqlalchemy as sa

from placement import versions
from placement.db import tables
from placement.handlers import query_params
from placement.handlers.candidates import allocation_candidate as handler
from placement.handlers.candidates import query as candidate_query
from placement.handlers.candidates import render
from placement.objects.allocation_candidates import answering as engine
from placement.objects.allocation_candidates import providers
from placement.objects.allocation_candidates import request as ac_request
from placement.objects.allocation_candidates import search
from placement.objects.allocation_candidates import trees
from placement.objects.catalog import changes
from tests import fixtures

T = tables


class Layout:
    """Inserts providers and their data; names double as uuids' labels."""

    def __init__(self, db):
        self.db = db
        self.ids, self.uuids, self.names = {}, {}, {}
        self.aggs = {}

    def _rc(self, conn, name):
        return conn.execute(
            sa.select(T.resource_classes.c.id).where(T.resource_classes.c.name == name)
        ).scalar_one()

    def _trait(self, conn, name):
        tid = conn.execute(
            sa.select(T.traits.c.id).where(T.traits.c.name == name)
        ).scalar()
        if tid is None:
            tid = conn.execute(
                T.traits.insert().values(name=name)
            ).inserted_primary_key[0]
        return tid

    def agg(self, name):
        if name not in self.aggs:
            self.aggs[name] = str(uuidlib.uuid4())
        return self.aggs[name]

    def add(self, name, parent=None, inventory=None, traits=(), aggs=(), used=None):
        uuid = str(uuidlib.uuid4())
        with self.db.writer() as conn:
            # Rows written directly: every catalog reads them whole.
            changes.record(conn, changes.EVERYTHING)
            pid = self.ids.get(parent)
            root = (
                conn.execute(
                    sa.select(T.resource_providers.c.root_provider_id).where(
                        T.resource_providers.c.id == pid
                    )
                ).scalar_one()
                if parent
                else None
            )
            rid = conn.execute(
                T.resource_providers.insert().values(
                    uuid=uuid,
                    name=name,
                    generation=0,
                    parent_provider_id=pid,
                    root_provider_id=root,
                )
            ).inserted_primary_key[0]
            if root is None:
                conn.execute(
                    T.resource_providers.update()
                    .where(T.resource_providers.c.id == rid)
                    .values(root_provider_id=rid)
                )
            for rc, spec in (inventory or {}).items():
                spec = spec if isinstance(spec, dict) else {"total": spec}
                conn.execute(
                    T.inventories.insert().values(
                        resource_provider_id=rid,
                        resource_class_id=self._rc(conn, rc),
                        total=spec["total"],
                        reserved=spec.get("reserved", 0),
                        min_unit=spec.get("min_unit", 1),
                        max_unit=spec.get("max_unit", spec["total"]),
                        step_size=spec.get("step_size", 1),
                        allocation_ratio=spec.get("allocation_ratio", 1.0),
                    )
                )
            for trait in traits:
                conn.execute(
                    T.resource_provider_traits.insert().values(
                        resource_provider_id=rid, trait_id=self._trait(conn, trait)
                    )
                )
            for agg in aggs:
                agg_uuid = self.agg(agg)
                aid = conn.execute(
                    sa.select(T.placement_aggregates.c.id).where(
                        T.placement_aggregates.c.uuid == agg_uuid
                    )
                ).scalar()
                if aid is None:
                    aid = conn.execute(
                        T.placement_aggregates.insert().values(uuid=agg_uuid)
                    ).inserted_primary_key[0]
                conn.execute(
                    T.resource_provider_aggregates.insert().values(
                        resource_provider_id=rid, aggregate_id=aid
                    )
                )
            for rc, amount in (used or {}).items():
                conn.execute(
                    T.allocations.insert().values(
                        resource_provider_id=rid,
                        consumer_id=str(uuidlib.uuid4()),
                        resource_class_id=self._rc(conn, rc),
                        used=amount,
                    )
                )
        self.ids[name], self.uuids[name], self.names[uuid] = rid, uuid, name
        return uuid


def group(
    suffix="",
    resources=None,
    required=None,
    member_of=None,
    in_tree=None,
    version="1.39",
):
    v = versions.Version.parse(version)
    return ac_request.RequestGroup(
        suffix=suffix,
        resources=tuple((resources or {}).items()),
        required=query_params.parse_required(required, v) if required else None,
        member_of=query_params.parse_member_of(member_of, v) if member_of else None,
        in_tree=in_tree,
    )


def run(layout, groups, version="1.39", options=None, **kw):
    """Rendered document with uuids replaced by provider names."""
    v = versions.Version.parse(version)
    req = ac_request.Request(groups=tuple(groups), **kw)
    candidate_query.check_structure(req, v)
    result = engine.find(
        layout.db,
        req,
        options or engine.Options(nested_aware=v >= versions.NESTED_CANDIDATES),
    )
    return orjson.loads(render.document_json(result, handler.document_form(v)))


def names(layout, doc):
    """Each allocation request as a sorted tuple of (name, class, amount)."""
    out = []
    for ar in doc["allocation_requests"]:
        allocs = ar["allocations"]
        if isinstance(allocs, list):
            allocs = {a["resource_provider"]["uuid"]: a for a in allocs}
        out.append(
            tuple(
                sorted(
                    (layout.names[u], rc, n)
                    for u, a in allocs.items()
                    for rc, n in a["resources"].items()
                )
            )
        )
    return sorted(out)


def mapped(layout, doc):
    return sorted(
        tuple(
            sorted(
                (s, tuple(sorted(layout.names[u] for u in us)))
                for s, us in ar["mappings"].items()
            )
        )
        for ar in doc["allocation_requests"]
    )


def summary_names(layout, doc):
    return sorted(layout.names[u] for u in doc["provider_summaries"])


@pytest.fixture(params=fixtures.BACKENDS)
def db(request):
    fixtures.require_backend(request.param)
    fixtures.configure()
    with fixtures.database(request.param) as database:
        yield database


@pytest.fixture
def d1(db):
    lay = Layout(db)
    lay.add(
        "HOST_A",
        inventory={"VCPU": 8, "MEMORY_MB": 4096, "DISK_GB": 100},
        aggs=["AGG1"],
    )
    lay.add("HOST_B", inventory={"VCPU": 8, "MEMORY_MB": 4096}, aggs=["AGG1"])
    lay.add(
        "HOST_C",
        inventory={"VCPU": 8, "MEMORY_MB": 4096, "DISK_GB": 100},
        traits=["CUSTOM_GOLD"],
    )
    lay.add(
        "SAN",
        inventory={"DISK_GB": 2000},
        aggs=["AGG1"],
        traits=["MISC_SHARES_VIA_AGGREGATE"],
    )
    return lay


@pytest.fixture
def d2(db):
    lay = Layout(db)
    lay.add("CN", inventory={"DISK_GB": 500}, aggs=["AGG2"], traits=["CUSTOM_LICENSED"])
    lay.add("NUMA0", "CN", {"VCPU": 4, "MEMORY_MB": 2048}, ["HW_NUMA_ROOT"])
    lay.add("NIC0", "NUMA0", {"SRIOV_NET_VF": 8}, ["CUSTOM_PHYSNET_RED"])
    lay.add("NUMA1", "CN", {"VCPU": 4, "MEMORY_MB": 2048}, ["HW_NUMA_ROOT"])
    lay.add(
        "NIC1",
        "NUMA1",
        {"SRIOV_NET_VF": 8},
        ["CUSTOM_PHYSNET_RED", "CUSTOM_PHYSNET_BLUE"],
    )
    return lay


VMD = {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 50}


def test_d1_sharing_spread(d1):
    doc = run(d1, [group(resources=VMD)])
    assert names(d1, doc) == [
        (
            ("HOST_A", "DISK_GB", 50),
            ("HOST_A", "MEMORY_MB", 1024),
            ("HOST_A", "VCPU", 2),
        ),
        (("HOST_A", "MEMORY_MB", 1024), ("HOST_A", "VCPU", 2), ("SAN", "DISK_GB", 50)),
        (("HOST_B", "MEMORY_MB", 1024), ("HOST_B", "VCPU", 2), ("SAN", "DISK_GB", 50)),
        (
            ("HOST_C", "DISK_GB", 50),
            ("HOST_C", "MEMORY_MB", 1024),
            ("HOST_C", "VCPU", 2),
        ),
    ]
    assert summary_names(d1, doc) == ["HOST_A", "HOST_B", "HOST_C", "SAN"]


def test_d1_variations(d1):
    big = dict(VMD, DISK_GB=150)
    doc = run(d1, [group(resources=big)])
    assert [sorted({n for n, _, _ in r}) for r in names(d1, doc)] == [
        ["HOST_A", "SAN"],
        ["HOST_B", "SAN"],
    ]
    assert summary_names(d1, doc) == ["HOST_A", "HOST_B", "SAN"]
    doc = run(d1, [group(resources=VMD, member_of=[d1.agg("AGG1")])])
    assert len(doc["allocation_requests"]) == 3
    doc = run(d1, [group(resources=VMD, required=["CUSTOM_GOLD"])])
    assert [sorted({n for n, _, _ in r}) for r in names(d1, doc)] == [["HOST_C"]]
    doc = run(d1, [group(resources=VMD, required=["!CUSTOM_GOLD"])])
    assert len(doc["allocation_requests"]) == 3


def test_d1_disk_only_collapses_duplicates(d1):
    doc = run(d1, [group(resources={"DISK_GB": 50})])
    assert names(d1, doc) == [
        (("HOST_A", "DISK_GB", 50),),
        (("HOST_C", "DISK_GB", 50),),
        (("SAN", "DISK_GB", 50),),
    ]
    assert "HOST_B" not in summary_names(d1, doc)


def test_d1_in_tree(d1):
    host_a = d1.uuids["HOST_A"]
    doc = run(d1, [group(resources={"VCPU": 1, "DISK_GB": 10}, in_tree=host_a)])
    assert names(d1, doc) == [(("HOST_A", "DISK_GB", 10), ("HOST_A", "VCPU", 1))]
    doc = run(
        d1,
        [
            group(resources={"VCPU": 1}, in_tree=host_a),
            group("1", resources={"DISK_GB": 10}),
        ],
    )
    assert names(d1, doc) == [
        (("HOST_A", "DISK_GB", 10), ("HOST_A", "VCPU", 1)),
        (("HOST_A", "VCPU", 1), ("SAN", "DISK_GB", 10)),
    ]


def test_d2_spread_and_versions(d2):
    req = [group(resources={"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 10})]
    doc = run(d2, req)
    assert len(doc["allocation_requests"]) == 4
    assert summary_names(d2, doc) == ["CN", "NIC0", "NIC1", "NUMA0", "NUMA1"]
    nic0 = doc["provider_summaries"][d2.uuids["NIC0"]]
    assert nic0["resources"] == {"SRIOV_NET_VF": {"capacity": 8, "used": 0}}
    assert nic0["parent_provider_uuid"] == d2.uuids["NUMA0"]
    assert nic0["root_provider_uuid"] == d2.uuids["CN"]
    assert run(d2, req, version="1.28")["allocation_requests"] == []
    doc = run(
        d2,
        [
            group(
                resources={"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 10},
                member_of=[d2.agg("AGG2")],
            )
        ],
    )
    assert len(doc["allocation_requests"]) == 4


def test_d2_root_traits(d2):
    doc = run(d2, [group(resources={"VCPU": 1}, required=["CUSTOM_LICENSED"])])
    assert doc["allocation_requests"] == []
    doc = run(
        d2, [group(resources={"VCPU": 1})], root_required=frozenset(["CUSTOM_LICENSED"])
    )
    assert names(d2, doc) == [(("NUMA0", "VCPU", 1),), (("NUMA1", "VCPU", 1),)]
    doc = run(
        d2,
        [group(resources={"VCPU": 1})],
        root_forbidden=frozenset(["CUSTOM_LICENSED"]),
    )
    assert doc["allocation_requests"] == []
    doc = run(d2, [group("1", resources={"VCPU": 1}, member_of=[d2.agg("AGG2")])])
    assert doc["allocation_requests"] == []


def test_d2_same_subtree(d2):
    doc = run(
        d2,
        [
            group("_CPU", resources={"VCPU": 2, "MEMORY_MB": 1024}),
            group(
                "_NET", resources={"SRIOV_NET_VF": 1}, required=["CUSTOM_PHYSNET_RED"]
            ),
        ],
        group_policy="none",
        same_subtree=(("_CPU", "_NET"),),
    )
    assert mapped(d2, doc) == [
        (("_CPU", ("NUMA0",)), ("_NET", ("NIC0",))),
        (("_CPU", ("NUMA1",)), ("_NET", ("NIC1",))),
    ]


def test_d2_resourceless_group(d2):
    doc = run(
        d2,
        [
            group("_NUMA", required=["HW_NUMA_ROOT"]),
            group(
                "_NET", resources={"SRIOV_NET_VF": 1}, required=["CUSTOM_PHYSNET_BLUE"]
            ),
        ],
        group_policy="none",
        same_subtree=(("_NUMA", "_NET"),),
    )
    assert mapped(d2, doc) == [(("_NET", ("NIC1",)), ("_NUMA", ("NUMA1",)))]
    assert names(d2, doc) == [(("NIC1", "SRIOV_NET_VF", 1),)]


@pytest.mark.parametrize(
    "policy,expected",
    [
        (
            "isolate",
            [
                (("1", ("NIC0",)), ("2", ("NIC1",))),
                (("1", ("NIC1",)), ("2", ("NIC0",))),
            ],
        ),
        (
            "none",
            [
                (("1", ("NIC0",)), ("2", ("NIC0",))),
                (("1", ("NIC0",)), ("2", ("NIC1",))),
                (("1", ("NIC1",)), ("2", ("NIC0",))),
                (("1", ("NIC1",)), ("2", ("NIC1",))),
            ],
        ),
    ],
)
def test_d2_group_policy(d2, policy, expected):
    groups = [
        group("1", resources={"SRIOV_NET_VF": 1}),
        group("2", resources={"SRIOV_NET_VF": 1}),
    ]
    assert mapped(d2, run(d2, groups, group_policy=policy)) == expected


def test_d2_group_policy_below_1_29(d2):
    groups = [
        group("1", resources={"SRIOV_NET_VF": 1}),
        group("2", resources={"SRIOV_NET_VF": 1}),
    ]
    doc = run(d2, groups, version="1.28", group_policy="isolate")
    assert doc["allocation_requests"] == []
    doc = run(d2, groups, version="1.28", group_policy="none")
    assert names(d2, doc) == [
        (("NIC0", "SRIOV_NET_VF", 2),),
        (("NIC1", "SRIOV_NET_VF", 2),),
    ]
    assert summary_names(d2, doc) == ["NIC0", "NIC1"]


def test_d2_collective_traits(d2):
    doc = run(
        d2,
        [
            group(
                resources={"VCPU": 1, "SRIOV_NET_VF": 1},
                required=["CUSTOM_PHYSNET_BLUE"],
            )
        ],
    )
    assert names(d2, doc) == [
        (("NIC1", "SRIOV_NET_VF", 1), ("NUMA0", "VCPU", 1)),
        (("NIC1", "SRIOV_NET_VF", 1), ("NUMA1", "VCPU", 1)),
    ]
    doc = run(
        d2,
        [
            group(
                resources={"VCPU": 1, "SRIOV_NET_VF": 1},
                required=["in:CUSTOM_PHYSNET_RED,CUSTOM_PHYSNET_BLUE"],
            )
        ],
    )
    assert len(doc["allocation_requests"]) == 4


def test_d2_limit_keeps_whole_tree_summaries(d2):
    doc = run(d2, [group(resources={"VCPU": 1})], limit=1)
    assert len(doc["allocation_requests"]) == 1
    assert len(doc["provider_summaries"]) == 5


def test_capacity_rules(db):
    lay = Layout(db)
    lay.add("USED", inventory={"VCPU": 8}, used={"VCPU": 7})
    lay.add("RESERVED", inventory={"VCPU": {"total": 8, "reserved": 7}})
    lay.add(
        "RATIO",
        inventory={"VCPU": {"total": 1, "max_unit": 2, "allocation_ratio": 2.0}},
    )
    lay.add("STEP", inventory={"VCPU": {"total": 8, "step_size": 4}})
    lay.add("MAXU", inventory={"VCPU": {"total": 8, "max_unit": 1}})
    lay.add("MINU", inventory={"VCPU": {"total": 8, "min_unit": 4}})
    got = {r[0][0] for r in names(lay, run(lay, [group(resources={"VCPU": 2})]))}
    assert got == {"RATIO"}
    got = {r[0][0] for r in names(lay, run(lay, [group(resources={"VCPU": 4})]))}
    assert got == {"STEP", "MINU"}
    doc = run(lay, [group(resources={"VCPU": 1})], version="1.26")
    summary = doc["provider_summaries"][lay.uuids["USED"]]
    assert summary == {"resources": {"VCPU": {"capacity": 8, "used": 7}}, "traits": []}


def test_consolidated_amounts_rechecked(db):
    lay = Layout(db)
    lay.add("H", inventory={"VCPU": {"total": 3, "max_unit": 2}})
    groups = [group("1", resources={"VCPU": 1}), group("2", resources={"VCPU": 2})]
    assert run(lay, groups, group_policy="none")["allocation_requests"] == []
    groups = [group("1", resources={"VCPU": 1}), group("2", resources={"VCPU": 1})]
    doc = run(lay, groups, group_policy="none")
    assert names(lay, doc) == [(("H", "VCPU", 2),)]


def test_old_microversion_shapes(d1):
    doc = run(d1, [group(resources={"VCPU": 1})], version="1.10")
    ar = doc["allocation_requests"][0]
    assert set(ar) == {"allocations"}
    assert set(ar["allocations"][0]) == {"resource_provider", "resources"}
    summary = doc["provider_summaries"][d1.uuids["HOST_A"]]
    assert summary == {"resources": {"VCPU": {"capacity": 8, "used": 0}}}


def test_generation_cap_and_strategies(db):
    lay = Layout(db)
    for i in range(3):
        lay.add("H%d" % i)
        for j in range(2):
            lay.add("H%d_C%d" % (i, j), "H%d" % i, {"VCPU": 1})
    req = [group(resources={"VCPU": 1})]
    capped = run(lay, req, options=engine.Options(max_candidates=4))
    assert len(capped["allocation_requests"]) == 4
    first = names(
        lay, run(lay, req, limit=3, options=engine.Options(strategy="breadth-first"))
    )
    assert sorted(r[0][0][:2] for r in first) == ["H0", "H1", "H2"]
    first = names(lay, run(lay, req, limit=2))
    assert sorted(r[0][0][:2] for r in first) == ["H0", "H0"]


def test_wide_symmetric_trees(db):
    """Many interchangeable single-unit children: a limited answer, and
    none when the groups outnumber the units. Its time is the benchmark's
    (tools/bench/profile_request.py --shape symmetric --budget)."""
    lay = Layout(db)
    for h in range(20):
        lay.add("H%d" % h)
        for c in range(10):
            lay.add("H%d_VF%d" % (h, c), "H%d" % h, {"SRIOV_NET_VF": 1})
    groups = [group(str(i), resources={"SRIOV_NET_VF": 1}) for i in range(1, 5)]
    doc = run(lay, groups, group_policy="none", limit=10)
    assert len(doc["allocation_requests"]) == 10
    for request in names(lay, doc):
        # Four different VFs of one host, one unit each.
        assert len({name for name, _, _ in request}) == 4
        assert len({name.split("_")[0] for name, _, _ in request}) == 1
        assert {amount for _, _, amount in request} == {1}
    groups = [group(str(i), resources={"SRIOV_NET_VF": 1}) for i in range(1, 12)]
    assert run(lay, groups, group_policy="none")["allocation_requests"] == []


# Stages 3-5 on hand-made snapshots: the search's shortcut for plans with
# one option per slot against its walk, and the renderer's JSON strings.

VCPU, FPGA = 1, 2


def _inventory(total, used=0, max_unit=None):
    return providers.Inventory(total, 0, 1.0, 1, max_unit or total, 1, used)


def _forest():
    """Root 1 with children 2 and 3; 4 under 2. VCPU on 2 and 3 (3 half
    used), FPGA on 3 and 4; trait 7 on 2."""
    tree = {1: None, 2: 1, 3: 1, 4: 2}
    snap = providers.Snapshot(
        used={},
        providers={
            rp: providers.Provider(rp, parent, 1) for rp, parent in tree.items()
        },
        inventories={
            (2, VCPU): _inventory(4, max_unit=3),
            (3, VCPU): _inventory(4, used=2),
            (3, FPGA): _inventory(1),
            (4, FPGA): _inventory(1),
        },
        traits={2: frozenset({7})},
        aggregates={},
        serves={},
        nested=True,
    )
    return trees.Trees(snap)


@pytest.mark.parametrize("isolate", [False, True])
@pytest.mark.parametrize("same_subtree", [(), (("_A", "_F"),)])
@pytest.mark.parametrize("any_traits", [(), (frozenset({7}),)])
def test_single_option_plans_match_the_walk(isolate, same_subtree, any_traits):
    forest = _forest()
    groups = [
        trees.Group("", ((VCPU, 1),), any_traits=any_traits),
        trees.Group("_A", ((VCPU, 2),)),
        trees.Group("_F", ((FPGA, 1),)),
    ]
    engine = search.Search(forest, groups, same_subtree, isolate)
    slots = (trees.Slot(0, True, True), trees.Slot(1, True), trees.Slot(2, True))
    choices = [
        [(2, ((VCPU, 1),)), (3, ((VCPU, 1),))],
        [(2, ((VCPU, 2),)), (3, ((VCPU, 2),))],
        [(3, ((FPGA, 1),)), (4, ((FPGA, 1),))],
    ]
    whole = trees.Plan(1, slots, tuple(map(tuple, choices)))
    walked = list(engine.candidates(whole))
    # One plan per combination, in the walk's order: the same candidates.
    singles = [
        trees.Plan(1, slots, tuple((option,) for option in combo))
        for combo in itertools.product(*choices)
    ]
    shortcut = [c for plan in singles for c in engine.candidates(plan)]
    assert shortcut == walked
    assert walked  # the layout leaves something to compare
    assert (
        list(search.breadth_first(engine.candidates(plan) for plan in singles))
        == walked
    )


def test_consolidated_room_is_capacity_and_max_unit():
    forest = _forest()
    groups = [trees.Group("_A", ((VCPU, 2),)), trees.Group("_B", ((VCPU, 2),))]
    engine = search.Search(forest, groups)
    slots = (trees.Slot(0, True), trees.Slot(1, True))
    on = [(2, ((VCPU, 2),))]
    # 2 + 2 on provider 2 passes capacity (4) but not max_unit (3).
    for options in ((tuple(on), tuple(on)), (tuple(on * 2), tuple(on))):
        assert list(engine.candidates(trees.Plan(1, slots, options))) == []


def test_isolated_groups_past_the_supply_are_not_walked(monkeypatch):
    """Isolated groups need no sums (they pick different providers), but
    the anchor's supply still bounds them: more demand than free units
    under the anchor is known without walking the choices (which, with
    many children, are factorially many)."""
    forest = _forest()
    groups = [trees.Group("_%d" % i, ((VCPU, 2),)) for i in range(4)]
    engine = search.Search(forest, groups, isolate=True)
    slots = tuple(trees.Slot(i, True) for i in range(4))
    options = ((2, ((VCPU, 2),)), (3, ((VCPU, 2),)))
    walked = []
    monkeypatch.setattr(search.Search, "_walk", lambda *args: walked.append(args))
    # 4 x 2 VCPU asked; 4 + 2 free on providers 2 and 3.
    assert list(engine.candidates(trees.Plan(1, slots, (options,) * 4))) == []
    assert walked == []


@pytest.mark.parametrize(
    "text",
    [
        "",
        "3f2a9c1e-8b7d-4e6f-a5c4-2d1b0e9f8a7c",
        "_GPU",
        'say "hi"',
        "back\\slash",
        "tab\there",
        "new\nline",
        "del\x7f",
        "ümlaut",
        "a/b",
        "\u2028",
    ],
)
def test_quoted_strings_match_orjson(text):
    assert render._quoted(text) == orjson.dumps(text)

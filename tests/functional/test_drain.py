"""GET /maintenance/drain (doc/drain.md) on SQLite, MySQL and PostgreSQL:
a plan is feasible (every move applied as a real PUT /allocations, in
plan order, succeeds and leaves nothing over capacity), accounts for
itself (two consumers never get one last slot), keeps a consumer's part
outside the drained trees in place, says why a consumer fits nowhere
(and GET /allocation_candidates agrees), its strategies differ, it reads
in sets (its statements do not grow with the consumers), and
``placement-manage drain-plan`` prints it."""

import json
import urllib.parse
import uuid

import pytest
import sqlalchemy as sa

from tests import fixtures
from tests import helpers
from tests.functional import drain_cloud
from tests.functional.drain_cloud import ADMIN

AGG_STORAGE = "5a000000-0000-4000-8000-0000000000a1"
AGG_RACK2 = "5a000000-0000-4000-8000-0000000000a2"
AGG_LONE = "5a000000-0000-4000-8000-0000000000a3"


@pytest.fixture(params=fixtures.BACKENDS)
def app(request):
    fixtures.require_backend(request.param)
    with fixtures.app(request.param) as (app, db):
        yield Cloud(app, db)


class Cloud(drain_cloud.Cloud):
    """drain_cloud's, with plans as their bodies and moves applied one
    at a time."""

    def plan(self, query, status=200, headers=ADMIN):
        return self.drain_response(query, status, headers).json()

    def apply(self, move):
        """One move as a real write: (status, body)."""
        resp = self.put_move(move)
        return resp.status, resp.body

    def aggregates(self, name, aggregates):
        rp = self.names[name]
        generation = self.call("/resource_providers/" + rp).json()["generation"]
        resp = self.call(
            "/resource_providers/%s/aggregates" % rp,
            "PUT",
            {"resource_provider_generation": generation, "aggregates": aggregates},
        )
        assert resp.status == 200, resp.body

    def sql(self, statement, **params):
        """A change behind the service (a damaged or old database)."""
        with self.db.engine.begin() as conn:
            conn.execute(sa.text(statement), params)

    def provider_id(self, name):
        with self.db.engine.connect() as conn:
            return conn.execute(
                sa.text("SELECT id FROM resource_providers WHERE uuid = :u"),
                {"u": self.names[name]},
            ).scalar_one()

    def candidate_parts(self, query):
        """The allocation requests GET /allocation_candidates lists for
        ``query``, as {provider uuid: {class: amount}}."""
        resp = self.call("/allocation_candidates?" + query)
        assert resp.status == 200, resp.body
        return [
            {rp: a["resources"] for rp, a in r["allocations"].items()}
            for r in resp.json()["allocation_requests"]
        ]


def consumer(n):
    """Consumer uuids that sort in ``n`` order (plan order is by uuid)."""
    return "c0000000-0000-4000-8000-%012d" % n


def _rack(cloud, cn3_shares_storage=True):
    """CN1 (drained) with a PF child; targets: CN2 (flat, 4 VCPU free
    after its own consumer), CN3 (nested, its PF has 1 VF), CN4 (8 VCPU,
    no PF); a sharing storage pool serving CN1, CN2 and (in both
    aggregates, unless ``cn3_shares_storage`` is False) CN3."""
    cloud.provider(
        "CN1",
        inventories={"VCPU": {"total": 32}, "MEMORY_MB": {"total": 16384}},
        traits=["HW_CPU_X86_AVX2"],
        aggregates=[AGG_STORAGE],
    )
    cloud.provider("CN1-PF", "CN1", {"SRIOV_NET_VF": {"total": 4}})
    cloud.provider(
        "CN2",
        inventories={"VCPU": {"total": 8}, "MEMORY_MB": {"total": 8192}},
        aggregates=[AGG_STORAGE],
    )
    cloud.provider(
        "CN3",
        inventories={"VCPU": {"total": 8}, "MEMORY_MB": {"total": 8192}},
        traits=["HW_CPU_X86_AVX2"],
        aggregates=[AGG_RACK2, AGG_STORAGE] if cn3_shares_storage else [AGG_RACK2],
    )
    cloud.provider("CN3-PF", "CN3", {"SRIOV_NET_VF": {"total": 1}})
    cloud.provider(
        "CN4",
        inventories={"VCPU": {"total": 8}, "MEMORY_MB": {"total": 8192}},
        aggregates=[AGG_RACK2],
    )
    cloud.provider(
        "STORE",
        inventories={"DISK_GB": {"total": 1000}},
        traits=["MISC_SHARES_VIA_AGGREGATE"],
        aggregates=[AGG_STORAGE],
    )
    cloud.allocate(consumer(90), {"CN2": {"VCPU": 4, "MEMORY_MB": 1024}})
    # On CN1: a VM with a VF and a disk on the shared pool; two VMs of 4
    # VCPU (one last 4-VCPU slot on CN2, the other must go elsewhere).
    cloud.allocate(
        consumer(1),
        {
            "CN1": {"VCPU": 2, "MEMORY_MB": 2048},
            "CN1-PF": {"SRIOV_NET_VF": 1},
            "STORE": {"DISK_GB": 100},
        },
    )
    cloud.allocate(consumer(2), {"CN1": {"VCPU": 4, "MEMORY_MB": 1024}})
    cloud.allocate(consumer(3), {"CN1": {"VCPU": 4, "MEMORY_MB": 1024}})


def test_plan_applied_move_by_move_succeeds(app):
    cloud = app
    _rack(cloud, cn3_shares_storage=False)
    # The VF's consumer keeps its disk on STORE: its target must be a
    # tree STORE serves (in AGG_STORAGE). The only tree with a free VF,
    # CN3, is not: it fits nowhere, and explain's reason says why.
    plan = cloud.plan("providers=" + cloud.names["CN1"])
    assert plan["totals"] == {"consumers": 3, "placed": 2, "left": 1}
    (left,) = plan["unplaced"]
    assert left["consumer"] == consumer(1)
    assert "member_of=%s" % AGG_STORAGE in left["query"]
    assert left["reason"].startswith("group '', member_of:"), left["reason"]
    assert [(m["consumer"], m["target"]["name"]) for m in plan["moves"]] == [
        (consumer(2), "CN2"),
        (consumer(3), "CN3"),
    ]
    # With CN3 in STORE's aggregate too, it takes the VF's consumer.
    cloud.aggregates("CN3", [AGG_RACK2, AGG_STORAGE])
    plan = cloud.plan("providers=" + cloud.names["CN1"])
    assert plan["totals"] == {"consumers": 3, "placed": 3, "left": 0}
    assert plan["drained"] == [{"uuid": cloud.names["CN1"], "name": "CN1"}]
    moves = {m["consumer"]: m for m in plan["moves"]}
    assert [m["consumer"] for m in plan["moves"]] == [consumer(n) for n in (1, 2, 3)]
    # The VF's consumer needs a tree with a VF: CN3, its PF child
    # included; its disk stays on the shared pool, which serves CN3.
    first = moves[consumer(1)]
    assert first["target"]["name"] == "CN3"
    assert first["allocations"] == {
        cloud.names["CN3"]: {"resources": {"VCPU": 2, "MEMORY_MB": 2048}},
        cloud.names["CN3-PF"]: {"resources": {"SRIOV_NET_VF": 1}},
        cloud.names["STORE"]: {"resources": {"DISK_GB": 100}},
    }
    assert first["kept"] == [cloud.names["STORE"]]
    assert first["source"]["name"] == "CN1"
    # First fit: CN2's last 4 VCPU to the first, the second to CN3 (4
    # left after the first move there), never both to CN2.
    assert moves[consumer(2)]["target"]["name"] == "CN2"
    assert moves[consumer(3)]["target"]["name"] == "CN3"
    assert plan["capacity_left"]["VCPU"] == {"capacity": 24, "used": 14, "free": 10}
    for move in plan["moves"]:
        status, body = cloud.apply(move)
        assert status == 204, (move["consumer"], body)
    assert cloud.over_capacity() == []
    for name in ("CN1", "CN1-PF"):
        allocations = cloud.call(
            "/resource_providers/%s/allocations" % cloud.names[name]
        ).json()["allocations"]
        assert allocations == {}
    assert cloud.plan("providers=" + cloud.names["CN1"])["totals"]["consumers"] == 0


def test_a_consumer_that_fits_nowhere_has_no_candidate(app):
    cloud = app
    _rack(cloud)
    cloud.allocate(consumer(4), {"CN1": {"VCPU": 12, "MEMORY_MB": 1024}})
    plan = cloud.plan("in_tree=" + cloud.names["CN1-PF"])
    assert plan["totals"] == {"consumers": 4, "placed": 3, "left": 1}
    (left,) = plan["unplaced"]
    assert left["consumer"] == consumer(4)
    assert left["query"] == "resources=MEMORY_MB:1024,VCPU:12"
    assert left["reason"] == left["explain"]["reason"]
    assert left["reason"].startswith("group '', capacity:VCPU:")
    assert {"filter": "capacity:VCPU", "providers": 0} in left["explain"]["groups"][""]
    # Outside the drained tree, GET /allocation_candidates has nothing
    # for it either.
    found = cloud.call("/allocation_candidates?" + left["query"]).json()
    roots = {
        s["root_provider_uuid"]
        for rp, s in found["provider_summaries"].items()
        if any(rp in r["allocations"] for r in found["allocation_requests"])
    }
    assert roots <= {cloud.names["CN1"]}


def test_the_last_slot_goes_to_one_consumer(app):
    """CN2 takes one more consumer of 4 VCPU; three ask for it: the plan
    puts one there, one on CN3 and one on CN4, and a fourth is left."""
    cloud = app
    _rack(cloud)
    cloud.allocate(consumer(4), {"CN1": {"VCPU": 4, "MEMORY_MB": 1024}})
    cloud.allocate(consumer(5), {"CN1": {"VCPU": 6, "MEMORY_MB": 1024}})
    plan = cloud.plan("providers=" + cloud.names["CN1"])
    targets = {m["consumer"]: m["target"]["name"] for m in plan["moves"]}
    assert targets == {
        consumer(1): "CN3",
        consumer(2): "CN2",
        consumer(3): "CN3",
        consumer(4): "CN4",
    }
    assert [u["consumer"] for u in plan["unplaced"]] == [consumer(5)]
    assert plan["unplaced"][0]["reason"].startswith("group '', capacity:VCPU")
    for move in plan["moves"]:
        assert cloud.apply(move)[0] == 204
    assert cloud.over_capacity() == []


def _targets(cloud, strategy):
    plan = cloud.plan("providers=%s&strategy=%s" % (cloud.names["CN1"], strategy))
    return [m["target"]["name"] for m in plan["moves"]]


def test_strategies_differ(app):
    """Three hosts of 8 VCPU, used 0 (H1), 1 (H2) and 6 (H3); consumers
    of 2 and 1 VCPU on the drained host: first fit takes H1 for both
    (lowest root id); spread the least used, H1 then H2 (H1 at 25% after
    the first); pack the most used, H3 then (H3 full) H2."""
    cloud = app
    cloud.provider("CN1", inventories={"VCPU": {"total": 8}})
    for name in ("H1", "H2", "H3"):
        cloud.provider(name, inventories={"VCPU": {"total": 8}})
    cloud.allocate(consumer(80), {"H2": {"VCPU": 1}})
    cloud.allocate(consumer(81), {"H3": {"VCPU": 6}})
    cloud.allocate(consumer(1), {"CN1": {"VCPU": 2}})
    cloud.allocate(consumer(2), {"CN1": {"VCPU": 1}})
    assert _targets(cloud, "first") == ["H1", "H1"]
    assert _targets(cloud, "spread") == ["H1", "H2"]
    assert _targets(cloud, "pack") == ["H3", "H2"]


def test_required_traits_where_the_provider_carries_them(app):
    """required=HW_CPU_X86_AVX2: the consumer on an AVX2 host keeps it
    (CN3, not CN2 nor CN4); target_member_of narrows the targets."""
    cloud = app
    _rack(cloud)
    plan = cloud.plan("providers=%s&required=HW_CPU_X86_AVX2" % cloud.names["CN1"])
    moves = {m["consumer"]: m for m in plan["moves"]}
    assert moves[consumer(2)]["target"]["name"] == "CN3"
    assert "required=HW_CPU_X86_AVX2" in moves[consumer(2)]["query"]
    plan = cloud.plan(
        "providers=%s&target_member_of=%s" % (cloud.names["CN1"], AGG_RACK2)
    )
    assert [m["target"]["name"] for m in plan["moves"]] == ["CN3", "CN3", "CN4"]
    assert plan["capacity_left"]["VCPU"]["free"] == 10


def test_statements_do_not_grow_with_consumers(app):
    """One read of the consumers' allocations, not one per consumer: a
    plan of 2 consumers and one of 12 (each of another shape) run as many
    statements, through the SQL index (the catalog off: no lookup is
    answered from memory, and no catalog comparison runs by the clock)."""
    cloud = app
    cloud.provider("CN1", inventories={"VCPU": {"total": 128}})
    cloud.provider("H1", inventories={"VCPU": {"total": 128}})
    counted = []

    def count(conn, cursor, statement, *_args):
        counted.append(statement)

    def statements():
        counted.clear()
        sa.event.listen(cloud.db.engine, "before_cursor_execute", count)
        try:
            with fixtures.overrides(**{"placement.provider_catalog": False}):
                plan = cloud.plan("providers=" + cloud.names["CN1"])
        finally:
            sa.event.remove(cloud.db.engine, "before_cursor_execute", count)
        assert plan["totals"]["left"] == 0
        return list(counted)

    for n in (1, 2):
        cloud.allocate(consumer(n), {"CN1": {"VCPU": 1}})
    few = statements()
    for n in range(3, 13):
        cloud.allocate(consumer(n), {"CN1": {"VCPU": n}})
    many = statements()
    assert len(many) == len(few), (few, many)


def test_bad_input_and_policy(app):
    cloud = app
    cloud.provider("CN1", inventories={"VCPU": {"total": 8}})
    rp = cloud.names["CN1"]
    for query, text in [
        ("", "exactly one of providers, in_tree or member_of"),
        ("providers=%s&in_tree=%s" % (rp, rp), "exactly one"),
        ("providers=nope", "does not match"),
        ("providers=%s&strategy=best" % rp, "is not one of"),
        ("providers=%s" % uuid.uuid4(), "No resource provider with uuid"),
        ("providers=%s&required=CUSTOM_NOPE" % rp, "CUSTOM_NOPE"),
        ("providers=%s&bogus=1" % rp, "bogus"),
    ]:
        body = cloud.plan(query, status=400)
        assert text in body["errors"][0]["detail"], (query, body)
    member = {"x-auth-token": "someone", "openstack-api-version": "placement 1.39"}
    cloud.plan("providers=" + rp, status=403, headers=member)


def test_manage_drain_plan(app):
    cloud = app
    _rack(cloud)
    url = cloud.db.engine.url.render_as_string(hide_password=False)
    env = {"OS_PLACEMENT_DATABASE__CONNECTION": url}
    cmd = [
        helpers.script("placement-manage"),
        "drain-plan",
        "--providers",
        cloud.names["CN1"],
    ]
    result = helpers.run(cmd + ["--json"], env)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["totals"]["placed"] == 3
    api = cloud.plan("providers=" + cloud.names["CN1"])
    assert plan == api
    result = helpers.run(cmd, env)
    assert result.returncode == 0, result.stderr
    assert "CN3" in result.stdout and "Placed 3 of 3" in result.stdout
    assert (
        urllib.parse.quote(cloud.names["CN1"]) in result.stdout
        or "CN1" in result.stdout
    )


def test_member_of_drains_an_aggregate_with_its_storage(app):
    """member_of drains every tree with a member in the aggregate: CN1,
    CN2 and the storage pool. The consumer with a disk on the pool needs
    DISK_GB in the request now (a third role) and fits nowhere; the
    others go to CN3 and CN4, in plan order (CN1's consumers, then
    CN2's)."""
    cloud = app
    _rack(cloud, cn3_shares_storage=False)
    plan = cloud.plan("member_of=" + AGG_STORAGE)
    assert [d["name"] for d in plan["drained"]] == ["CN1", "CN2", "STORE"]
    assert [(m["consumer"], m["target"]["name"]) for m in plan["moves"]] == [
        (consumer(2), "CN3"),
        (consumer(3), "CN3"),
        (consumer(90), "CN4"),
    ]
    (left,) = plan["unplaced"]
    assert left["consumer"] == consumer(1)
    assert "resources2=DISK_GB:100" in left["query"]
    assert "group_policy=none" in left["query"]
    assert left["reason"] == (
        "group '2', resources:DISK_GB: no provider has DISK_GB inventory"
    )
    for move in plan["moves"]:
        assert cloud.apply(move)[0] == 204
    assert cloud.over_capacity() == []


def test_a_target_with_sharing_storage(app):
    """The drained host's disk is local; the target has none but a
    sharing pool in its aggregate serves it: the plan uses the pool, as
    GET /allocation_candidates would."""
    cloud = app
    cloud.provider("CN1", inventories={"VCPU": {"total": 8}, "DISK_GB": {"total": 100}})
    cloud.provider("CN2", inventories={"VCPU": {"total": 8}}, aggregates=[AGG_RACK2])
    cloud.provider(
        "POOL",
        inventories={"DISK_GB": {"total": 1000}},
        traits=["MISC_SHARES_VIA_AGGREGATE"],
        aggregates=[AGG_RACK2],
    )
    cloud.allocate(consumer(1), {"CN1": {"VCPU": 1, "DISK_GB": 10}})
    plan = cloud.plan("providers=" + cloud.names["CN1"])
    (move,) = plan["moves"]
    assert move["target"]["name"] == "CN2"
    assert move["allocations"] == {
        cloud.names["CN2"]: {"resources": {"VCPU": 1}},
        cloud.names["POOL"]: {"resources": {"DISK_GB": 10}},
    }
    assert cloud.apply(move)[0] == 204
    assert cloud.over_capacity() == []


def test_first_fit_by_pages_answers_the_same(app, monkeypatch):
    """First fit reads usage page by page of trees: with pages of one
    tree (it stops before CN4 and the pool, so the capacity left comes
    from the cloud's usage by class) the plan is the one read whole."""
    from placement.objects.drain import planner

    cloud = app
    _rack(cloud)
    whole = cloud.plan("providers=" + cloud.names["CN1"])
    monkeypatch.setattr(planner, "PAGE", 1)
    paged = cloud.plan("providers=" + cloud.names["CN1"])
    assert paged == whole
    assert paged["capacity_left"]["VCPU"] == {"capacity": 24, "used": 14, "free": 10}


def _target_part(cloud, move):
    """The move's planned allocation less what the consumer keeps (its
    allocations on the ``kept`` providers): the part the engine chose."""
    current = cloud.call("/allocations/" + move["consumer"]).json()["allocations"]
    part = {}
    for rp, entry in move["allocations"].items():
        resources = dict(entry["resources"])
        if rp in move["kept"]:
            for rc, n in current[rp]["resources"].items():
                resources[rc] -= n
        resources = {rc: n for rc, n in resources.items() if n}
        if resources:
            part[rp] = resources
    return part


def assert_moves_are_candidates(cloud, plan):
    """Every move's target part is one of the allocation requests GET
    /allocation_candidates lists for its ``query``, on the cloud as it
    stands (before any move is applied)."""
    assert plan["moves"]
    for move in plan["moves"]:
        part = _target_part(cloud, move)
        assert part in cloud.candidate_parts(move["query"]), (move, part)


def test_each_move_is_a_candidate_of_its_query(app):
    """The rack's plan (the VF consumer's disk kept on STORE, its target
    in STORE's aggregate) and a plan that keeps the anchor (below): each
    planned allocation is a candidate of the move's query."""
    cloud = app
    _rack(cloud)
    for strategy in ("first", "spread", "pack"):
        plan = cloud.plan("providers=%s&strategy=%s" % (cloud.names["CN1"], strategy))
        assert plan["totals"]["left"] == 0
        assert_moves_are_candidates(cloud, plan)
    first = plan["moves"][0]
    assert first["query"] == (
        "resources=MEMORY_MB:2048,VCPU:2&member_of=%s&resources1=SRIOV_NET_VF:1"
        % AGG_STORAGE
    )


def _pools(cloud):
    """CN1 in AGG_STORAGE (no disk); STORE (drained) and STORE2 share
    disk there; CN4 (local disk) and STORE3 in AGG_RACK2, CN4 before
    STORE2 in root id order; CN5 with a local disk and no aggregate; CN6
    alone in its aggregate, without disk. Consumers keep VCPU on CN1,
    CN5, CN6 and a disk on STORE."""
    cloud.provider("CN1", inventories={"VCPU": {"total": 8}}, aggregates=[AGG_STORAGE])
    for name, aggregate in (("STORE", AGG_STORAGE),):
        cloud.provider(
            name,
            inventories={"DISK_GB": {"total": 1000}},
            traits=["MISC_SHARES_VIA_AGGREGATE"],
            aggregates=[aggregate],
        )
    cloud.provider(
        "CN4",
        inventories={"VCPU": {"total": 8}, "DISK_GB": {"total": 1000}},
        aggregates=[AGG_RACK2],
    )
    for name, aggregate in (("STORE2", AGG_STORAGE), ("STORE3", AGG_RACK2)):
        cloud.provider(
            name,
            inventories={"DISK_GB": {"total": 1000}},
            traits=["MISC_SHARES_VIA_AGGREGATE"],
            aggregates=[aggregate],
        )
    cloud.provider("CN5", inventories={"VCPU": {"total": 8}, "DISK_GB": {"total": 60}})
    cloud.provider("CN6", inventories={"VCPU": {"total": 8}}, aggregates=[AGG_LONE])
    cloud.allocate(consumer(1), {"CN1": {"VCPU": 1}, "STORE": {"DISK_GB": 100}})
    cloud.allocate(consumer(2), {"CN5": {"VCPU": 1}, "STORE": {"DISK_GB": 50}})
    cloud.allocate(consumer(3), {"CN6": {"VCPU": 1}, "STORE": {"DISK_GB": 10}})
    cloud.allocate(consumer(4), {"CN5": {"VCPU": 1}, "STORE": {"DISK_GB": 20}})


def test_draining_a_sharing_pool_keeps_the_anchor(app):
    """Draining STORE alone: each consumer's new disk comes from a
    provider serving the tree it keeps (CN1: STORE2, not CN4's local disk
    nor STORE3; CN5, in no aggregate: its own disk, asked with in_tree);
    CN6's consumer, which nothing serves, fits nowhere; CN5's second
    consumer finds its disk full. Applied, the moves succeed."""
    cloud = app
    _pools(cloud)
    for strategy in ("first", "spread", "pack"):
        plan = cloud.plan("providers=%s&strategy=%s" % (cloud.names["STORE"], strategy))
        moves = {m["consumer"]: m for m in plan["moves"]}
        assert sorted(moves) == [consumer(1), consumer(2)], plan
        assert moves[consumer(1)]["target"]["name"] == "CN1"
        assert moves[consumer(1)]["query"] == (
            "resources=DISK_GB:100&member_of=%s" % AGG_STORAGE
        )
        assert moves[consumer(1)]["allocations"] == {
            cloud.names["CN1"]: {"resources": {"VCPU": 1}},
            cloud.names["STORE2"]: {"resources": {"DISK_GB": 100}},
        }
        assert moves[consumer(1)]["kept"] == [cloud.names["CN1"]]
        assert moves[consumer(2)]["target"]["name"] == "CN5"
        assert moves[consumer(2)]["query"] == (
            "resources=DISK_GB:50&in_tree=%s" % cloud.names["CN5"]
        )
        assert moves[consumer(2)]["allocations"] == {
            cloud.names["CN5"]: {"resources": {"VCPU": 1, "DISK_GB": 50}},
        }
        left = {u["consumer"]: u for u in plan["unplaced"]}
        assert sorted(left) == [consumer(3), consumer(4)]
        assert "member_of=%s" % AGG_LONE in left[consumer(3)]["query"]
        assert left[consumer(3)]["reason"].startswith("group '', "), left
        # CN5's disk has 10 GB left once the first consumer's 50 are in.
        assert left[consumer(4)]["reason"] == (
            "group '', capacity:DISK_GB: 1 providers have DISK_GB but none has "
            "20 free (closest: CN5, 10 free)"
        )
        assert_moves_are_candidates(cloud, plan)
    for move in plan["moves"]:
        assert cloud.apply(move)[0] == 204
    assert cloud.over_capacity() == []
    held = cloud.call(
        "/resource_providers/%s/allocations" % cloud.names["STORE"]
    ).json()["allocations"]
    assert sorted(held) == [consumer(3), consumer(4)]


def test_a_consumer_split_over_hosts_stays_on_the_host_it_keeps(app, monkeypatch):
    """MEMORY_MB on the drained CN1, VCPU on CN5 (not drained, no
    sharing provider anywhere): the memory must come from CN5's tree, as
    the one anchor of a candidate, not from H1 (first in root id order);
    the second consumer finds CN5 full, as the plan left it, also when
    first fit reads usage a tree at a time; a consumer keeping two hosts
    has no equivalent request."""
    from placement.objects.drain import planner

    cloud = app
    cloud.provider("CN1", inventories={"MEMORY_MB": {"total": 4096}})
    cloud.provider(
        "H1", inventories={"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}}
    )
    cloud.provider(
        "CN5", inventories={"VCPU": {"total": 8}, "MEMORY_MB": {"total": 1024}}
    )
    cloud.provider("CN7", inventories={"VCPU": {"total": 8}})
    cloud.allocate(consumer(90), {"CN5": {"MEMORY_MB": 512}})
    cloud.allocate(consumer(1), {"CN5": {"VCPU": 1}, "CN1": {"MEMORY_MB": 256}})
    cloud.allocate(consumer(2), {"CN5": {"VCPU": 1}, "CN1": {"MEMORY_MB": 512}})
    cloud.allocate(
        consumer(3), {"CN5": {"VCPU": 1}, "CN7": {"VCPU": 1}, "CN1": {"MEMORY_MB": 1}}
    )
    whole = cloud.plan("providers=" + cloud.names["CN1"])
    monkeypatch.setattr(planner, "PAGE", 1)
    paged = cloud.plan("providers=" + cloud.names["CN1"])
    assert paged == whole
    (move,) = whole["moves"]
    assert move["consumer"] == consumer(1)
    assert move["target"]["name"] == "CN5"
    assert move["query"] == "resources=MEMORY_MB:256&in_tree=%s" % cloud.names["CN5"]
    assert move["allocations"] == {
        cloud.names["CN5"]: {"resources": {"VCPU": 1, "MEMORY_MB": 256}}
    }
    left = {u["consumer"]: u for u in whole["unplaced"]}
    assert sorted(left) == [consumer(2), consumer(3)]
    assert left[consumer(2)]["reason"] == (
        "group '', capacity:MEMORY_MB: 1 providers have MEMORY_MB but none has "
        "512 free (closest: CN5, 256 free)"
    )
    assert left[consumer(3)]["reason"].startswith(
        "its allocations outside the drained trees are in 2 trees"
    )
    assert_moves_are_candidates(cloud, whole)
    assert cloud.apply(move)[0] == 204
    assert cloud.over_capacity() == []


def test_a_wrong_or_null_root_is_a_conflict(app):
    """A provider whose root_provider_id is NULL or not the top of its
    parent chain (the audit's wrong_roots), set with SQL: 409 naming it
    and the audit, never a 500 or a plan of the wrong tree."""
    cloud = app
    _rack(cloud)
    cn1, cn2 = cloud.provider_id("CN1"), cloud.provider_id("CN2")
    pf = cloud.provider_id("CN1-PF")
    set_root = "UPDATE resource_providers SET root_provider_id = %s WHERE id = :id"
    cases = [
        (set_root % "NULL", cn1, "providers=" + cloud.names["CN1"], "CN1"),
        (set_root % "NULL", cn1, "in_tree=" + cloud.names["CN1-PF"], "CN1"),
        (set_root % "NULL", cn1, "member_of=" + AGG_STORAGE, "CN1"),
        (set_root % str(cn2), pf, "providers=" + cloud.names["CN1"], "CN1-PF"),
        (set_root % "NULL", pf, "in_tree=" + cloud.names["CN1"], "CN1-PF"),
        (set_root % str(cn2), cn1, "providers=" + cloud.names["CN1"], "CN1"),
    ]
    for statement, rp, query, named in cases:
        cloud.sql(statement, id=rp)
        try:
            body = cloud.plan(query, status=409)
        finally:
            cloud.sql(set_root % ":root", id=rp, root=cn1)
        (error,) = body["errors"]
        assert cloud.names[named] in error["detail"], (query, body)
        assert "placement-manage audit" in error["detail"]
    # A kept provider (STORE, outside the drained tree) with a NULL root.
    store = cloud.provider_id("STORE")
    cloud.sql(set_root % "NULL", id=store)
    body = cloud.plan("providers=" + cloud.names["CN1"], status=409)
    assert cloud.names["STORE"] in body["errors"][0]["detail"]
    cloud.sql(set_root % ":root", id=store, root=store)
    assert cloud.plan("providers=" + cloud.names["CN1"])["totals"]["left"] == 0


def test_a_consumer_without_its_consumer_row(app):
    """Allocations without a consumers row (written before consumers
    were recorded): the move carries the owner online data migrations
    would give it ([placement] incomplete_consumer_project_id, _user_id)
    and a null generation; its PUT succeeds and creates the row."""
    cloud = app
    _rack(cloud)
    cloud.sql("DELETE FROM consumers WHERE uuid = :uuid", uuid=consumer(2))
    plan = cloud.plan("providers=" + cloud.names["CN1"])
    moves = {m["consumer"]: m for m in plan["moves"]}
    move = moves[consumer(2)]
    incomplete = "00000000-0000-0000-0000-000000000000"
    assert (move["project_id"], move["user_id"]) == (incomplete, incomplete)
    assert move["consumer_generation"] is None
    assert move["consumer_type"] is None
    for move in plan["moves"]:
        move = dict(move, consumer_type=move["consumer_type"] or "INSTANCE")
        assert cloud.apply(move)[0] == 204, move
    found = cloud.call("/allocations/" + consumer(2)).json()
    assert (found["project_id"], found["user_id"]) == (incomplete, incomplete)
    assert found["consumer_generation"] == 1
    assert cloud.over_capacity() == []


def test_a_consumer_whose_owner_rows_are_gone(app):
    """A consumer whose project or user row is missing (the audit's
    missing_owners): the move carries the incomplete-consumer id for the
    missing one, and its PUT succeeds with that owner."""
    cloud = app
    _rack(cloud)
    moved = cloud.plan("providers=" + cloud.names["CN1"])["moves"]
    owners = {m["consumer"]: (m["project_id"], m["user_id"]) for m in moved}
    cloud.sql(
        "DELETE FROM projects WHERE external_id = :project",
        project=owners[consumer(2)][0],
    )
    cloud.sql(
        "DELETE FROM users WHERE external_id = :user", user=owners[consumer(2)][1]
    )
    plan = cloud.plan("providers=" + cloud.names["CN1"])
    incomplete = "00000000-0000-0000-0000-000000000000"
    for move in plan["moves"]:
        # Every consumer of the rack shares the one project and user.
        assert (move["project_id"], move["user_id"]) == (incomplete, incomplete)
        assert move["consumer_generation"] is not None
        assert cloud.apply(move)[0] == 204, move
    found = cloud.call("/allocations/" + consumer(2)).json()
    assert (found["project_id"], found["user_id"]) == (incomplete, incomplete)
    assert cloud.over_capacity() == []

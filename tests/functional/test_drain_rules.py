"""GET /maintenance/drain's rules, on SQLite, MySQL and PostgreSQL
(doc/drain.md): required traits are kept only where the consumer's
provider carries them (numbered groups too), forbidden traits and target
aggregates narrow the targets; every strategy's plan, applied move by
move, succeeds and leaves nothing over capacity (nested trees, one last
VF wanted twice); a consumer left because earlier moves took the room
has no candidate once they are applied; spread and pack choose the
least and most used two-level trees; bad input is a 400 with the
contract's error body; ``placement-manage drain-plan`` prints the
consumers left and fails on bad input.

No sharing providers here (tests/functional/test_drain.py has them)."""

import json
import uuid

import pytest

from tests import fixtures
from tests import helpers
from tests.functional import drain_cloud
from tests.functional.drain_cloud import ADMIN

AVX2 = "HW_CPU_X86_AVX2"
AGG_A = "5b000000-0000-4000-8000-0000000000a1"
AGG_B = "5b000000-0000-4000-8000-0000000000b2"
AGG_C = "5b000000-0000-4000-8000-0000000000c3"
STRATEGIES = ("first", "spread", "pack")


@pytest.fixture(params=fixtures.BACKENDS)
def cloud(request):
    fixtures.require_backend(request.param)
    with fixtures.app(request.param) as (app, db):
        yield Cloud(app, db)


def consumer(n):
    """Consumer uuids that sort in ``n`` order (plan order is by uuid)."""
    return "c1000000-0000-4000-8000-%012d" % n


class Cloud(drain_cloud.Cloud):
    """drain_cloud's, with its own project, plans as responses and whole
    plans applied."""

    PROJECT_ID = "p-rules"
    USER_ID = "u-rules"

    def plan(self, query, status=200, headers=ADMIN):
        return self.drain_response(query, status, headers)

    def drain(self, *names, **params):
        query = "providers=" + ",".join(self.names[n] for n in names)
        for key, value in params.items():
            for one in value if isinstance(value, list) else [value]:
                query += "&%s=%s" % (key, one)
        return self.plan(query).json()

    def apply(self, plan):
        """Every move of ``plan`` as a PUT /allocations, in plan order;
        each must succeed."""
        for move in plan["moves"]:
            resp = self.put_move(move)
            assert resp.status == 204, (move["consumer"], resp.body)

    def candidate_roots(self, query):
        """The root names of GET /allocation_candidates?``query``'s
        allocation requests."""
        found = self.call("/allocation_candidates?" + query).json()
        summaries = found["provider_summaries"]
        return {
            self.name(summaries[rp]["root_provider_uuid"])
            for request in found["allocation_requests"]
            for rp in request["allocations"]
        }


def targets(plan):
    return {m["consumer"]: m["target"]["name"] for m in plan["moves"]}


# -- 1. required traits where the consumer's provider carries them -------


def test_required_trait_kept_only_where_the_provider_carries_it(cloud):
    """D1 carries AVX2, D2 does not; one consumer on each. The only room
    left is one slot on PLAIN (no AVX2, first in root id order) and one
    on FAST (AVX2): D1's consumer keeps AVX2 and goes to FAST, D2's asks
    no trait and takes PLAIN. Were the trait dropped, D1's would take
    PLAIN; were it kept everywhere, D2's would fit nowhere."""
    cloud.provider("D1", inventories={"VCPU": 8}, traits=[AVX2])
    cloud.provider("D2", inventories={"VCPU": 8})
    cloud.provider("PLAIN", inventories={"VCPU": 4})
    cloud.provider("FAST", inventories={"VCPU": 4}, traits=[AVX2])
    cloud.allocate(consumer(1), {"D1": {"VCPU": 4}})
    cloud.allocate(consumer(2), {"D2": {"VCPU": 4}})
    plan = cloud.drain("D1", "D2", required=AVX2)
    moves = {m["consumer"]: m for m in plan["moves"]}
    assert moves[consumer(1)]["query"] == "resources=VCPU:4&required=HW_CPU_X86_AVX2"
    assert moves[consumer(2)]["query"] == "resources=VCPU:4"
    assert targets(plan) == {consumer(1): "FAST", consumer(2): "PLAIN"}
    assert plan["unplaced"] == []
    # The AVX2 consumer's own query finds AVX2 hosts only (the drained
    # one included).
    assert cloud.candidate_roots(moves[consumer(1)]["query"]) <= {"D1", "FAST"}
    cloud.apply(plan)
    assert cloud.over_capacity() == []


def test_a_numbered_group_gets_a_trait_only_from_its_own_provider(cloud):
    """The compute node carries AVX2, its PF child does not: the VF's
    group (resources1) gets no required1, so a target whose PF lacks AVX2
    too takes it. A trait the PF carries (CUSTOM_PHYSNET_A) goes on the
    PF's group only."""
    cloud.provider("D1", inventories={"VCPU": 8}, traits=[AVX2])
    cloud.provider("D1-PF", "D1", {"SRIOV_NET_VF": 4}, traits=["CUSTOM_PHYSNET_A"])
    cloud.provider("T1", inventories={"VCPU": 8}, traits=[AVX2])
    cloud.provider("T1-PF", "T1", {"SRIOV_NET_VF": 4}, traits=["CUSTOM_PHYSNET_B"])
    cloud.provider("T2", inventories={"VCPU": 8}, traits=[AVX2])
    cloud.provider("T2-PF", "T2", {"SRIOV_NET_VF": 4}, traits=["CUSTOM_PHYSNET_A"])
    cloud.allocate(consumer(1), {"D1": {"VCPU": 2}, "D1-PF": {"SRIOV_NET_VF": 1}})
    plan = cloud.drain("D1", required=AVX2)
    (move,) = plan["moves"]
    assert move["query"] == (
        "resources=VCPU:2&required=HW_CPU_X86_AVX2&resources1=SRIOV_NET_VF:1"
    )
    assert move["target"]["name"] == "T1"
    plan = cloud.drain("D1", required=[AVX2, "CUSTOM_PHYSNET_A"])
    (move,) = plan["moves"]
    assert move["query"] == (
        "resources=VCPU:2&required=HW_CPU_X86_AVX2"
        "&resources1=SRIOV_NET_VF:1&required1=CUSTOM_PHYSNET_A"
    )
    assert move["target"]["name"] == "T2"
    assert move["allocations"] == {
        cloud.names["T2"]: {"resources": {"VCPU": 2}},
        cloud.names["T2-PF"]: {"resources": {"SRIOV_NET_VF": 1}},
    }
    cloud.apply(plan)
    assert cloud.over_capacity() == []


def test_any_of_traits_kept_where_one_is_carried(cloud):
    """required=in:A,B is kept for a provider carrying either (whole),
    dropped for one carrying neither."""
    cloud.provider("D1", inventories={"VCPU": 8}, traits=["CUSTOM_B"])
    cloud.provider("D2", inventories={"VCPU": 8})
    cloud.provider("PLAIN", inventories={"VCPU": 1})
    cloud.provider("WITH-A", inventories={"VCPU": 1}, traits=["CUSTOM_A"])
    cloud.allocate(consumer(1), {"D1": {"VCPU": 1}})
    cloud.allocate(consumer(2), {"D2": {"VCPU": 1}})
    plan = cloud.drain("D1", "D2", required="in:CUSTOM_A,CUSTOM_B")
    queries = {m["consumer"]: m["query"] for m in plan["moves"]}
    assert queries == {
        consumer(1): "resources=VCPU:1&required=in:CUSTOM_A,CUSTOM_B",
        consumer(2): "resources=VCPU:1",
    }
    assert targets(plan) == {consumer(1): "WITH-A", consumer(2): "PLAIN"}


def test_a_forbidden_trait_keeps_off_every_target_provider(cloud):
    """required=!CUSTOM_X, though no drained provider carries it: X
    (CUSTOM_X on its root, first in root id order) is never a target, nor
    Y for the consumer with a VF (CUSTOM_X on Y's PF): the trait is
    forbidden on every group. With CUSTOM_X everywhere both are left."""
    cloud.provider("D1", inventories={"VCPU": 8})
    cloud.provider("D1-PF", "D1", {"SRIOV_NET_VF": 4})
    cloud.provider("X", inventories={"VCPU": 8}, traits=["CUSTOM_X"])
    cloud.provider("X-PF", "X", {"SRIOV_NET_VF": 4})
    cloud.provider("Y", inventories={"VCPU": 8})
    cloud.provider("Y-PF", "Y", {"SRIOV_NET_VF": 4}, traits=["CUSTOM_X"])
    cloud.provider("Z", inventories={"VCPU": 8})
    cloud.provider("Z-PF", "Z", {"SRIOV_NET_VF": 4})
    cloud.allocate(consumer(1), {"D1": {"VCPU": 2}, "D1-PF": {"SRIOV_NET_VF": 1}})
    cloud.allocate(consumer(2), {"D1": {"VCPU": 2}})
    assert set(targets(cloud.drain("D1")).values()) == {"X"}
    plan = cloud.drain("D1", required="!CUSTOM_X")
    assert targets(plan) == {consumer(1): "Z", consumer(2): "Y"}
    queries = {m["consumer"]: m["query"] for m in plan["moves"]}
    assert queries[consumer(1)] == (
        "resources=VCPU:2&required=!CUSTOM_X"
        "&resources1=SRIOV_NET_VF:1&required1=!CUSTOM_X"
    )
    assert queries[consumer(2)] == "resources=VCPU:2&required=!CUSTOM_X"
    # Nothing without CUSTOM_X anywhere: left, and explain says why.
    plan = cloud.drain("D1", required=["!CUSTOM_X", "!HW_CPU_X86_AVX2"])
    assert plan["totals"]["left"] == 0
    cloud.call("/traits/CUSTOM_X", "PUT")
    for name in ("Y", "Z"):
        rp = cloud.names[name]
        generation = cloud.call("/resource_providers/" + rp).json()["generation"]
        cloud.ok(
            "/resource_providers/%s/traits" % rp,
            "PUT",
            {"resource_provider_generation": generation, "traits": ["CUSTOM_X"]},
        )
    plan = cloud.drain("D1", required="!CUSTOM_X")
    assert plan["moves"] == []
    assert [u["consumer"] for u in plan["unplaced"]] == [consumer(1), consumer(2)]
    assert all("CUSTOM_X" in u["reason"] for u in plan["unplaced"]), plan


def test_target_member_of_forbidden_and_any_of(cloud):
    """target_member_of=!A keeps off A's members; in:B,C takes members
    of B or C only; an aggregate on the root counts for its PF child."""
    cloud.provider("D1", inventories={"VCPU": 8})
    cloud.provider("D1-PF", "D1", {"SRIOV_NET_VF": 4})
    cloud.provider("HA", inventories={"VCPU": 8}, aggregates=[AGG_A])
    cloud.provider("HA-PF", "HA", {"SRIOV_NET_VF": 4})
    cloud.provider("HB", inventories={"VCPU": 2}, aggregates=[AGG_B])
    cloud.provider("HB-PF", "HB", {"SRIOV_NET_VF": 4})
    cloud.provider("HN", inventories={"VCPU": 8})
    cloud.provider("HN-PF", "HN", {"SRIOV_NET_VF": 4})
    cloud.provider("HC", inventories={"VCPU": 2}, aggregates=[AGG_C])
    cloud.provider("HC-PF", "HC", {"SRIOV_NET_VF": 4})
    cloud.allocate(consumer(1), {"D1": {"VCPU": 2}, "D1-PF": {"SRIOV_NET_VF": 1}})
    cloud.allocate(consumer(2), {"D1": {"VCPU": 2}})
    assert set(targets(cloud.drain("D1")).values()) == {"HA"}
    plan = cloud.drain("D1", target_member_of="!" + AGG_A)
    assert targets(plan) == {consumer(1): "HB", consumer(2): "HN"}
    assert plan["moves"][0]["query"] == (
        "resources=VCPU:2&member_of=!%s&resources1=SRIOV_NET_VF:1" % AGG_A
    )
    plan = cloud.drain("D1", target_member_of="in:%s,%s" % (AGG_B, AGG_C))
    assert targets(plan) == {consumer(1): "HB", consumer(2): "HC"}
    assert plan["unplaced"] == []
    assert plan["capacity_left"]["VCPU"] == {"capacity": 20, "used": 4, "free": 16}
    cloud.apply(plan)
    assert cloud.over_capacity() == []


# -- 2. every strategy's plan is feasible --------------------------------


def _nested_rack(cloud):
    """Drained: D1 (VCPU, memory) with a PF of 4 VFs; D2, a two-level
    tree: D2 -> D2-NUMA0 (VCPU) -> D2-PF (VFs). Targets: T1 with a PF of
    one VF; T2 -> T2-NUMA0 (VCPU) -> T2-PF, one of its two VFs used; T3,
    flat. Two free VFs in all and three consumers wanting one: the
    third (D2's, planned last) fits nowhere."""
    cloud.provider("D1", inventories={"VCPU": 16, "MEMORY_MB": 16384})
    cloud.provider("D1-PF", "D1", {"SRIOV_NET_VF": 4})
    cloud.provider("D2")
    cloud.provider("D2-NUMA0", "D2", {"VCPU": 8, "MEMORY_MB": 8192})
    cloud.provider("D2-PF", "D2-NUMA0", {"SRIOV_NET_VF": 4})
    cloud.provider("T1", inventories={"VCPU": 8, "MEMORY_MB": 8192})
    cloud.provider("T1-PF", "T1", {"SRIOV_NET_VF": 1})
    cloud.provider("T2")
    cloud.provider("T2-NUMA0", "T2", {"VCPU": 8, "MEMORY_MB": 8192})
    cloud.provider("T2-PF", "T2-NUMA0", {"SRIOV_NET_VF": 2})
    cloud.provider("T3", inventories={"VCPU": 6, "MEMORY_MB": 8192})
    cloud.allocate(
        consumer(90), {"T2-NUMA0": {"VCPU": 1}, "T2-PF": {"SRIOV_NET_VF": 1}}
    )
    cloud.allocate(
        consumer(1), {"D1": {"VCPU": 2, "MEMORY_MB": 512}, "D1-PF": {"SRIOV_NET_VF": 1}}
    )
    cloud.allocate(
        consumer(2), {"D1": {"VCPU": 1, "MEMORY_MB": 512}, "D1-PF": {"SRIOV_NET_VF": 1}}
    )
    cloud.allocate(consumer(3), {"D1": {"VCPU": 4, "MEMORY_MB": 1024}})
    cloud.allocate(consumer(4), {"D1": {"VCPU": 3, "MEMORY_MB": 1024}})
    cloud.allocate(consumer(5), {"D1": {"VCPU": 5, "MEMORY_MB": 1024}})
    cloud.allocate(consumer(6), {"D2-NUMA0": {"VCPU": 1}, "D2-PF": {"SRIOV_NET_VF": 1}})
    cloud.allocate(consumer(7), {"D2-NUMA0": {"VCPU": 2, "MEMORY_MB": 2048}})


VF_CONSUMERS = {consumer(1), consumer(2), consumer(6)}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_plan_applied_move_by_move(cloud, strategy):
    _nested_rack(cloud)
    plan = cloud.drain("D1", "D2", strategy=strategy)
    assert plan["strategy"] == strategy
    assert plan["totals"] == {"consumers": 7, "placed": 6, "left": 1}
    # Two free VFs, three consumers asking one: the first two get one
    # each (one per PF), D2's consumer is left.
    assert [u["consumer"] for u in plan["unplaced"]] == [consumer(6)]
    vf_targets = {}
    for move in plan["moves"]:
        for rp, held in move["allocations"].items():
            if "SRIOV_NET_VF" in held["resources"]:
                vf_targets[move["consumer"]] = cloud.name(rp)
    assert sorted(vf_targets) == [consumer(1), consumer(2)]
    assert sorted(vf_targets.values()) == ["T1-PF", "T2-PF"]
    # D2's two-level consumer asks by role: NUMA node and PF, numbered.
    left = plan["unplaced"][0]
    assert left["query"] == (
        "resources1=VCPU:1&resources2=SRIOV_NET_VF:1&group_policy=none"
    )
    assert "SRIOV_NET_VF" in left["reason"] or "took the room" in left["reason"]
    drained = {"D1", "D1-PF", "D2", "D2-NUMA0", "D2-PF"}
    for move in plan["moves"]:
        assert move["target"]["name"] in {"T1", "T2", "T3"}
        assert not {cloud.name(rp) for rp in move["allocations"]} & drained
    cloud.apply(plan)
    assert cloud.over_capacity() == []
    again = cloud.drain("D1", "D2", strategy=strategy)
    assert again["totals"]["consumers"] == 1


# -- 3. left because the moves before it took the room --------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_left_by_earlier_moves_has_no_candidate_once_they_are_applied(cloud, strategy):
    """Before the moves, D2's VF consumer has candidates outside the
    drained trees (the free VFs); the plan gives them to D1's consumers,
    planned first; once the moves are applied GET /allocation_candidates
    for its query finds nothing outside the drained trees."""
    _nested_rack(cloud)
    plan = cloud.drain("D1", "D2", strategy=strategy)
    (left,) = plan["unplaced"]
    drained = {"D1", "D2"}
    assert cloud.candidate_roots(left["query"]) - drained == {"T1", "T2"}
    assert left["explain"]["reason"] == left["reason"]
    cloud.apply(plan)
    assert cloud.candidate_roots(left["query"]) - drained == set()


# -- 6. spread and pack on two-level trees --------------------------------


def _numa_host(cloud, name, vcpu_used=0, vf_used=0, n=0):
    """name -> name-NUMA0 (VCPU 8) -> name-PF (4 VFs), with some use."""
    cloud.provider(name)
    cloud.provider(name + "-NUMA0", name, {"VCPU": 8})
    cloud.provider(name + "-PF", name + "-NUMA0", {"SRIOV_NET_VF": 4})
    held = {}
    if vcpu_used:
        held[name + "-NUMA0"] = {"VCPU": vcpu_used}
    if vf_used:
        held[name + "-PF"] = {"SRIOV_NET_VF": vf_used}
    if held:
        cloud.allocate(consumer(80 + n), held)


def test_spread_and_pack_on_two_level_trees(cloud):
    """Hosts of two levels below the root (NUMA node, PF). Use, as the
    mean of the VCPU and VF shares: H1 0, H2 (1/8 + 1/4) / 2, H3
    (6/8 + 3/4) / 2; a consumer with 2 VCPU and a VF, then one with 1
    VCPU and a VF. Spread: H1 (least), then H2 (H1 at 1/4 now, H2 at
    3/16). Pack: H3 (most; full after), then H2. First: H1, H1. A
    consumer asking VCPU only is ordered by VCPU alone: H4 with its VFs
    all used but no VCPU is the least used for it."""
    _numa_host(cloud, "D")
    _numa_host(cloud, "H1")
    _numa_host(cloud, "H2", vcpu_used=1, vf_used=1, n=2)
    _numa_host(cloud, "H3", vcpu_used=6, vf_used=3, n=3)
    cloud.allocate(consumer(1), {"D-NUMA0": {"VCPU": 2}, "D-PF": {"SRIOV_NET_VF": 1}})
    cloud.allocate(consumer(2), {"D-NUMA0": {"VCPU": 1}, "D-PF": {"SRIOV_NET_VF": 1}})

    def chosen(strategy):
        plan = cloud.drain("D", strategy=strategy)
        assert plan["unplaced"] == []
        return [
            sorted(cloud.name(rp) for rp in m["allocations"]) for m in plan["moves"]
        ]

    assert chosen("first") == [["H1-NUMA0", "H1-PF"], ["H1-NUMA0", "H1-PF"]]
    assert chosen("spread") == [["H1-NUMA0", "H1-PF"], ["H2-NUMA0", "H2-PF"]]
    assert chosen("pack") == [["H3-NUMA0", "H3-PF"], ["H2-NUMA0", "H2-PF"]]
    # VCPU only: H4's VFs are all used, its VCPU not; H1 gets some VCPU.
    _numa_host(cloud, "H4", vf_used=4, n=4)
    cloud.allocate(consumer(79), {"H1-NUMA0": {"VCPU": 1}})
    cloud.allocate(consumer(3), {"D-NUMA0": {"VCPU": 1}})
    plan = cloud.drain("D", strategy="spread")
    assert targets(plan)[consumer(3)] == "H4"
    # Pack: H3 is full; H2 the most used by VCPU (H4 would be by the
    # mean of VCPU and VF).
    plan = cloud.drain("D", strategy="pack")
    assert targets(plan)[consumer(3)] == "H2"
    cloud.apply(plan)
    assert cloud.over_capacity() == []


# -- 4. bad input ---------------------------------------------------------


def _assert_error(resp, status, text, code):
    """The contract's error body (README §5): one error with status,
    title, detail carrying the specific message, code (1.23+) and the
    request id of the response header."""
    assert resp.status == status, resp.body
    (error,) = resp.json()["errors"]
    assert error["status"] == status
    assert error["title"] == {400: "Bad Request", 403: "Forbidden"}[status]
    assert text in error["detail"], (text, error["detail"])
    assert error["code"] == code
    assert error["request_id"] == resp.headers["x-openstack-request-id"]
    assert error["request_id"].startswith("req-")


def test_bad_input_is_a_400_with_the_error_body(cloud):
    rp = cloud.provider("CN1", inventories={"VCPU": 8})
    child = cloud.provider("CN1-PF", "CN1", {"SRIOV_NET_VF": 2})
    unknown = str(uuid.uuid4())
    schema = "Invalid query string parameters"
    undefined = "placement.undefined_code"
    bad_value = "placement.query.bad_value"
    duplicate = "placement.query.duplicate_key"
    many = ",".join(str(uuid.uuid4()) for _ in range(1100))
    for query, text, code in [
        ("providers=", schema, undefined),
        ("providers=,", schema, undefined),
        ("providers=%s," % rp, schema, undefined),
        ("providers=,%s" % rp, schema, undefined),
        ("providers=%s,,%s" % (rp, child), schema, undefined),
        ("providers=not-a-uuid", schema, undefined),
        (
            "providers=%s" % unknown,
            "No resource provider with uuid " + unknown,
            undefined,
        ),
        ("providers=%s,%s" % (rp, unknown), "uuid " + unknown, undefined),
        # Many uuids (past SQLite's old 999 parameters): one statement,
        # the first unknown named.
        ("providers=" + many, "uuid " + many[:36], undefined),
        ("in_tree=nope", schema, undefined),
        (
            "in_tree=%s" % unknown,
            "No resource provider with uuid " + unknown,
            undefined,
        ),
        ("member_of=nope", schema, undefined),
        ("member_of=in:%s,%s" % (AGG_A, AGG_B), schema, undefined),
        ("providers=%s&strategy=bogus" % rp, "is not one of", undefined),
        ("providers=%s&strategy=" % rp, "is not one of", undefined),
        ("providers=%s&strategy=pack&strategy=spread" % rp, "'strategy'", duplicate),
        ("providers=%s&strategy=bogus&strategy=first" % rp, "'strategy'", duplicate),
        ("providers=%s&providers=%s" % (rp, child), "'providers'", duplicate),
        ("in_tree=%s&in_tree=%s" % (rp, child), "'in_tree'", duplicate),
        ("providers=%s&in_tree=%s" % (rp, rp), "exactly one", bad_value),
        ("strategy=first", "got none", bad_value),
        ("providers=%s&required=" % rp, schema, undefined),
        ("providers=%s&required=CUSTOM_NOPE" % rp, "CUSTOM_NOPE", undefined),
        ("providers=%s&target_member_of=%s,%s" % (rp, AGG_A, AGG_B), "in:", undefined),
        ("providers=%s&target_member_of=nope" % rp, "valid UUID", undefined),
        ("providers=%s&bogus=1" % rp, "bogus", undefined),
    ]:
        _assert_error(cloud.plan(query, status=400), 400, text, code)
    member = {"x-auth-token": "someone", "openstack-api-version": "placement 1.39"}
    _assert_error(
        cloud.plan("providers=" + rp, status=403, headers=member),
        403,
        "placement:maintenance:drain",
        undefined,
    )
    # Below 1.23 the error body has no code (README §5).
    resp = cloud.plan(
        "providers=",
        status=400,
        headers={"x-auth-token": "admin", "openstack-api-version": "placement 1.22"},
    )
    assert "code" not in resp.json()["errors"][0]


def test_provider_uuids_are_matched_as_the_api_matches_them(cloud):
    """GET /resource_providers/{uuid} and ?in_tree= take the canonical
    dashed form as written: an upper-case spelling is an unknown uuid
    (404, empty list), a dashless one a schema error for in_tree. The
    drain plan does the same: a 400 either way, never another tree, and
    the same answer on every backend (MySQL compares case-blind)."""
    rp = cloud.provider("CN1", inventories={"VCPU": 8})
    cloud.provider("CN2", inventories={"VCPU": 8})
    cloud.allocate(consumer(1), {"CN1": {"VCPU": 1}})
    upper, dashless = rp.upper(), rp.replace("-", "")
    assert cloud.call("/resource_providers/" + upper).status == 404
    listed = cloud.call("/resource_providers?in_tree=" + upper)
    assert (listed.status, listed.json()) == (200, {"resource_providers": []})
    assert cloud.call("/resource_providers?in_tree=" + dashless).status == 400
    for name in ("providers", "in_tree"):
        _assert_error(
            cloud.plan("%s=%s" % (name, upper), status=400),
            400,
            "No resource provider with uuid " + upper,
            "placement.undefined_code",
        )
        _assert_error(
            cloud.plan("%s=%s" % (name, dashless), status=400),
            400,
            "Invalid query string parameters: '%s' does not match" % dashless,
            "placement.undefined_code",
        )
    plan = cloud.plan("providers=%s,%s" % (rp, rp)).json()
    assert plan["drained"] == [{"uuid": rp, "name": "CN1"}]
    assert plan["totals"]["placed"] == 1


# -- 5. placement-manage drain-plan --------------------------------------


def test_manage_drain_plan_left_consumers_and_bad_input(cloud):
    cloud.provider("D1", inventories={"VCPU": 8, "MEMORY_MB": 4096})
    cloud.provider("T1", inventories={"VCPU": 4, "MEMORY_MB": 4096}, traits=[AVX2])
    cloud.allocate(consumer(1), {"D1": {"VCPU": 2, "MEMORY_MB": 512}})
    cloud.allocate(consumer(2), {"D1": {"VCPU": 6, "MEMORY_MB": 512}})
    url = cloud.db.engine.url.render_as_string(hide_password=False)
    env = {"OS_PLACEMENT_DATABASE__CONNECTION": url}
    base = [helpers.script("placement-manage"), "drain-plan"]
    d1 = cloud.names["D1"]
    args = ["--providers", d1, "--strategy", "pack", "--required", "!CUSTOM_NONE"]
    cloud.call("/traits/CUSTOM_NONE", "PUT")
    result = helpers.run(base + args + ["--json"], env)
    assert result.returncode == 0, result.stderr
    api = cloud.plan("providers=%s&strategy=pack&required=!CUSTOM_NONE" % d1).json()
    assert json.loads(result.stdout) == api
    assert api["totals"] == {"consumers": 2, "placed": 1, "left": 1}
    (left,) = api["unplaced"]
    result = helpers.run(base + args, env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Why it fits nowhere" in out
    (row,) = [line for line in out.splitlines() if consumer(2) in line]
    assert "D1" in row and left["reason"][:40] in row
    assert "Placed 1 of 2 consumers, 1 left." in out
    # Bad input: non-zero, the reason on stderr, nothing on stdout.
    unknown = str(uuid.uuid4())
    for extra, text in [
        (["--providers", unknown], "No resource provider with uuid " + unknown),
        (["--providers", "not-a-uuid"], "'not-a-uuid' is not a provider uuid"),
        (["--providers", d1, "--required", "CUSTOM_NOPE"], "CUSTOM_NOPE"),
    ]:
        result = helpers.run(base + extra, env)
        assert result.returncode != 0, (extra, result.stdout)
        assert text in result.stderr, (extra, result.stderr)
        assert result.stdout == "", (extra, result.stdout)

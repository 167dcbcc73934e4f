"""GET /allocation_candidates/capacity against the truth: for every root
provider, claim the request on that tree again and again (in_tree,
limit=1, PUT /allocations) until no candidate is left; the number of
successful claims is what ``count`` must be when ``exact`` is true (and at
least that, with the root listed only when one fits, when it is false).
Flat hosts, NUMA trees, existing allocations, reserved, allocation_ratio,
min_unit, max_unit, step_size, traits and aggregates, with the provider
catalog on and off, on every backend; bad queries answer exactly as
GET /allocation_candidates does."""

import json
import re
import urllib.parse
import uuid

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from placement import deploy
from placement.db import api as db_api
from placement.db import schema
from placement.objects import standard_names
from tests import fixtures
from tests import helpers
from tests import wsgi_client

HEADERS = {"x_auth_token": "admin", "openstack_api_version": "placement latest"}
AGG_A = "ca000000-0000-4000-8000-0000000000a0"
AGG_B = "ca000000-0000-4000-8000-0000000000b0"
PROJECT, USER = str(uuid.uuid4()), str(uuid.uuid4())
# Hang guard: no layout here holds more instances than this.
MAX_CLAIMS = 300


class Cloud:
    def __init__(self, app):
        self.app = app

    def call(self, path, method="GET", body=None):
        return wsgi_client.call(self.app, path, method, body, **HEADERS)

    def write(self, path, method="PUT", body=None):
        resp = self.call(path, method, body)
        assert resp.status < 300, resp.body
        return resp.json() if resp.body else None

    def generation(self, rp):
        return self.call("/resource_providers/%s" % rp).json()["generation"]

    def provider(self, name, parent=None, inventories=None, traits=(), aggs=()):
        rp = str(uuid.uuid4())
        self.write(
            "/resource_providers",
            "POST",
            {"name": name, "uuid": rp, "parent_provider_uuid": parent},
        )
        if inventories:
            self.write(
                "/resource_providers/%s/inventories" % rp,
                body={
                    "resource_provider_generation": self.generation(rp),
                    "inventories": inventories,
                },
            )
        for trait in (t for t in traits if t.startswith("CUSTOM_")):
            self.write("/traits/%s" % trait)
        if traits:
            self.write(
                "/resource_providers/%s/traits" % rp,
                body={
                    "resource_provider_generation": self.generation(rp),
                    "traits": list(traits),
                },
            )
        if aggs:
            self.write(
                "/resource_providers/%s/aggregates" % rp,
                body={
                    "resource_provider_generation": self.generation(rp),
                    "aggregates": list(aggs),
                },
            )
        return rp

    def allocate(self, allocations):
        consumer = str(uuid.uuid4())
        self.write(
            "/allocations/%s" % consumer,
            body={
                "allocations": allocations,
                "consumer_generation": None,
                "project_id": PROJECT,
                "user_id": USER,
                "consumer_type": "INSTANCE",
            },
        )
        return consumer

    def capacity(self, query):
        """The answer, the same with the catalog on and off."""
        answers = []
        for on in (True, False):
            with fixtures.overrides(**{"placement.provider_catalog": on}):
                resp = self.call("/allocation_candidates/capacity?" + query)
                assert resp.status == 200, resp.body
                answers.append(resp.json())
        assert answers[0] == answers[1]
        return answers[0]

    def claims(self, query, root=None):
        """How many times the request can be claimed on ``root``'s tree
        (None: anywhere), one claim after the other (the claims are then
        given back)."""
        suffixes = set(re.findall(r"(?:^|&)resources([^=]*)=", query))
        scoped = query + "".join(
            "&in_tree%s=%s" % (s, root) for s in sorted(suffixes) if root
        )
        consumers = []
        while len(consumers) < MAX_CLAIMS:
            found = self.call("/allocation_candidates?%s&limit=1" % scoped).json()
            if not found["allocation_requests"]:
                break
            consumers.append(
                self.allocate(found["allocation_requests"][0]["allocations"])
            )
        for consumer in consumers:
            self.write("/allocations/%s" % consumer, "DELETE")
        return len(consumers)

    def roots(self):
        found = self.call("/resource_providers").json()["resource_providers"]
        return {
            rp["uuid"]: rp["name"]
            for rp in found
            if rp["uuid"] == rp["root_provider_uuid"]
        }

    def check(self, query):
        """The answer to ``query`` against successive claims on every root;
        returns it."""
        answer = self.capacity(query)
        listed = {r["uuid"]: r for r in answer["roots"]}
        truth = {rp: self.claims(query, rp) for rp in self.roots()}
        for rp, n in truth.items():
            got = listed[rp]["count"] if rp in listed else 0
            if answer["exact"]:
                assert got == n, (query, rp, got, n)
            else:
                assert got >= n, (query, rp, got, n)
                assert (rp in listed) == (n > 0), (query, rp, got, n)
        for root in answer["roots"]:
            assert root["count"] > 0 and root["limited_by"]
        if answer["exact"]:
            assert answer["capacity"] == sum(truth.values())
        else:
            assert answer["capacity"] >= sum(truth.values())
        assert [r["count"] for r in answer["roots"]] == sorted(
            (r["count"] for r in answer["roots"]), reverse=True
        )
        return answer


@pytest.fixture(params=fixtures.BACKENDS)
def cloud(request):
    fixtures.require_backend(request.param)
    with fixtures.app(request.param) as (app, _):
        yield Cloud(app)


def _layout(cloud):
    """Two flat hosts and a two-node NUMA host, some usage."""
    flat1 = cloud.provider(
        "flat1",
        inventories={
            "VCPU": {"total": 8, "allocation_ratio": 2.0},
            "MEMORY_MB": {"total": 4096, "reserved": 512},
            "DISK_GB": {"total": 100, "min_unit": 10, "max_unit": 50, "step_size": 10},
        },
        traits=["CUSTOM_GOLD"],
        aggs=[AGG_A],
    )
    cloud.provider(
        "flat2",
        inventories={
            "VCPU": {"total": 4},
            "MEMORY_MB": {"total": 8192},
            "DISK_GB": {"total": 45},
        },
        aggs=[AGG_B],
    )
    numa = cloud.provider(
        "numa", inventories={"DISK_GB": {"total": 200}}, aggs=[AGG_A, AGG_B]
    )
    node0 = cloud.provider(
        "numa0",
        parent=numa,
        inventories={"VCPU": {"total": 4}, "MEMORY_MB": {"total": 4096}},
        traits=["CUSTOM_FAST"],
    )
    cloud.provider(
        "numa1",
        parent=numa,
        inventories={
            "VCPU": {"total": 6},
            "MEMORY_MB": {"total": 3072, "max_unit": 1024},
        },
    )
    cloud.allocate(
        {
            flat1: {"resources": {"VCPU": 3, "MEMORY_MB": 1000}},
            node0: {"resources": {"VCPU": 1}},
        }
    )


EXACT = [
    # Unsuffixed: flat hosts take it whole, the NUMA host per class
    # from either node.
    "resources=VCPU:2,MEMORY_MB:1024",
    "resources=VCPU:1,MEMORY_MB:512,DISK_GB:20",
    # min_unit, step_size, max_unit of DISK_GB.
    "resources=DISK_GB:30",
    "resources=DISK_GB:60",
    "resources=VCPU:1&member_of=%s" % AGG_A,
    "resources=VCPU:1&member_of=in:%s,%s" % (AGG_A, AGG_B),
    "resources=VCPU:1&member_of=!%s" % AGG_B,
    # One granular group: one provider, either NUMA node.
    "resources1=VCPU:1,MEMORY_MB:1024",
    "resources1=VCPU:2&required1=CUSTOM_FAST",
    "resources1=MEMORY_MB:1536",
    "resources1=VCPU:1&required1=!CUSTOM_GOLD",
    "resources=VCPU:1&root_required=CUSTOM_GOLD",
    "resources=VCPU:64",
]
BOUNDS = [
    # The unsuffixed group's traits judged on its providers together.
    "resources=VCPU:1&required=CUSTOM_GOLD",
    # Several groups.
    "resources1=VCPU:1&resources2=VCPU:1&group_policy=isolate",
    "resources1=VCPU:1&resources2=MEMORY_MB:1024&group_policy=none",
    "resources=DISK_GB:10&resources1=VCPU:2,MEMORY_MB:512&group_policy=none",
]


def test_counts_equal_successive_claims(cloud):
    _layout(cloud)
    for query in EXACT:
        answer = cloud.check(query)
        assert answer["exact"], query
    for query in BOUNDS:
        answer = cloud.check(query)
        assert not answer["exact"], query


def test_answer_shape(cloud):
    _layout(cloud)
    answer = cloud.check("resources=VCPU:2,MEMORY_MB:1024&limit=1")
    roots = {r["name"]: r for r in answer["roots"]}
    # flat1: 13 VCPU (6 instances), 2584 MB (2); flat2: 4 VCPU (2), 8 GB
    # (8); numa: 3 + 6 VCPU (1 + 3), 4096 + 3072 MB (4 + 3).
    assert {n: (r["count"], r["limited_by"]) for n, r in roots.items()} == {
        "flat1": (2, ["MEMORY_MB"]),
        "flat2": (2, ["VCPU"]),
        "numa": (4, ["VCPU"]),
    }
    assert answer["capacity"] == 8
    assert answer["aggregates"] == {AGG_A: 6, AGG_B: 6}
    assert [r["name"] for r in answer["roots"]] == ["numa", "flat1", "flat2"]


def test_sharing_is_a_bound(cloud):
    cn = cloud.provider("cn", inventories={"VCPU": {"total": 4}}, aggs=[AGG_A])
    cloud.provider("cn2", inventories={"VCPU": {"total": 4}}, aggs=[AGG_A])
    cloud.provider(
        "nfs",
        inventories={"DISK_GB": {"total": 50}},
        traits=["MISC_SHARES_VIA_AGGREGATE"],
        aggs=[AGG_A],
    )
    # in_tree leaves sharing providers out: the truth is the claims
    # anywhere.
    query = "resources=VCPU:1,DISK_GB:10"
    answer = cloud.capacity(query)
    assert not answer["exact"]
    # Each host alone could take 4; the shared 50 GB hold 5 in all.
    assert answer["capacity"] == cloud.claims(query) == 5
    assert {r["uuid"]: r["count"] for r in answer["roots"]}[cn] == 4


@pytest.mark.parametrize(
    "query",
    [
        "",
        "resources=VCPU:x",
        "resources=CUSTOM_NOPE:1",
        "resources=VCPU:1&required=CUSTOM_NOPE",
        "resources=VCPU:1&group_policy=sometimes",
        "resources1=VCPU:1&resources2=VCPU:1",
        "resources=VCPU:1&member_of=not-a-uuid",
        "resources=VCPU:1&in_tree=nope",
        "resources=VCPU:1&bogus=1",
        "resources=VCPU:0",
    ],
)
def test_bad_queries_answer_as_candidates(query):
    with fixtures.app("sqlite") as (app, _):
        for version in ("1.10", "1.39"):
            headers = dict(HEADERS, openstack_api_version="placement " + version)
            want = wsgi_client.call(app, "/allocation_candidates?" + query, **headers)
            got = wsgi_client.call(
                app, "/allocation_candidates/capacity?" + query, **headers
            )
            assert want.status == 400, (query, want.body)
            assert (got.status, _errors(got)) == (want.status, _errors(want))


# Small random layouts: hosts of one or two NUMA nodes with random
# inventory constraints and usage, a random one-group request.
_INVENTORY = st.fixed_dictionaries(
    {
        "total": st.integers(1, 12),
        "reserved": st.integers(0, 2),
        "allocation_ratio": st.sampled_from([1.0, 1.5, 2.0]),
        "min_unit": st.integers(1, 2),
        "max_unit": st.integers(2, 12),
        "step_size": st.sampled_from([1, 1, 2, 3]),
    }
).filter(lambda i: i["reserved"] < i["total"])
_NODE = st.fixed_dictionaries(
    {"VCPU": _INVENTORY, "MEMORY_MB": _INVENTORY, "used": st.integers(0, 2)}
)
_HOST = st.lists(_NODE, min_size=1, max_size=2)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    hosts=st.lists(_HOST, min_size=1, max_size=3),
    vcpu=st.integers(1, 4),
    memory=st.integers(1, 4),
    granular=st.booleans(),
)
def test_generated_layouts(hosts, vcpu, memory, granular):
    with fixtures.app("sqlite") as (app, _):
        cloud = Cloud(app)
        for h, nodes in enumerate(hosts):
            root = cloud.provider("host%d" % h)
            for n, node in enumerate(nodes):
                inventories = {rc: node[rc] for rc in ("VCPU", "MEMORY_MB")}
                rp = cloud.provider("host%d-%d" % (h, n), root, inventories)
                used = node["used"]
                if used and all(_takes(i, used) for i in inventories.values()):
                    cloud.allocate(
                        {rp: {"resources": {"VCPU": used, "MEMORY_MB": used}}}
                    )
        suffix = "1" if granular else ""
        query = urllib.parse.urlencode(
            {"resources" + suffix: "VCPU:%d,MEMORY_MB:%d" % (vcpu, memory)}, safe=":,"
        )
        assert cloud.check(query)["exact"]


def _takes(inventory, amount):
    """The inventory accepts an allocation of ``amount``."""
    room = (inventory["total"] - inventory["reserved"]) * inventory["allocation_ratio"]
    return (
        inventory["min_unit"] <= amount <= inventory["max_unit"]
        and amount % inventory["step_size"] == 0
        and amount <= room
    )


def _errors(resp):
    """The error bodies but their request ids."""
    return [
        {k: v for k, v in e.items() if k != "request_id"} for e in resp.json()["errors"]
    ]


def test_placement_manage_capacity():
    """The CLI prints the same answer as the route (``--json``) and a
    table of the top hosts with the total."""
    with fixtures.database_url("sqlite") as url:
        conf = fixtures.configure()
        engine = db_api.create_engine(url, conf)
        try:
            schema.upgrade(engine)
            db = db_api.Database(engine, conf)
            standard_names.sync_standard_names(db)
            cloud = Cloud(deploy.build_app(conf, db=db, sync_schema=False))
            _layout(cloud)
            query = "resources=VCPU:1,MEMORY_MB:1024&member_of=in:%s,%s" % (
                AGG_A,
                AGG_B,
            )
            want = cloud.capacity(query)
        finally:
            engine.dispose()
        args = [
            "placement-manage",
            "capacity",
            "--resources",
            "VCPU:1,MEMORY_MB:1024",
            "--member-of",
            "in:%s,%s" % (AGG_A, AGG_B),
        ]
        env = {"OS_PLACEMENT_DATABASE__CONNECTION": url}
        found = helpers.run([helpers.script(args[0]), *args[1:], "--json"], env)
        assert found.returncode == 0, found.stderr
        assert json.loads(found.stdout) == want
        table = helpers.run(
            [helpers.script(args[0]), *args[1:], "--top", "1"], env
        ).stdout
        top = want["roots"][0]
        assert re.search(
            r"\| %s +\| %s +\| +%d +\|" % (top["name"], top["uuid"], top["count"]),
            table,
        )
        assert "(%d more hosts)" % (len(want["roots"]) - 1) in table
        assert "Total: %d\n" % want["capacity"] in table
        bad = helpers.run(
            [helpers.script(args[0]), "capacity", "--resources", "VCPU:x"], env
        )
        assert bad.returncode == 1 and "VCPU" in bad.stderr

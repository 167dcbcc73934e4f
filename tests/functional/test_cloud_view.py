"""GET /roots (the console's cloud view in one call) against what the
console used to read per root, call by call: every provider's
inventories and usages summed over its tree, the root's traits and
aggregates, the roots ordered by name and cut in pages, and the filters
(part of a name anywhere in the tree, a whole uuid, required, member_of,
resources) matching what GET /resource_providers matches; on every
backend. A page is one call whatever its size."""

import uuid

import pytest

from tests import fixtures
from tests.functional.test_capacity import AGG_A
from tests.functional.test_capacity import AGG_B
from tests.functional.test_capacity import Cloud

GOLD = "CUSTOM_GOLD"


@pytest.fixture(params=fixtures.BACKENDS)
def cloud(request):
    fixtures.require_backend(request.param)
    with fixtures.app(request.param) as (app, _):
        yield _layout(Cloud(app))


def _layout(cloud):
    """Nine roots (names out of id order, mixed case), some with NUMA and
    device children, traits, aggregates and allocations."""
    roots = {}
    for i, name in enumerate(
        ["zeta", "Alpha", "beta-2", "beta-10", "_under", "cn-gold", "a", "B", "numa"]
    ):
        root = cloud.provider(
            name,
            inventories={"DISK_GB": {"total": 100 + i, "reserved": i}},
            traits=[GOLD] if i % 3 == 0 else [],
            aggs=[AGG_A if i % 2 else AGG_B],
        )
        roots[name] = root
        if i % 2 == 0:
            for n in range(2):
                cloud.provider(
                    "%s-numa%d" % (name, n),
                    root,
                    inventories={
                        "VCPU": {"total": 8, "allocation_ratio": 1.5 + n},
                        "MEMORY_MB": {"total": 4096, "reserved": 512},
                    },
                    traits=["HW_NUMA_ROOT"],
                )
    cloud.roots_by_name = roots
    for name in ("zeta", "beta-2", "numa"):
        numa = _members(cloud, roots[name])[1]
        cloud.allocate(
            {
                roots[name]: {"resources": {"DISK_GB": 10}},
                numa: {"resources": {"VCPU": 3, "MEMORY_MB": 1024}},
            }
        )
    return cloud


def _members(cloud, root):
    listed = cloud.call("/resource_providers?in_tree=%s" % root).json()
    return [p["uuid"] for p in listed["resource_providers"]]


def _as_the_console_read_it(cloud, root, name):
    """One root's row from the per-provider calls the console used to make."""
    usage = {}
    members = _members(cloud, root)
    for rp in members:
        inventories = cloud.call("/resource_providers/%s/inventories" % rp).json()
        usages = cloud.call("/resource_providers/%s/usages" % rp).json()["usages"]
        for rc, inv in inventories["inventories"].items():
            entry = usage.setdefault(rc, {"capacity": 0, "used": 0})
            entry["capacity"] += int(
                (inv["total"] - inv["reserved"]) * inv["allocation_ratio"]
            )
            entry["used"] += usages.get(rc, 0)
    traits = cloud.call("/resource_providers/%s/traits" % root).json()["traits"]
    aggs = cloud.call("/resource_providers/%s/aggregates" % root).json()["aggregates"]
    return {
        "uuid": root,
        "name": name,
        "providers": len(members),
        "usage": dict(sorted(usage.items())),
        "traits": sorted(traits),
        "aggregates": sorted(aggs),
    }


def _roots(cloud, query=""):
    resp = cloud.call("/roots?" + query)
    assert resp.status == 200, resp.body
    return resp.json()


def test_a_page_is_what_the_per_provider_calls_said(cloud):
    by_name = cloud.roots_by_name
    # Code point order: upper case before lower case, "_" between them.
    order = sorted(by_name)
    assert order[:3] == ["Alpha", "B", "_under"]
    expected = [_as_the_console_read_it(cloud, by_name[n], n) for n in order]
    assert _roots(cloud) == {"total": 9, "roots": expected}
    first, second = _roots(cloud, "limit=4"), _roots(cloud, "limit=4&page=1")
    last = _roots(cloud, "limit=4&page=2")
    assert first["roots"] + second["roots"] + last["roots"] == expected
    assert (first["total"], len(last["roots"])) == (9, 1)
    assert _roots(cloud, "limit=4&page=3") == {"total": 9, "roots": []}


def _names(cloud, query):
    found = _roots(cloud, query)
    names = [r["name"] for r in found["roots"]]
    assert found["total"] == len(names)
    return names


def _listed_roots(cloud, query):
    """The names of the roots of the providers GET /resource_providers
    lists with ``query``: what the console did with it."""
    listed = cloud.call("/resource_providers?" + query).json()["resource_providers"]
    roots = {p["root_provider_uuid"] for p in listed}
    return sorted(n for n, rp in cloud.roots_by_name.items() if rp in roots)


@pytest.mark.parametrize(
    "query",
    [
        "required=" + GOLD,
        "required=HW_NUMA_ROOT",
        "required=!" + GOLD,
        "member_of=" + AGG_A,
        "member_of=in:%s,%s" % (AGG_A, AGG_B),
        "resources=VCPU:1",
        "resources=VCPU:12",
        "resources=DISK_GB:100",
    ],
)
def test_filters_are_the_provider_lists(cloud, query):
    assert _names(cloud, query) == _listed_roots(cloud, query)


def test_name_or_uuid(cloud):
    by_name = cloud.roots_by_name
    # Part of a name, any case, anywhere in the tree: its root.
    assert _names(cloud, "name=BETA") == ["beta-10", "beta-2"]
    assert _names(cloud, "name=numa1") == ["_under", "a", "beta-2", "numa", "zeta"]
    # LIKE's wildcards are plain characters.
    assert _names(cloud, "name=_") == ["_under"]
    assert _names(cloud, "name=%25") == []
    # A whole uuid, with or without dashes, any case: that provider only.
    child = _members(cloud, by_name["numa"])[1]
    assert _names(cloud, "name=" + child.upper()) == ["numa"]
    assert _names(cloud, "name=" + by_name["B"].replace("-", "")) == ["B"]
    assert _names(cloud, "name=" + str(uuid.uuid4())) == []


@pytest.mark.parametrize(
    "query, status",
    [
        ("page=-1", 400),
        ("limit=0", 400),
        ("limit=1001", 400),
        ("other=1", 400),
        ("required=CUSTOM_NOPE", 400),
        ("resources=NOPE:1", 400),
        ("member_of=not-a-uuid", 400),
    ],
)
def test_bad_queries(cloud, query, status):
    resp = cloud.call("/roots?" + query)
    assert resp.status == status, resp.body
    assert resp.json()["errors"][0]["status"] == status

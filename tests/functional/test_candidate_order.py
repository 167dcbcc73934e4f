"""[placement] allocation_candidates_order through the API: for a small
cloud with known usage, ``spread`` offers the emptiest trees first and
``pack`` the fullest that still fit, judged on the requested classes
(the mean used share of the tree's capacity), ties by root id; ``limit``
keeps the best N trees by that order; ``id`` is the order of root ids.
Flat hosts, NUMA trees with granular groups, and a sharing provider; with
the provider catalog (columns, partial sort) and without it (SQL's index,
every tree read), which must agree; on every backend."""

import uuid

import pytest

from placement import conf as placement_conf
from placement import deploy
from placement.objects.allocation_candidates import tree_summaries
from placement.objects.catalog import refresh
from tests import fixtures
from tests.functional import drain_cloud

AGG_SHARED = "0d000000-0000-4000-8000-0000000000a1"
HOST = {"VCPU": 8, "MEMORY_MB": 8192, "DISK_GB": 100}
# Used (VCPU, MEMORY_MB, DISK_GB) per flat host, in creation (root id)
# order; h3's VCPU is full.
USED = {
    "h1": (4, 4096, 0),  # share of VCPU+MEMORY_MB 0.5
    "h2": (0, 0, 90),  # 0; with DISK_GB (0 + 0 + 0.9) / 3 = 0.3
    "h3": (8, 2048, 0),  # no VCPU left: never a candidate
    "h4": (6, 6144, 0),  # 0.75
    "h5": (2, 1024, 0),  # 0.1875; with DISK_GB 0.125
    "h6": (0, 0, 0),  # 0
}
FLAVOR = "resources=VCPU:1,MEMORY_MB:512"


class Cloud(drain_cloud.Cloud):
    def answer(self, query, order, catalog=True, age=0.0):
        """The whole answer under ``order``, rankings used for ``age``
        seconds."""
        with fixtures.overrides(
            **{
                "placement.allocation_candidates_order": order,
                "placement.provider_catalog": catalog,
                "placement.allocation_candidates_order_age": age,
            }
        ):
            resp = self.call("/allocation_candidates?" + query)
        assert resp.status == 200, resp.body
        return resp.json()

    def candidates(self, query, order, catalog=True, age=0.0):
        """The answer's allocation requests under ``order``."""
        return self.answer(query, order, catalog, age)["allocation_requests"]

    def trees(self, query, order):
        """The root names of the answer's candidates, in answer order (a
        candidate's tree is that of its providers that are not shared),
        the same with the catalog and without it."""
        roots = self.roots()
        found = []
        for catalog in (True, False):
            requests = self.candidates(query, order, catalog)
            found.append(
                [
                    roots[min(set(r["allocations"]) - {self.names.get("shared")})]
                    for r in requests
                ]
            )
        assert found[0] == found[1], found
        return found[0]

    def take(self, request):
        """A new consumer claims one of the answer's allocation requests."""
        self.ok(
            "/allocations/%s" % uuid.uuid4(),
            "PUT",
            dict(
                request,
                project_id=self.PROJECT_ID,
                user_id=self.USER_ID,
                consumer_generation=None,
                consumer_type="INSTANCE",
            ),
            status=204,
        )

    def roots(self):
        """{provider uuid: its root's name}."""
        listed = self.call("/resource_providers").json()["resource_providers"]
        names = {rp["uuid"]: rp["name"] for rp in listed}
        return {rp["uuid"]: names[rp["root_provider_uuid"]] for rp in listed}


@pytest.fixture(params=fixtures.BACKENDS)
def cloud(request):
    fixtures.require_backend(request.param)
    with fixtures.app(request.param) as (app, db):
        yield Cloud(app, db)


def _flat(cloud):
    for name, used in USED.items():
        cloud.provider(name, inventories=HOST)
        amounts = {rc: n for rc, n in zip(HOST, used) if n}
        if amounts:
            cloud.allocate(str(uuid.uuid4()), {name: amounts})


def _unique(names):
    return list(dict.fromkeys(names))


def test_spread_pack_and_id_on_flat_hosts(cloud):
    _flat(cloud)
    assert cloud.trees(FLAVOR, "id") == ["h1", "h2", "h4", "h5", "h6"]
    assert cloud.trees(FLAVOR, "spread") == ["h2", "h6", "h5", "h1", "h4"]
    assert cloud.trees(FLAVOR, "pack") == ["h4", "h1", "h5", "h2", "h6"]
    # Judged on the classes asked: h2's full disk counts only when asked.
    disk = FLAVOR + ",DISK_GB:5"
    assert cloud.trees(disk, "spread") == ["h6", "h5", "h2", "h1", "h4"]
    assert cloud.trees(disk, "pack") == ["h4", "h1", "h2", "h5", "h6"]


def test_limit_keeps_the_best_trees_by_the_order(cloud):
    _flat(cloud)
    limited = FLAVOR + "&limit=2"
    assert cloud.trees(limited, "id") == ["h1", "h2"]
    assert cloud.trees(limited, "spread") == ["h2", "h6"]
    assert cloud.trees(limited, "pack") == ["h4", "h1"]
    # A tree that cannot take the request is skipped, whatever its share.
    # h2 has 10 DISK_GB left, h4 2 VCPU.
    assert cloud.trees(FLAVOR + ",DISK_GB:20&limit=3", "spread") == ["h6", "h5", "h1"]
    assert cloud.trees("resources=VCPU:3&limit=2", "pack") == ["h1", "h5"]


def test_claims_follow_the_order(cloud):
    """A scheduler taking the first candidate each time: spread fills the
    emptiest host, pack the fullest that fits."""
    _flat(cloud)
    for order, expected in (("spread", "h2"), ("pack", "h4")):
        first = cloud.candidates(FLAVOR + "&limit=1", order)[0]
        cloud.take(first)
        assert cloud.roots()[next(iter(first["allocations"]))] == expected
    # h4 at 7/8 VCPU and 6656 MB: (0.875 + 0.8125) / 2; h2 at 1/8, 512 MB.
    assert cloud.trees(FLAVOR, "pack") == ["h4", "h1", "h5", "h2", "h6"]
    assert cloud.trees(FLAVOR, "spread") == ["h6", "h2", "h5", "h1", "h4"]


def _numa(cloud, name, used):
    """A host tree: DISK_GB on the root, two NUMA nodes of 4 VCPU and
    4096 MB; ``used`` VCPU and MB taken from node 0."""
    cloud.provider(name, inventories={"DISK_GB": 100})
    for node in (0, 1):
        cloud.provider(
            "%s-%d" % (name, node),
            parent=name,
            inventories={"VCPU": 4, "MEMORY_MB": 4096},
            traits=["HW_NUMA_ROOT"],
        )
    if used[0]:
        cloud.allocate(
            str(uuid.uuid4()),
            {"%s-0" % name: {"VCPU": used[0], "MEMORY_MB": used[1]}},
        )


def test_nested_trees_with_granular_groups(cloud):
    # Tree shares of VCPU and MEMORY_MB over both nodes.
    _numa(cloud, "n1", (2, 2048))  # 0.25
    _numa(cloud, "n2", (4, 4096))  # 0.5, node 0 full
    _numa(cloud, "n3", (0, 0))  # 0
    _numa(cloud, "n4", (1, 1024))  # 0.125
    query = (
        "resources=DISK_GB:10&resources_NUMA=VCPU:1,MEMORY_MB:512"
        "&required_NUMA=HW_NUMA_ROOT&group_policy=none"
    )
    assert _unique(cloud.trees(query, "id")) == ["n1", "n2", "n3", "n4"]
    assert _unique(cloud.trees(query, "spread")) == ["n3", "n4", "n1", "n2"]
    assert _unique(cloud.trees(query, "pack")) == ["n2", "n1", "n4", "n3"]
    # Each tree's candidates stay together and in their own order.
    by_id = cloud.candidates(query, "id")
    spread = cloud.candidates(query, "spread")
    roots = cloud.roots()
    for tree in ("n1", "n2", "n3", "n4"):
        mine = [c for c in by_id if roots[next(iter(c["allocations"]))] == tree]
        assert mine == [
            c for c in spread if roots[next(iter(c["allocations"]))] == tree
        ]
    assert cloud.trees(query + "&limit=2", "spread") == ["n3", "n4"]
    assert cloud.trees(query + "&limit=2", "pack") == ["n2", "n1"]
    # Two NUMA groups, isolated: n2's node 0 is full, so n2 has no room.
    two = (
        "resources1=VCPU:1,MEMORY_MB:512&resources2=VCPU:1,MEMORY_MB:512"
        "&group_policy=isolate&limit=3"
    )
    assert cloud.trees(two, "pack") == ["n1", "n4", "n3"]
    assert cloud.trees(two, "spread") == ["n3", "n4", "n1"]


def test_sharing_provider(cloud):
    """DISK_GB from a shared pool: a tree's share counts the classes it
    has capacity of (VCPU and MEMORY_MB here)."""
    cloud.provider(
        "shared",
        inventories={"DISK_GB": 1000},
        traits=["MISC_SHARES_VIA_AGGREGATE"],
        aggregates=[AGG_SHARED],
    )
    for name, used in (("c1", (4, 4096)), ("c2", (0, 0)), ("c3", (6, 6144))):
        cloud.provider(
            name, inventories={"VCPU": 8, "MEMORY_MB": 8192}, aggregates=[AGG_SHARED]
        )
        if used[0]:
            cloud.allocate(
                str(uuid.uuid4()),
                {name: {"VCPU": used[0], "MEMORY_MB": used[1]}},
            )
    query = FLAVOR + ",DISK_GB:10"
    assert cloud.trees(query, "id") == ["c1", "c2", "c3"]
    assert cloud.trees(query, "spread") == ["c2", "c1", "c3"]
    assert cloud.trees(query, "pack") == ["c3", "c1", "c2"]
    assert cloud.trees(query + "&limit=1", "spread") == ["c2"]
    assert cloud.trees(query + "&limit=1", "pack") == ["c3"]


def test_a_ranking_is_used_for_its_age(cloud):
    """A limited request reads the trees a ranking of its shape made
    within allocation_candidates_order_age put first (the limit and 16
    more), ordered at the usage it reads: a tree outside them that fills
    comes first only once the ranking is made again."""
    hosts = ["h%02d" % i for i in range(1, 21)]
    for name in hosts:
        cloud.provider(name, inventories={"VCPU": 8, "MEMORY_MB": 8192})
    roots = cloud.roots()

    def first(age):
        found = cloud.candidates(FLAVOR + "&limit=1", "pack", age=age)
        return roots[next(iter(found[0]["allocations"]))]

    assert first(age=3600) == "h01"  # all empty: by root id
    cloud.allocate(str(uuid.uuid4()), {"h20": {"VCPU": 4, "MEMORY_MB": 4096}})
    cloud.allocate(str(uuid.uuid4()), {"h05": {"VCPU": 2, "MEMORY_MB": 2048}})
    assert first(age=3600) == "h05"  # the 17 trees read, at their usage
    assert first(age=0) == "h20"  # ranked again


def test_randomize_is_refused_with_spread_or_pack(cloud):
    for order in ("spread", "pack"):
        with fixtures.overrides(
            **{
                "placement.allocation_candidates_order": order,
                "placement.randomize_allocation_candidates": True,
            }
        ) as conf:
            with pytest.raises(placement_conf.StartupError) as raised:
                deploy.build_app(conf, db=cloud.db)
        assert str(raised.value) == (
            "[placement] randomize_allocation_candidates = True and "
            "allocation_candidates_order = %s cannot go together: a random "
            "order is no %s order; set one of them only" % (order, order)
        )
    with fixtures.overrides(
        **{"placement.randomize_allocation_candidates": True}
    ) as conf:
        assert deploy.build_app(conf, db=cloud.db) is not None


def test_unknown_order_is_refused(tmp_path):
    path = tmp_path / "placement.conf"
    path.write_text("[placement]\nallocation_candidates_order = random\n")
    conf = placement_conf.command_conf()
    with pytest.raises(placement_conf.StartupError) as raised:
        placement_conf.parse_args(conf, [], default_config_files=[str(path)])
    assert str(raised.value).startswith(
        "invalid value for [placement] allocation_candidates_order"
    )


def _mixed(cloud):
    """Flat hosts and NUMA trees made in ``cloud``; a function of (order,
    catalog, age) giving the whole answers of three limited queries."""
    _flat(cloud)
    for i, used in enumerate(((2, 2048), (0, 0), (4, 4096))):
        _numa(cloud, "n%d" % i, used)
    queries = [FLAVOR + "&limit=3", "resources=VCPU:2&limit=2", FLAVOR + "&limit=20"]

    def answers(order, catalog, age):
        return [cloud.answer(query, order, catalog, age) for query in queries]

    return answers


def test_whole_answers_from_the_usage_in_memory_are_sql_s(cloud):
    """Limited answers whole (candidates, and summaries with the usage of
    every class, asked or not), with a kept ranking, kept candidates and
    reused summaries from the catalog's usage in memory, are those read
    from SQL without the catalog, for each order, as claims change the
    usage of the trees between requests."""
    answers = _mixed(cloud)

    for step in range(4):
        for order in ("id", "spread", "pack"):
            sql = answers(order, False, 0.0)
            for age in (0.0, 3600.0):
                assert answers(order, True, age) == sql, (step, order, age)
                assert answers(order, True, age) == sql, (step, order, age)
        # A claim on the first candidate pack offers, then one that fills
        # a host or a NUMA node: its kept candidates must go.
        first = answers("pack", False, 0.0)[0]["allocation_requests"][0]
        cloud.take(first)
        full, free = (("h1", 4), ("h5", 6), ("n1-0", 4), ("h6", 8))[step]
        cloud.allocate(str(uuid.uuid4()), {full: {"VCPU": free}})


def test_a_ranking_kept_across_claims_orders_at_the_usage_now(cloud):
    """A ranking kept within its age, made before claims, orders the
    trees it reads at the usage now (from the columns, their usage in
    memory), not at the usage it was made at: where its first page holds
    every tree that fits, the whole answers are SQL's without the
    catalog, step after step of claims that reorder the trees and fill
    some."""
    answers = _mixed(cloud)

    for order in ("spread", "pack"):
        assert answers(order, True, 3600.0) == answers(order, False, 0.0)
    claims = (("h6", 6), ("h2", 8), ("n1-1", 3), ("h1", 4))
    for step, (name, vcpu) in enumerate(claims):
        cloud.allocate(str(uuid.uuid4()), {name: {"VCPU": vcpu, "MEMORY_MB": 1024}})
        for order in ("spread", "pack"):
            sql = answers(order, False, 0.0)
            assert answers(order, True, 3600.0) == sql, (step, order)


def test_rankings_followed_across_claims_are_sql_s(cloud):
    """Rankings made again after claims (only the claimed trees' keys,
    the first page repaired from the ranking before: 60 trees, pages of
    17; at step 3 a tree fills, so the ranked trees change) answer as
    SQL's index does, every tree read, for both orders."""
    for i in range(60):
        cloud.provider("h%02d" % i, inventories=dict(HOST, VCPU=32))
        if i % 3:
            cloud.allocate(str(uuid.uuid4()), {"h%02d" % i: {"VCPU": i % 7 + 1}})
    query = FLAVOR + "&limit=1"
    for step in range(6):
        if step == 3:
            cloud.allocate(str(uuid.uuid4()), {"h07": {"VCPU": 31}})
        for order in ("spread", "pack"):
            sql = cloud.answer(query, order, catalog=False)
            assert cloud.answer(query, order) == sql, (step, order)
            cloud.take(sql["allocation_requests"][0])


@pytest.mark.parametrize("order", ["id", "pack"])
def test_a_renamed_class_is_answered_by_its_new_name(cloud, order):
    """Candidates kept per tree, and their JSON kept by the renderer, are
    by class id: a custom class renamed (1.2-1.6) keeps its id, and the
    next answer names it by its new name, as SQL's index does."""
    cloud.call("/resource_classes/CUSTOM_OLD", "PUT")
    for name, used in (("h1", 1), ("h2", 0)):
        cloud.provider(name, inventories={"VCPU": 8, "CUSTOM_OLD": 4})
        if used:
            cloud.allocate(str(uuid.uuid4()), {name: {"CUSTOM_OLD": used}})
    query = "resources=VCPU:1,CUSTOM_%s:1&limit=2"
    for _ in range(2):  # the second from what the first kept
        before = cloud.answer(query % "OLD", order)
    assert "CUSTOM_OLD" in str(before)
    resp = cloud.call(
        "/resource_classes/CUSTOM_OLD",
        "PUT",
        {"name": "CUSTOM_NEW"},
        headers={"x-auth-token": "admin", "openstack-api-version": "placement 1.2"},
    )
    assert resp.status == 200, resp.body
    after = cloud.answer(query % "NEW", order)
    assert after == cloud.answer(query % "NEW", order, catalog=False)
    assert "CUSTOM_OLD" not in str(after)
    assert str(after) == str(before).replace("CUSTOM_OLD", "CUSTOM_NEW")


def _interleaved_trees(cloud):
    """Two NUMA host trees whose provider ids interleave (both roots
    first, then their nodes in turn): no tree's providers follow on."""
    for name in ("m0", "m1"):
        cloud.provider(name, inventories={"DISK_GB": 100})
    for node in (0, 1):
        for name in ("m0", "m1"):
            cloud.provider(
                "%s-%d" % (name, node),
                parent=name,
                inventories={"VCPU": 4, "MEMORY_MB": 4096},
            )


def _inventory(cloud, name, inventories):
    """Provider ``name``'s inventories become ``inventories``."""
    base = "/resource_providers/%s" % cloud.names[name]
    generation = cloud.ok(base, "GET", None)["generation"]
    cloud.ok(
        base + "/inventories",
        "PUT",
        {
            "resource_provider_generation": generation,
            "inventories": {rc: {"total": n} for rc, n in inventories.items()},
        },
    )


def test_kept_tree_summaries_follow_every_usage_and_inventory(cloud):
    """Summaries kept per tree with their JSON are answered again only
    while the tree's usage of every class (asked or not) holds: after a
    claim, an allocation deleted, usage of a class not asked for, and an
    inventory changed, every order's limited answer, asked twice, is the
    one read from SQL without the catalog; also for trees whose provider
    ids interleave (their JSON written per provider)."""
    _flat(cloud)
    _interleaved_trees(cloud)
    queries = [FLAVOR + "&limit=4", FLAVOR + "&limit=20", "resources=VCPU:1&limit=3"]
    disk_user = str(uuid.uuid4())

    def changed(step):
        if step == 0:  # a claim on pack's first candidate
            first = cloud.candidates(queries[0], "pack", catalog=False)[0]
            cloud.take(first)
        elif step == 1:  # usage of a class no query asks for
            cloud.allocate(disk_user, {"h6": {"DISK_GB": 30}, "m1": {"DISK_GB": 5}})
        elif step == 2:  # that allocation deleted
            cloud.ok("/allocations/" + disk_user, "DELETE", None, status=204)
        elif step == 3:  # an inventory changed under no usage change
            _inventory(cloud, "h5", dict(HOST, DISK_GB=200))
            _inventory(cloud, "m0-1", {"VCPU": 6, "MEMORY_MB": 4096})

    for step in range(5):
        for order in ("id", "spread", "pack"):
            for query in queries:
                sql = cloud.answer(query, order, catalog=False)
                for age in (0.0, 3600.0):
                    for _ in range(2):  # the second from what the first kept
                        found = cloud.answer(query, order, age=age)
                        assert found == sql, (step, order, query, age)
        changed(step)


def test_kept_tree_summaries_are_bounded(cloud, monkeypatch):
    """Past TREES_KEPT trees every tree's kept summaries go: answers stay
    SQL's, and no more trees than that keep theirs."""
    monkeypatch.setattr(tree_summaries, "TREES_KEPT", 3)
    _flat(cloud)
    _interleaved_trees(cloud)
    for query in (FLAVOR + "&limit=2", FLAVOR + "&limit=3", FLAVOR + "&limit=2"):
        for order in ("id", "pack"):
            sql = cloud.answer(query, order, catalog=False)
            assert cloud.answer(query, order) == sql, (order, query)
    catalog = refresh.held(cloud.db)
    if catalog is not None:
        kept = [d for d in catalog.derived_by_tree.values() if d.summaries]
        assert 0 < len(kept) <= 3
    # More trees than are kept: summarised as before, nothing kept.
    sql = cloud.answer(FLAVOR + "&limit=20", "spread", catalog=False)
    assert cloud.answer(FLAVOR + "&limit=20", "spread") == sql


def test_summaries_of_limits_ending_in_any_round_are_sql_s(cloud):
    """A paged answer's summaries are of its candidates' trees only,
    wherever its limit ends: within the first round of trees, in a later
    one (trees of two nodes each), past every candidate, and with a tree
    of ten nodes whose candidates are walked each time (more than are
    kept per tree); as SQL's index answers, for each order, across
    claims."""
    for i, used in enumerate(((2, 2048), (0, 0), (4, 4096))):
        _numa(cloud, "n%d" % i, used)
    cloud.provider("wide", inventories={"DISK_GB": 100})
    for node in range(10):
        cloud.provider(
            "wide-%d" % node, parent="wide", inventories={"VCPU": 4, "MEMORY_MB": 4096}
        )
    cloud.allocate(str(uuid.uuid4()), {"wide-0": {"VCPU": 1, "MEMORY_MB": 512}})
    queries = [FLAVOR + "&limit=%d" % limit for limit in (2, 4, 7, 13, 40)]
    for step in range(3):
        for order in ("id", "spread", "pack"):
            for query in queries:
                sql = cloud.answer(query, order, catalog=False)
                for age in (0.0, 3600.0):
                    assert cloud.answer(query, order, age=age) == sql, (
                        step,
                        order,
                        query,
                    )
        cloud.take(cloud.candidates(queries[0], "pack", catalog=False)[0])

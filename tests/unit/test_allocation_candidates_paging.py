"""A limited search reads trees in pages of root ids: its answer must be
the first ``limit`` candidates of the unlimited search, in both generation
strategies, across page boundaries, with trees that offer nothing, and
unpaged when sharing providers exist; and it reads only what it needs."""

import pytest

from placement.objects import common
from placement.objects.allocation_candidates import answering as engine
from tests import fixtures
from tests.unit.test_allocation_candidates_engine import Layout  # noqa: F401
from tests.unit.test_allocation_candidates_engine import db  # noqa: F401
from tests.unit.test_allocation_candidates_engine import group  # noqa: F401
from tests.unit.test_allocation_candidates_engine import mapped  # noqa: F401
from tests.unit.test_allocation_candidates_engine import run  # noqa: F401


@pytest.fixture
def forest(db, monkeypatch):  # noqa: F811
    monkeypatch.setattr(engine, "FIRST_PAGE", 2)
    lay = Layout(db)
    for i in range(9):
        lay.add("CN%d" % i, inventory={"DISK_GB": 100})
        # Every third tree has no VCPU left: whole pages may offer nothing.
        lay.add(
            "NUMA%d_0" % i, "CN%d" % i, {"VCPU": 4}, used={"VCPU": 4} if i % 3 else None
        )
        lay.add(
            "NUMA%d_1" % i, "CN%d" % i, {"VCPU": 4}, used={"VCPU": 4} if i % 3 else None
        )
    return lay


GROUPS = [group("", {"DISK_GB": 10}), group("_C", {"VCPU": 1})]


@pytest.mark.parametrize("strategy", ["depth-first", "breadth-first"])
@pytest.mark.parametrize("limit", [1, 2, 3, 5, 6, 7])
def test_limit_is_a_prefix_of_the_full_answer(forest, strategy, limit):
    options = engine.Options(strategy=strategy)
    full = mapped(forest, run(forest, GROUPS, options=options))
    assert len(full) == 6
    limited = run(forest, GROUPS, options=options, limit=limit)
    assert len(limited["allocation_requests"]) == min(limit, 6)
    got = mapped(forest, limited)
    assert set(got) <= set(full)
    # Summaries cover exactly the trees used.
    roots = {s["root_provider_uuid"] for s in limited["provider_summaries"].values()}
    used = {u for ar in limited["allocation_requests"] for u in ar["allocations"]}
    assert {
        limited["provider_summaries"][u]["root_provider_uuid"] for u in used
    } == roots


def test_breadth_first_visits_each_tree_once_before_any_twice(forest):
    options = engine.Options(strategy="breadth-first")
    doc = run(forest, GROUPS, options=options, limit=3)
    roots = [
        doc["provider_summaries"][u]["root_provider_uuid"]
        for ar in doc["allocation_requests"]
        for u in ar["allocations"]
        if "DISK_GB" in ar["allocations"][u]["resources"]
    ]
    assert len(set(roots)) == 3


def test_depth_first_exhausts_a_tree_first(forest):
    doc = run(forest, GROUPS, options=engine.Options(), limit=2)
    assert len(doc["provider_summaries"]) == 3  # one tree of 3


def test_sharing_provider_serves_across_pages(db, monkeypatch):  # noqa: F811
    monkeypatch.setattr(engine, "FIRST_PAGE", 1)
    lay = Layout(db)
    for i in range(4):
        lay.add("CN%d" % i, inventory={"VCPU": 8}, aggs=["AGG"])
    lay.add(
        "SAN",
        inventory={"DISK_GB": 1000},
        aggs=["AGG"],
        traits=["MISC_SHARES_VIA_AGGREGATE"],
    )
    groups = [group("", {"VCPU": 1, "DISK_GB": 10})]
    full = run(lay, groups)
    assert len(full["allocation_requests"]) == 4
    limited = run(lay, groups, limit=3)
    assert len(limited["allocation_requests"]) == 3
    assert set(mapped(lay, limited)) <= set(mapped(lay, full))


@pytest.fixture
def packed(db, monkeypatch):  # noqa: F811
    """Twelve hosts, the first eight full, as where schedulers pack."""
    monkeypatch.setattr(engine, "FIRST_PAGE", 2)
    lay = Layout(db)
    for i in range(12):
        lay.add("CN%d" % i, inventory={"VCPU": 4}, used={"VCPU": 4} if i < 8 else None)
    return lay


def _pages_read(monkeypatch):
    """The number of trees of each page the searches read, in order."""
    pages = []
    pages_of = engine._pages

    def counted(*args):
        for page in pages_of(*args):
            pages.append(len(page))
            yield page

    monkeypatch.setattr(engine, "_pages", counted)
    return pages


def _trees_loaded(monkeypatch):
    """The number of trees of each snapshot the searches load, in order."""
    loaded = []
    load = engine.providers.load_snapshot

    def counted(*args, roots=None, **kwargs):
        loaded.append(len(roots) if roots is not None else None)
        return load(*args, roots=roots, **kwargs)

    monkeypatch.setattr(engine.providers, "load_snapshot", counted)
    return loaded


def test_the_next_request_of_a_shape_reads_what_the_last_needed(packed, monkeypatch):
    pages = _pages_read(monkeypatch)
    loaded = _trees_loaded(monkeypatch)
    groups = [group("", {"VCPU": 1})]
    first = run(packed, groups, limit=1)
    assert pages == [3, 6]  # limit + FIRST_PAGE, then twice that
    del pages[:]
    del loaded[:]
    again = run(packed, groups, limit=1)
    assert pages == [11]  # the 9 trees the first needed, and FIRST_PAGE
    # The usage in memory shows the 9 trees' candidates kept (none for
    # the 8 full ones, CN8's): nothing is read. The page's 2 others (its
    # reserve) would be read only if the search reached them.
    assert loaded == []
    assert again == first
    assert mapped(packed, first) == [(("", ("CN8",)),)]
    # The shape is what is learned: another one starts from its limit.
    del pages[:]
    run(packed, [group("", {"VCPU": 2})], limit=1)
    assert pages == [3, 6]


def test_without_the_catalog_nothing_is_learned(packed, monkeypatch):
    pages = _pages_read(monkeypatch)
    groups = [group("", {"VCPU": 1})]
    with fixtures.overrides(**{"placement.provider_catalog": False}):
        run(packed, groups, limit=1)
        run(packed, groups, limit=1)
    assert pages == [3, 6, 3, 6]


@pytest.fixture
def sparse(db, monkeypatch):  # noqa: F811
    """Twelve hosts with a NUMA child each; two far apart in aggregate AGG,
    whose child has the trait CUSTOM_GOLD, and three in aggregate WIDE."""
    monkeypatch.setattr(engine, "FIRST_PAGE", 2)
    lay = Layout(db)
    for i in range(12):
        aggs = (["AGG"] if i in (3, 10) else []) + (["WIDE"] if i % 4 == 1 else [])
        lay.add("CN%d" % i, inventory={"DISK_GB": 100}, aggs=aggs)
        lay.add(
            "NUMA%d" % i,
            "CN%d" % i,
            {"VCPU": 4},
            traits=["CUSTOM_GOLD"] if i in (3, 10) else [],
        )
    return lay


SPARSE_SHAPES = {
    "member_of": lambda lay: [group("", {"DISK_GB": 10}, member_of=[lay.agg("AGG")])],
    "member_of on a suffixed group": lambda lay: [
        group("", {"VCPU": 1}),
        group("_D", {"DISK_GB": 10}, member_of=[lay.agg("AGG")]),
    ],
    "member_of any of two": lambda lay: [
        group(
            "", {"VCPU": 1}, member_of=["in:%s,%s" % (lay.agg("AGG"), lay.agg("WIDE"))]
        )
    ],
    "a child's trait": lambda lay: [
        group("", {"DISK_GB": 10, "VCPU": 1}, required=["CUSTOM_GOLD"])
    ],
    "in_tree": lambda lay: [group("", {"VCPU": 1}, in_tree=lay.uuids["CN7"])],
}


@pytest.mark.parametrize("shape", sorted(SPARSE_SHAPES))
@pytest.mark.parametrize("strategy", ["depth-first", "breadth-first"])
def test_a_narrow_search_reads_only_the_trees_it_names(
    sparse, monkeypatch, shape, strategy
):
    """member_of, a required trait or in_tree held by few trees: the
    limited search reads only those trees, in one page, and answers the
    first candidates of the unlimited answer."""
    groups = SPARSE_SHAPES[shape](sparse)
    options = engine.Options(strategy=strategy)
    full = run(sparse, groups, options=options)
    expected = {"in_tree": 1, "member_of any of two": 5}.get(shape, 2)
    assert len(full["allocation_requests"]) == expected
    pages = _pages_read(monkeypatch)
    limited = run(sparse, groups, options=options, limit=10)
    assert pages == [expected]
    assert limited == full
    del pages[:]
    one = run(sparse, groups, options=options, limit=1)
    assert pages == [expected]
    assert one["allocation_requests"] == full["allocation_requests"][:1]


def test_a_filter_most_trees_pass_pages_through_all(sparse, monkeypatch):
    """An aggregate of 3 trees in 12 (more than half would be 7) narrows;
    a forbidden trait never does: pages of every tree."""
    pages = _pages_read(monkeypatch)
    wide = [group("", {"DISK_GB": 10}, member_of=[sparse.agg("WIDE")])]
    assert len(run(sparse, wide, limit=5)["allocation_requests"]) == 3
    assert pages == [3]
    del pages[:]
    forbidden = [group("", {"VCPU": 1}, required=["!CUSTOM_GOLD"])]
    assert len(run(sparse, forbidden, limit=20)["allocation_requests"]) == 10
    assert pages == [12]


@pytest.mark.parametrize("catalog", [True, False])
def test_the_next_page_is_what_the_rate_seen_calls_for(db, monkeypatch, catalog):  # noqa: F811
    """A forbidden trait on every third tree: the first page's trees give
    8 anchors in 12, so the 2 more that a limit of 10 needs call for a
    page of 6 trees (3 at that rate, a quarter more, FIRST_PAGE), not
    twice 12; the answer is the unlimited one's first 10."""
    monkeypatch.setattr(engine, "FIRST_PAGE", 2)
    lay = Layout(db)
    for i in range(30):
        lay.add(
            "CN%02d" % i,
            inventory={"VCPU": 4},
            traits=["CUSTOM_GOLD"] if i % 3 == 0 else [],
        )
    groups = [group("", {"VCPU": 1}, required=["!CUSTOM_GOLD"])]
    pages = _pages_read(monkeypatch)
    with fixtures.overrides(**{"placement.provider_catalog": catalog}):
        full = run(lay, groups)
        limited = run(lay, groups, limit=10)
    assert pages == [12, 6]
    assert limited["allocation_requests"] == full["allocation_requests"][:10]


def test_usage_of_several_classes_comes_one_row_per_provider(db):  # noqa: F811
    """The whole cloud's usage of a request's classes (unlimited requests,
    capacity) is read side by side, one row per provider, and is the
    usage of each (provider, class) pair."""
    lay = Layout(db)
    lay.add(
        "A",
        inventory={"VCPU": 8, "MEMORY_MB": 4096, "DISK_GB": 100},
        used={"VCPU": 3, "MEMORY_MB": 1024, "DISK_GB": 10},
    )
    lay.add("B", inventory={"VCPU": 8, "DISK_GB": 100}, used={"VCPU": 2})
    lay.add("C", inventory={"MEMORY_MB": 512}, used={"MEMORY_MB": 512})
    lay.add("D", inventory={"VCPU": 8})
    with db.reader() as conn:
        ids = common.resource_class_ids(conn, ["VCPU", "MEMORY_MB", "DISK_GB"])
        used = engine.providers.usage(conn, classes=ids.values())
        rows = conn.execute(
            engine.providers._usage_of_classes(tuple(sorted(ids.values())), None)
        ).all()
    name_of = {i: n for n, i in lay.ids.items()}
    class_of = {i: n for n, i in ids.items()}
    by_name = {(name_of[rp], class_of[rc]): n for (rp, rc), n in used.items()}
    assert by_name == {
        ("A", "VCPU"): 3,
        ("A", "MEMORY_MB"): 1024,
        ("A", "DISK_GB"): 10,
        ("B", "VCPU"): 2,
        ("C", "MEMORY_MB"): 512,
    }
    assert len(rows) == 3  # A, B and C: one row each

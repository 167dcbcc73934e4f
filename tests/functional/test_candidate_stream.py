"""GET /allocation_candidates without a limit is streamed: byte for byte
the answer the materialised path writes (differential), bounded in memory
however many candidates there are, and stopped when the client goes away.
"""

import contextlib
import itertools
import os
import uuid

import httpx
import orjson
import os_resource_classes
import pytest
import requests

from placement import versions
from placement.handlers.candidates import allocation_candidate as handler
from placement.handlers.candidates import query as candidate_query
from placement.handlers.candidates import render
from placement.objects.allocation_candidates import answering as engine
from tests import fixtures
from tests.functional import live_server

ADMIN = {"x-auth-token": "admin"}
VERSIONS = ("1.10", "1.12", "1.17", "1.27", "1.29", "1.34", "1.39")
PGPUS = 16


def _headers(version):
    return dict(ADMIN, **{"openstack-api-version": "placement %s" % version})


def _create(client, name, parent=None, inventories=None, traits=()):
    rp = str(uuid.uuid4())
    body = {"name": name, "uuid": rp}
    if parent:
        body["parent_provider_uuid"] = parent
    resp = client.post("/resource_providers", headers=_headers("1.39"), json=body)
    assert resp.status_code == 200, resp.text
    generation = 0
    if inventories:
        resp = client.put(
            "/resource_providers/%s/inventories" % rp,
            headers=_headers("1.39"),
            json={
                "resource_provider_generation": generation,
                "inventories": {c: {"total": t} for c, t in inventories.items()},
            },
        )
        assert resp.status_code == 200, resp.text
        generation += 1
    if traits:
        resp = client.put(
            "/resource_providers/%s/traits" % rp,
            headers=_headers("1.39"),
            json={"resource_provider_generation": generation, "traits": list(traits)},
        )
        assert resp.status_code == 200, resp.text
    return rp


def _pgpu_host(client, name, pgpus=PGPUS):
    root = _create(client, name, inventories={"VCPU": 8, "MEMORY_MB": 4096})
    for i in range(pgpus):
        _create(client, "%s-gpu%d" % (name, i), parent=root, inventories={"PGPU": 1})
    return root


def _isolated(groups, extra=""):
    query = "&".join("resources%d=PGPU:1" % (g + 1) for g in range(groups))
    return query + "&group_policy=isolate" + extra


QUERIES = [
    "resources=VCPU:1",
    "resources=VCPU:1,MEMORY_MB:512,DISK_GB:10",
    "resources=VCPU:1,PGPU:1",
    "resources=PGPU:2",
    "resources=VCPU:1&required=HW_CPU_X86_AVX2",
    _isolated(3),  # 3,360 per host: several pieces of a streamed body
    _isolated(2, "&resources=VCPU:2"),
    "resources=DISK_GB:1",
    "resources=VCPU:99",
]


def _aggregate(client, providers):
    agg = str(uuid.uuid4())
    for rp in providers:
        got = client.get("/resource_providers/%s" % rp, headers=_headers("1.19"))
        resp = client.put(
            "/resource_providers/%s/aggregates" % rp,
            headers=_headers("1.19"),
            json={
                "aggregates": [agg],
                "resource_provider_generation": got.json()["generation"],
            },
        )
        assert resp.status_code == 200, resp.text


@contextlib.contextmanager
def _client(backend):
    """(an in-process client, the Database) over a fresh ``backend``."""
    fixtures.require_backend(backend)
    with fixtures.app(backend) as (app, db):
        yield (
            httpx.Client(
                transport=httpx.WSGITransport(app=app), base_url="http://localhost"
            ),
            db,
        )


@pytest.fixture(params=fixtures.BACKENDS)
def app_db(request):
    with _client(request.param) as (client, db):
        hosts = [_pgpu_host(client, "host%d" % i, pgpus=16 - 6 * i) for i in range(2)]
        _create(
            client,
            "avx",
            inventories={"VCPU": 2, "MEMORY_MB": 1024},
            traits=["HW_CPU_X86_AVX2"],
        )
        # A sharing provider: candidates may repeat under two anchors.
        shared = _create(
            client,
            "disk",
            inventories={"DISK_GB": 100},
            traits=["MISC_SHARES_VIA_AGGREGATE"],
        )
        _aggregate(client, hosts + [shared])
        yield client, db


def _materialised(db, query, version):
    """The answer as the path for limited requests builds it, all at once."""
    parsed = candidate_query.parse_query(
        list(httpx.QueryParams(query).multi_items()), version
    )
    conf = fixtures.configure().placement
    result = engine.find(
        db,
        parsed,
        engine.Options(
            nested_aware=version >= versions.NESTED_CANDIDATES,
            strategy=conf.allocation_candidates_generation_strategy,
            max_candidates=conf.max_allocation_candidates,
        ),
    )
    return render.document_json(result, handler.document_form(version))


@pytest.mark.parametrize("max_candidates", [-1, 1000])
def test_streamed_answer_is_byte_identical(app_db, max_candidates):
    client, db = app_db
    with fixtures.overrides(**{"placement.max_allocation_candidates": max_candidates}):
        for version in map(versions.Version.parse, VERSIONS):
            for query in QUERIES:
                if "required=" in query and version < versions.CANDIDATE_TRAITS:
                    continue
                if "group_policy" in query and version < versions.GRANULAR_GROUPS:
                    continue
                resp = client.get(
                    "/allocation_candidates?" + query, headers=_headers(str(version))
                )
                assert resp.status_code == 200, (version, query, resp.text)
                expected = _materialised(db, query, version)
                assert resp.content == expected, (version, query)


# Four isolated PGPU:1 groups: 16*15*14*13 + 10*9*8*7 = 48,720 candidates,
# past what an answer keeps while it is checked against the answer bound
# (engine.KEPT); the plans allow 16**4 + 10**4 = 75,536.
PAST_KEPT = _isolated(4)


@pytest.mark.parametrize(
    "bound, counted",
    [
        (1_000_000, False),  # the plans show it fits: not counted
        (60_000, True),  # the plans allow more: counted, then answered
    ],
)
def test_answer_past_kept_is_byte_identical(app_db, bound, counted, monkeypatch):
    """An answer past KEPT goes on from the candidates kept while it was
    checked against the bound: the same bytes as the materialised path,
    with a counting walk only when the plans allow more than the bound."""
    client, db = app_db
    runs = []
    search_ = engine._search

    def recorded(*args, build=True):
        runs.append(build)
        return search_(*args, build=build)

    monkeypatch.setattr(engine, "_search", recorded)
    with fixtures.overrides(**{"placement.max_answer_candidates": bound}):
        for version in map(versions.Version.parse, ("1.29", "1.39")):
            runs.clear()
            resp = client.get(
                "/allocation_candidates?" + PAST_KEPT, headers=_headers(str(version))
            )
            assert resp.status_code == 200, resp.text
            assert runs == ([True, False] if counted else [True])
            assert len(resp.json()["allocation_requests"]) == 48_720
            assert resp.content == _materialised(db, PAST_KEPT, version)


def test_answer_past_the_bound_is_refused_after_counting(app_db):
    client, _ = app_db
    with fixtures.overrides(**{"placement.max_answer_candidates": 40_000}):
        resp = client.get(
            "/allocation_candidates?" + PAST_KEPT, headers=_headers("1.39")
        )
    assert resp.status_code == 400, resp.text
    assert "more than 40000 allocation candidates" in resp.text


# The answer bound ([placement] max_answer_candidates) off: these answers
# are far past it, and what is tested is how an unbounded one is streamed.
UNBOUNDED = {"OS_PLACEMENT__MAX_ANSWER_CANDIDATES": "0"}


def _workers(server_pid):
    """Pids of the processes whose parent is ``server_pid``."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == server_pid:
                pids.append(int(entry))
    return pids


def _cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return f.read()


def _rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024


def test_huge_answer_streams_in_bounded_memory_and_stops(tmp_path, api_server):
    """Six isolated PGPU:1 groups on one root with 16 single-PGPU children:
    5,765,760 candidates (gigabytes of JSON), with the answer bound off.
    The answer is streamed (megabytes arrive while it is far from done),
    the worker grows by far less than 512 MB, and when the client hangs up
    the work stops: the next candidate request, which would have to wait
    for the worker's heavy-read turn while the search went on (minutes),
    is answered by the same worker."""
    with live_server.placement_api(
        str(tmp_path),
        "--workers",
        "1",
        "--threads",
        "2",
        server=api_server,
        **UNBOUNDED,
    ) as url:
        client = httpx.Client(base_url=url, timeout=30)
        _pgpu_host(client, "big")
        (server,) = [
            pid for pid in _workers(os.getpid()) if b"placement-api" in _cmdline(pid)
        ]
        (worker,) = _workers(server)
        before = _rss_mb(worker)
        peak = before
        read = 0
        # Bounded work, not time: 40 MB of an answer of gigabytes. An
        # answer built whole before its first byte would take minutes:
        # requests' timeout (20 s between bytes) is the hang guard.
        with requests.get(
            url + "/allocation_candidates?" + _isolated(6),
            headers=_headers("1.39"),
            stream=True,
            timeout=20,
        ) as resp:
            assert resp.status_code == 200
            for chunk in resp.iter_content(1 << 20):
                if not read:
                    assert chunk.startswith(b'{"allocation_requests":[{')
                read += len(chunk)
                peak = max(peak, _rss_mb(worker))
                if read >= 40 << 20:
                    break
        assert read >= 40 << 20, read
        assert peak - before < 512, (before, peak)
        # The client went away: the search stops, the worker lives on and
        # takes the next heavy read at once.
        resp = client.get(
            "/allocation_candidates?resources=PGPU:1", headers=_headers("1.39")
        )
        assert resp.status_code == 200
        assert len(resp.json()["allocation_requests"]) == PGPUS
        assert _workers(server) == [worker]
        assert client.get("/resource_providers", headers=ADMIN).status_code == 200


def _stream(url, query, worker, most=None):
    """(bytes read, its last bytes if the answer ended (else None), RSS
    growth in MB at 20 MB read, peak growth) of the unlimited request,
    read up to ``most`` bytes (None: to its end). The hang guard is
    requests' timeout, 30 s between bytes."""
    before = _rss_mb(worker)
    early = peak = 0.0
    read, tail = 0, b""
    with requests.get(
        url + "/allocation_candidates?" + query,
        headers=_headers("1.39"),
        stream=True,
        timeout=30,
    ) as resp:
        assert resp.status_code == 200
        for chunk in resp.iter_content(1 << 20):
            read += len(chunk)
            tail = (tail + chunk)[-64:]
            growth = _rss_mb(worker) - before
            peak = max(peak, growth)
            if read < 20 << 20:
                early = growth
            if most is not None and read >= most:
                return read, None, early, peak
    return read, tail, early, peak


def test_sharing_layouts_stream_in_bounded_memory(tmp_path):
    """With a sharing provider in the answer, repeats are dropped without
    remembering every candidate: with PGPUs of the root's own tree no
    candidate can repeat (it uses a provider of one tree only), so memory
    stays flat however long the answer; when every provider of a candidate
    is sharing (16 sharing PGPU roots) at most MAX_REMEMBERED are
    remembered and then the answer ends, complete JSON."""
    with live_server.placement_api(
        str(tmp_path), "--workers", "1", "--threads", "2", **UNBOUNDED
    ) as url:
        client = httpx.Client(base_url=url, timeout=30)
        root = _pgpu_host(client, "big")
        disk = _create(
            client,
            "disk",
            inventories={"DISK_GB": 100},
            traits=["MISC_SHARES_VIA_AGGREGATE"],
        )
        _aggregate(client, [root, disk])
        (server,) = [
            pid for pid in _workers(os.getpid()) if b"placement-api" in _cmdline(pid)
        ]
        (worker,) = _workers(server)
        # 5,765,760 candidates, each with the shared disk.
        read, ended, early, peak = _stream(
            url, _isolated(6, "&resources=DISK_GB:1"), worker, most=48 << 20
        )
        assert ended is None and read >= 48 << 20, read
        assert peak < 512, peak
        # Flat: growing with the candidates was about 1 KB each.
        assert peak - early < 64, (early, peak)

    (tmp_path / "2").mkdir()
    with live_server.placement_api(
        str(tmp_path / "2"), "--workers", "1", "--threads", "2", **UNBOUNDED
    ) as url:
        client = httpx.Client(base_url=url, timeout=30)
        (server,) = [
            pid for pid in _workers(os.getpid()) if b"placement-api" in _cmdline(pid)
        ]
        (worker,) = _workers(server)
        anchor = _create(client, "anchor", inventories={"VCPU": 8})
        gpus = [
            _create(
                client,
                "shared-gpu%d" % i,
                inventories={"PGPU": 1},
                traits=["MISC_SHARES_VIA_AGGREGATE"],
            )
            for i in range(PGPUS)
        ]
        _aggregate(client, [anchor] + gpus)
        # Candidates made of sharing providers only, repeated under every
        # anchor: the answer ends after MAX_REMEMBERED distinct ones.
        read, ended, early, peak = _stream(url, _isolated(6), worker)
        # Ended as a whole document: the summaries follow the candidates.
        assert ended is not None and ended.endswith(b"}}"), (read, ended)
        assert peak < 512, peak
        assert client.get("/resource_providers", headers=ADMIN).status_code == 200
        assert _workers(server) == [worker]


# Wide trees with isolated groups: the body is byte for byte the one built
# here the straightforward way, one dict per candidate and per summary in
# the server's order (roots in creation order, then each group's choice of
# child in creation order), encoded whole with orjson. The service writes
# it from cached fragments and builds each candidate from what each pick
# set once: neither may change a byte.
ROOTS = 3
CHILDREN = 4
VGPUS = 4
ROOT_INVENTORY = {"VCPU": 64, "MEMORY_MB": 262144, "DISK_GB": 4096}
ASKED = {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}


def _class_order(name):
    return os_resource_classes.STANDARDS.index(name)


@pytest.fixture(params=fixtures.BACKENDS)
def wide(request):
    """(client, [(root uuid, [child uuid, ...]), ...]) in creation order."""
    with _client(request.param) as (client, _):
        trees = []
        for i in range(ROOTS):
            root = _create(client, "wide-%d" % i, inventories=ROOT_INVENTORY)
            children = [
                _create(
                    client,
                    "wide-%d-pgpu%d" % (i, j),
                    parent=root,
                    inventories={"VGPU": VGPUS},
                )
                for j in range(CHILDREN)
            ]
            trees.append((root, children))
        yield client, trees


def _query(groups, shared_vgpu=False):
    asked = dict(ASKED, **({"VGPU": 1} if shared_vgpu else {}))
    return "&".join(
        ["resources=" + ",".join("%s:%d" % item for item in asked.items())]
        + ["resources%d=VGPU:1" % g for g in range(1, groups + 1)]
        + ["group_policy=isolate"]
    )


def _choices(children, groups, shared_vgpu):
    """(the unsuffixed group's VGPU child or None, the groups' children)
    in the order the server offers them."""
    spread = children if shared_vgpu else [None]
    for vgpu in spread:
        for picked in itertools.permutations(children, groups):
            yield vgpu, picked


def _expected(trees, groups, version, shared_vgpu=False):
    """The body, built one candidate and one summary at a time."""
    order = {}
    for root, children in trees:
        order[root] = len(order)
        for child in children:
            order[child] = len(order)
    requests = []
    used = set()
    for root, children in trees:
        for vgpu, picked in _choices(children, groups, shared_vgpu):
            amounts = {root: dict(ASKED)}
            for child in picked + ((vgpu,) if vgpu else ()):
                amounts.setdefault(child, {"VGPU": 0})["VGPU"] += 1
            used.update(amounts)
            allocations = {
                rp: {
                    "resources": {
                        rc: amounts[rp][rc]
                        for rc in sorted(amounts[rp], key=_class_order)
                    }
                }
                for rp in sorted(amounts, key=order.get)
            }
            candidate = {"allocations": allocations}
            if version >= (1, 34):
                unsuffixed = sorted({root, vgpu or root}, key=order.get)
                candidate["mappings"] = {
                    "": unsuffixed,
                    **{str(g + 1): [rp] for g, rp in enumerate(picked)},
                }
            requests.append(candidate)
    summaries = {}
    for root, children in trees:
        if root not in used:
            continue
        for rp in [root, *children]:
            inventory = ROOT_INVENTORY if rp == root else {"VGPU": VGPUS}
            summary = {
                "resources": {
                    rc: {"capacity": total, "used": 0}
                    # by class name
                    for rc, total in sorted(inventory.items())
                },
                "traits": [],
                "parent_provider_uuid": None if rp == root else root,
                "root_provider_uuid": root,
            }
            summaries[rp] = summary
    return orjson.dumps(
        {"allocation_requests": requests, "provider_summaries": summaries}
    )


@pytest.mark.parametrize("groups", [1, 2, 3])
# Nested-aware (1.29+); before and since mappings (1.34); the latest.
@pytest.mark.parametrize("version", ["1.29", "1.33", "1.34", "1.39"])
def test_wide_isolated_body(wide, groups, version):
    client, trees = wide
    resp = client.get(
        "/allocation_candidates?" + _query(groups), headers=_headers(version)
    )
    assert resp.status_code == 200, resp.text
    parsed = tuple(map(int, version.split(".")))
    assert resp.content == _expected(trees, groups, parsed)


@pytest.mark.parametrize("version", ["1.29", "1.39"])
def test_wide_isolated_with_unsuffixed_share_body(wide, version):
    """The unsuffixed group also asks VGPU: it may land on an isolated
    group's child, whose amounts are then summed."""
    client, trees = wide
    resp = client.get(
        "/allocation_candidates?" + _query(2, shared_vgpu=True),
        headers=_headers(version),
    )
    assert resp.status_code == 200, resp.text
    parsed = tuple(map(int, version.split(".")))
    assert resp.content == _expected(trees, 2, parsed, shared_vgpu=True)


def test_small_reads_are_answered_while_a_stream_is_in_progress(tmp_path, api_server):
    """The small reads (the root document, a provider, its allocations, a
    consumer's: under granian run in its event loop while no request is in
    the worker's threads) are answered alike before, while and after the
    worker streams an answer of gigabytes to a client that reads it
    slowly: meanwhile by the worker's other thread, and the stream goes
    on after them."""
    with live_server.placement_api(
        str(tmp_path),
        "--workers",
        "1",
        "--threads",
        "2",
        server=api_server,
        **UNBOUNDED,
    ) as url:
        client = httpx.Client(base_url=url, timeout=30)
        root = _pgpu_host(client, "big")
        consumer = str(uuid.uuid4())
        resp = client.put(
            "/allocations/" + consumer,
            headers=_headers("1.39"),
            json={
                "allocations": {root: {"resources": {"VCPU": 1}}},
                "project_id": str(uuid.uuid4()),
                "user_id": str(uuid.uuid4()),
                "consumer_generation": None,
                "consumer_type": "INSTANCE",
            },
        )
        assert resp.status_code == 204, resp.text

        def small_reads():
            answers = [
                client.get(path, headers=_headers("1.39"))
                for path in (
                    "/",
                    "/resource_providers/" + root,
                    "/resource_providers/%s/allocations" % root,
                    "/allocations/" + consumer,
                )
            ]
            assert [a.status_code for a in answers] == [200] * 4
            home, provider, by_provider, by_consumer = (a.json() for a in answers)
            assert home["versions"][0]["id"] == "v1.0"
            assert provider["name"] == "big"
            assert by_provider["allocations"][consumer]["resources"] == {"VCPU": 1}
            assert by_consumer["allocations"][root]["resources"] == {"VCPU": 1}

        small_reads()
        # requests' timeout (20 s between bytes) is the hang guard.
        with requests.get(
            url + "/allocation_candidates?" + _isolated(6),
            headers=_headers("1.39"),
            stream=True,
            timeout=20,
        ) as resp:
            chunks = resp.iter_content(1 << 20)
            assert next(chunks).startswith(b'{"allocation_requests":[{')
            small_reads()
            # Still streaming: 8 MB more arrive after the small reads.
            read = 0
            for chunk in chunks:
                read += len(chunk)
                if read >= 8 << 20:
                    break
            assert read >= 8 << 20, read
        small_reads()

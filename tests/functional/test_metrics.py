"""``GET /metrics``: Prometheus counters and histograms, in-process and
summed across the workers of a real gunicorn (multiprocess mode)."""

import glob
import os
import socket
import time
import uuid

import httpx
import pytest
import requests
from prometheus_client import multiprocess
from prometheus_client import parser

from placement import events
from placement.api import metrics
from placement.api import multiproc
from tests import fixtures
from tests.functional import live_server

ADMIN = {"x-auth-token": "admin", "accept": "application/json"}
VERSION_17 = {"openstack-api-version": "placement 1.7"}


def samples(text):
    """{(sample name, sorted label items): value} of an exposition."""
    out = {}
    for family in parser.text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text, name, **labels):
    return samples(text).get((name, tuple(sorted(labels.items()))), 0.0)


def requests_total(text, route, method, status, microversion):
    return value(
        text,
        "placement_http_requests_total",
        route=route,
        method=method,
        status=status,
        microversion=microversion,
    )


@pytest.fixture(params=fixtures.BACKENDS)
def client(request):
    fixtures.require_backend(request.param)
    with fixtures.app(request.param) as (app, _db):
        yield httpx.Client(
            transport=httpx.WSGITransport(app=app), base_url="http://localhost"
        )


def test_metrics_open_without_token(client):
    resp = client.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    assert resp.headers["x-openstack-request-id"].startswith("req-")
    assert "# TYPE placement_http_requests_total counter" in resp.text


def test_metrics_rejects_other_methods(client):
    resp = client.post("/metrics")
    assert resp.status_code == 405
    assert resp.headers["allow"] == "GET"


def test_requests_counted_by_route_template_and_microversion(client):
    before = client.get("/metrics").text
    rp = "/resource_providers/%s" % uuid.uuid4()
    client.get(rp, headers=dict(ADMIN, **{"openstack-api-version": "placement 1.20"}))
    client.get(rp, headers=ADMIN)
    client.get("/resource_classes", headers=ADMIN)  # 404 below 1.2
    client.get("/traits")  # 401, no token
    client.get("/no/such/%s" % uuid.uuid4(), headers=ADMIN)
    after = client.get("/metrics").text

    def delta(*args):
        return requests_total(after, *args) - requests_total(before, *args)

    tmpl = "/resource_providers/{uuid}"
    assert delta(tmpl, "GET", "404", "1.20") == 1
    assert delta(tmpl, "GET", "404", "1.0") == 1
    assert delta("/resource_classes", "GET", "404", "1.0") == 1
    assert delta("/traits", "GET", "401", "-") == 1
    # Unknown paths share one label value: cardinality stays bounded.
    assert delta(metrics.UNMATCHED, "GET", "404", "1.0") == 1
    assert delta("/metrics", "GET", "200", "-") == 1
    hist = "placement_http_request_duration_seconds_count"
    assert (
        value(after, hist, route=tmpl, method="GET")
        - value(before, hist, route=tmpl, method="GET")
    ) == 2


def test_domain_counters(client):
    before = client.get("/metrics").text
    events.conflict_retry()
    events.conflict_retry()
    events.generation_conflict()
    events.candidates_returned(7)
    after = client.get("/metrics").text

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("placement_generation_conflict_retries_total") == 2
    assert delta("placement_generation_conflicts_total") == 1
    assert delta("placement_allocation_candidates_returned_count") == 1
    assert delta("placement_allocation_candidates_returned_sum") == 7
    assert delta("placement_allocation_candidates_returned_bucket", le="10.0") == 1
    assert delta("placement_allocation_candidates_returned_bucket", le="5.0") == 0


def test_concurrent_update_409_is_counted(client):
    """A lost provider generation answered 409 bumps the conflict count."""
    rp = str(uuid.uuid4())
    headers = dict(ADMIN, **{"openstack-api-version": "placement 1.39"})
    created = client.post(
        "/resource_providers", headers=headers, json={"name": "conflict-rp", "uuid": rp}
    )
    assert created.status_code == 200, created.text
    before = client.get("/metrics").text
    resp = client.put(
        "/resource_providers/%s/traits" % rp,
        headers=headers,
        json={"traits": [], "resource_provider_generation": 99},
    )
    assert resp.status_code == 409
    assert resp.json()["errors"][0]["code"] == "placement.concurrent_update"
    after = client.get("/metrics").text
    assert (
        value(after, "placement_generation_conflicts_total")
        - value(before, "placement_generation_conflicts_total")
    ) == 1


def _served_by_both_workers(url, n):
    """Send n GET / at 1.7 to a two-worker sync server so that one worker
    serves one and the other the rest; then the GET / 1.7 count that four
    /metrics answers (whichever worker serves each) show."""
    # A half-sent request keeps one sync worker busy, so the other one
    # serves the burst; finishing it makes the first count one too.
    port = int(url.rsplit(":", 1)[1])
    held = socket.create_connection(("127.0.0.1", port))
    held.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
    time.sleep(0.5)
    for _ in range(n - 1):
        assert requests.get(url + "/", headers=VERSION_17).status_code == 200
    held.sendall(b"openstack-api-version: placement 1.7\r\nconnection: close\r\n\r\n")
    assert held.recv(100).startswith(b"HTTP/1.1 200")
    held.close()
    # The readiness probe at start-up also hits "/", but at 1.0.
    return [
        requests_total(requests.get(url + "/metrics").text, "/", "GET", "200", "1.7")
        for _ in range(4)
    ]


def test_counts_add_up_across_gunicorn_workers(tmp_path):
    """Two workers each serve requests; every /metrics answer (whichever
    worker serves it) shows the sum over both."""
    mpdir = str(tmp_path / "prom")
    os.makedirs(mpdir)
    n = 30
    with live_server.gunicorn(workers=2, env={multiproc.ENV: mpdir}) as url:
        assert _served_by_both_workers(url, n) == [n] * 4
    per_worker = [
        worker_total(path) for path in glob.glob(os.path.join(mpdir, "counter_*.db"))
    ]
    assert sorted(per_worker) == [1, n - 1]


@pytest.mark.slow
def test_placement_api_workers_add_up(tmp_path, monkeypatch, api_server):
    """The real ``placement-api --workers 2`` sets multiprocess mode up by
    itself (no PROMETHEUS_MULTIPROC_DIR given): one worker's /metrics
    reports the other's requests too."""
    monkeypatch.delenv(multiproc.ENV, raising=False)
    n = 20
    with live_server.placement_api(
        tmp_path, "--workers", "2", server=api_server
    ) as url:
        assert _served_by_both_workers(url, n) == [n] * 4


def worker_total(path):
    """GET / at 1.7 counted in one worker's own file."""
    for family in multiprocess.MultiProcessCollector.merge([path]):
        for s in family.samples:
            if (
                s.name == "placement_http_requests_total"
                and s.labels.get("route") == "/"
                and s.labels.get("microversion") == "1.7"
            ):
                return s.value
    return 0


def _provider_with_vcpu(client, headers):
    rp = str(uuid.uuid4())
    assert (
        client.post(
            "/resource_providers",
            headers=headers,
            json={"name": "m-%s" % rp, "uuid": rp},
        ).status_code
        == 200
    )
    assert (
        client.put(
            "/resource_providers/%s/inventories" % rp,
            headers=headers,
            json={
                "resource_provider_generation": 0,
                "inventories": {"VCPU": {"total": 4}},
            },
        ).status_code
        == 200
    )
    return rp


def test_candidates_returned_per_request(client):
    headers = dict(ADMIN, **{"openstack-api-version": "placement 1.39"})
    _provider_with_vcpu(client, headers)
    _provider_with_vcpu(client, headers)
    before = client.get("/metrics").text
    for query in ("resources=VCPU:1", "resources=VCPU:99"):
        assert (
            client.get("/allocation_candidates?" + query, headers=headers).status_code
            == 200
        )
    after = client.get("/metrics").text

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    name = "placement_allocation_candidates_returned"
    assert delta(name + "_count") == 2
    assert delta(name + "_sum") == 2
    assert delta(name + "_bucket", le="0.0") == 1
    assert delta(name + "_bucket", le="2.0") == 2


def test_catalog_use_counted(client):
    """The first candidate request after a provider write reads the catalog
    again, the next ones hit it; with the catalog off nothing is counted."""
    headers = dict(ADMIN, **{"openstack-api-version": "placement 1.39"})
    _provider_with_vcpu(client, headers)
    query = "/allocation_candidates?resources=VCPU:1"
    counts = []
    for catalog_on in (True, False):
        with fixtures.overrides(**{"placement.provider_catalog": catalog_on}):
            before = client.get("/metrics").text
            for _ in range(3):
                assert client.get(query, headers=headers).status_code == 200
            after = client.get("/metrics").text
        name = "placement_catalog_requests_total"
        counts.append(
            {
                outcome: value(after, name, outcome=outcome)
                - value(before, name, outcome=outcome)
                for outcome in ("hit", "read", "sql")
            }
        )
    assert counts == [{"hit": 2, "read": 1, "sql": 0}, {"hit": 0, "read": 0, "sql": 0}]


@pytest.mark.slow
def test_workers_read_the_catalog_before_taking_requests(
    tmp_path, monkeypatch, api_server
):
    """placement-api reads the provider catalog before its workers accept
    connections: the first candidate request and provider list after a
    start, one per worker, are catalog hits, none reads it."""
    monkeypatch.delenv(multiproc.ENV, raising=False)
    headers = dict(ADMIN, **{"openstack-api-version": "placement 1.39"})
    with live_server.placement_api(
        tmp_path, "--workers", "1", server=api_server
    ) as url:
        with httpx.Client(base_url=url) as client:
            _provider_with_vcpu(client, headers)
    name = "placement_catalog_requests_total"
    with live_server.placement_api(
        tmp_path, "--workers", "2", server=api_server
    ) as url:
        with httpx.Client(base_url=url) as client:
            found = [
                client.get(path, headers=headers).json()
                for path in (
                    "/allocation_candidates?resources=VCPU:1",
                    "/resource_providers",
                )
            ]
            text = client.get("/metrics").text
    assert len(found[0]["allocation_requests"]) == 1
    assert len(found[1]["resource_providers"]) == 1
    counts = {o: value(text, name, outcome=o) for o in ("hit", "read", "sql")}
    assert counts == {"hit": 2, "read": 0, "sql": 0}


@pytest.mark.slow
def test_an_idle_worker_follows_writes_by_itself(tmp_path, monkeypatch, api_server):
    """After writes, an idle placement-api worker brings its catalog up to
    date in the background: the next candidate request finds it current
    and follows nothing itself."""
    monkeypatch.delenv(multiproc.ENV, raising=False)
    headers = dict(ADMIN, **{"openstack-api-version": "placement 1.39"})
    updates = "placement_catalog_updates_total"
    with live_server.placement_api(
        tmp_path, "--workers", "1", server=api_server
    ) as url:
        with httpx.Client(base_url=url) as client:
            _provider_with_vcpu(client, headers)
            deadline = time.monotonic() + 20
            while not value(client.get("/metrics").text, updates, how="deltas"):
                assert time.monotonic() < deadline, "the catalog was not followed"
                time.sleep(0.5)
            before = client.get("/metrics").text
            found = client.get(
                "/allocation_candidates?resources=VCPU:1", headers=headers
            ).json()
            after = client.get("/metrics").text
    assert len(found["allocation_requests"]) == 1
    for how in ("deltas", "full"):
        assert value(after, updates, how=how) == value(before, updates, how=how)
    name = "placement_catalog_requests_total"
    assert value(after, name, outcome="hit") - value(before, name, outcome="hit") == 1


def test_allocation_conflict_retry_counted(client, monkeypatch):
    """A lost generation race re-runs the write and counts one retry."""
    from placement.objects import allocation

    headers = dict(ADMIN, **{"openstack-api-version": "placement 1.39"})
    rp = _provider_with_vcpu(client, headers)
    real = allocation._transaction
    lost = []

    def lose_once(db, attempt):
        if not lost:
            lost.append(True)
            raise allocation.ProviderRace("lost")
        return real(db, attempt)

    monkeypatch.setattr(allocation, "_transaction", lose_once)
    before = client.get("/metrics").text
    resp = client.put(
        "/allocations/%s" % uuid.uuid4(),
        headers=headers,
        json={
            "allocations": {rp: {"resources": {"VCPU": 1}}},
            "project_id": str(uuid.uuid4()),
            "user_id": str(uuid.uuid4()),
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
    )
    assert resp.status_code == 204, resp.text
    after = client.get("/metrics").text
    name = "placement_generation_conflict_retries_total"
    assert value(after, name) - value(before, name) == 1


def test_multiproc_prepare(tmp_path, monkeypatch):
    """prepare() names the directory and removes nothing; claim() removes
    earlier processes' sample files while it holds the lock."""
    named = tmp_path / "named"
    named.mkdir()
    (named / "counter_123.db").write_bytes(b"stale")
    (named / "keep.txt").write_text("not ours")
    monkeypatch.setenv(multiproc.ENV, str(named))
    monkeypatch.setattr(multiproc, "_lock", None)
    assert multiproc.prepare() == str(named)
    assert sorted(p.name for p in named.iterdir()) == ["counter_123.db", "keep.txt"]
    assert multiproc.claim()
    assert sorted(p.name for p in named.iterdir()) == ["keep.txt", multiproc.LOCK]
    os.close(multiproc._lock)

    monkeypatch.delenv(multiproc.ENV)
    made = multiproc.prepare()
    try:
        assert os.environ[multiproc.ENV] == made
        assert os.listdir(made) == []
    finally:
        os.rmdir(made)


def test_label_values_stay_bounded(client):
    """Made-up methods and paths add no series: they count as ``other``
    and ``unmatched``."""
    client.request("BREW", "/warm-up", headers=ADMIN)
    client.request("BREW", "/resource_providers", headers=ADMIN)
    client.get("/metrics")
    before = client.get("/metrics").text
    for i in range(100):
        client.request("M%dX" % i, "/made/up/%d" % i, headers=ADMIN)
        client.request("PROPFIND%d" % i, "/resource_providers", headers=ADMIN)
    after = client.get("/metrics").text
    assert samples(after).keys() == samples(before).keys()
    total = "placement_http_requests_total"
    methods = {
        dict(labels)["method"] for (name, labels) in samples(after) if name == total
    }
    assert methods <= metrics.KNOWN_METHODS | {metrics.OTHER_METHOD}
    count = [
        sum(
            v
            for (name, labels), v in samples(text).items()
            if name == total
            and dict(labels)["method"] == metrics.OTHER_METHOD
            and dict(labels)["route"] == metrics.UNMATCHED
        )
        for text in (before, after)
    ]
    assert count[1] - count[0] == 100

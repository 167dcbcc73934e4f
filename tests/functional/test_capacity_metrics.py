"""The capacity gauges of GET /metrics: the shapes of ``[capacity]
shapes`` exported by a real placement-api with two workers (a total per
shape, one series per aggregate, never per host), and computed at most
once per interval, by one worker, never by a scrape."""

import fcntl
import os
import time

import httpx
import pytest

from placement.api import capacity_gauges
from placement.api import multiproc
from tests import fixtures
from tests.functional import live_server
from tests.functional import test_metrics

AGG = "ca000000-0000-4000-8000-0000000000a0"
HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
SHAPES = (
    "small:resources=VCPU:1; big:resources=VCPU:4,MEMORY_MB:1; "
    "nope:resources=CUSTOM_NOPE:1"
)


def _host(client, name, vcpu, aggregates=()):
    rp = client.post("/resource_providers", json={"name": name}, headers=HEADERS)
    assert rp.status_code == 200, rp.text
    rp = rp.json()
    put = client.put(
        "/resource_providers/%s/inventories" % rp["uuid"],
        json={
            "resource_provider_generation": 0,
            "inventories": {"VCPU": {"total": vcpu}, "MEMORY_MB": {"total": 64}},
        },
        headers=HEADERS,
    )
    assert put.status_code == 200, put.text
    if aggregates:
        put = client.put(
            "/resource_providers/%s/aggregates" % rp["uuid"],
            json={"resource_provider_generation": 1, "aggregates": list(aggregates)},
            headers=HEADERS,
        )
        assert put.status_code == 200, put.text


def test_placement_api_exports_configured_shapes(tmp_path, monkeypatch):
    monkeypatch.delenv(multiproc.ENV, raising=False)
    with live_server.placement_api(
        tmp_path,
        "--workers",
        "2",
        OS_CAPACITY__SHAPES=SHAPES,
        OS_CAPACITY__INTERVAL="1",
    ) as url:
        with httpx.Client(base_url=url) as client:
            _host(client, "cn1", 8, [AGG])
            _host(client, "cn2", 3)
            # Hang guard: the gauges follow within a few intervals.
            deadline = time.monotonic() + 60
            while True:
                found = test_metrics.samples(client.get("/metrics").text)
                small = found.get(("placement_capacity", (("shape", "small"),)))
                if small == 11 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
    gauges = {k: v for k, v in found.items() if k[0].startswith("placement_capacity")}
    assert gauges == {
        ("placement_capacity", (("shape", "small"),)): 11,
        ("placement_capacity", (("shape", "big"),)): 2,
        ("placement_capacity_aggregate", (("aggregate", AGG), ("shape", "small"))): 8,
        ("placement_capacity_aggregate", (("aggregate", AGG), ("shape", "big"))): 2,
    }


def test_shapes_parsed():
    assert capacity_gauges.parse_shapes(
        " m1.small:resources=VCPU:1,MEMORY_MB:2048; gpu:resources=VCPU:8&"
        "resources1=VGPU:1 ;"
    ) == [
        ("m1.small", "resources=VCPU:1,MEMORY_MB:2048"),
        ("gpu", "resources=VCPU:8&resources1=VGPU:1"),
    ]
    with pytest.raises(ValueError):
        capacity_gauges.parse_shapes("noquery")


@pytest.mark.parametrize("shared", [False, True])
def test_computed_once_per_interval(tmp_path, monkeypatch, shared):
    """At most one computation per interval (per process, or across
    workers sharing a directory, where a worker holding the lock computes
    and the others do not); reading the gauges never computes."""
    if shared:
        monkeypatch.setenv(multiproc.ENV, str(tmp_path))
    else:
        monkeypatch.delenv(multiproc.ENV, raising=False)
    fixtures.configure()
    with fixtures.database("sqlite") as db:
        computed = []
        real = capacity_gauges.compute
        monkeypatch.setattr(
            capacity_gauges,
            "compute",
            lambda *a: computed.append(1) or real(*a),
        )
        shapes = capacity_gauges.parse_shapes("small:resources=VCPU:1")
        one = capacity_gauges.Gauges(db, shapes, 10)
        other = capacity_gauges.Gauges(db, shapes, 10)
        assert one.refresh(now=1000.0)
        assert not one.refresh(now=1005.0)
        for _ in range(3):
            one.exposition()
        if shared:
            # The other worker sees the result and does not compute it.
            assert not other.refresh(now=1005.0)
            assert other.current() == {"small": {"capacity": 0, "aggregates": {}}}
            path = os.path.join(str(tmp_path), capacity_gauges.STATE_FILE)
            with open(path + ".lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                assert not other.refresh(now=1020.0)  # one is at it
        assert len(computed) == 1
        assert one.refresh(now=1020.0)
        assert len(computed) == 2
        assert b'placement_capacity{shape="small"} 0.0' in one.exposition()

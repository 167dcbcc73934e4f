"""placement-api serving for real (each of its HTTP servers in a
subprocess on a free port), and the configuration rules of the WSGI entry
point."""

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
import requests

from tests import helpers
from tests.functional import live_server

pytestmark = pytest.mark.slow


def get(url, **headers):
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), json.load(response)
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.load(e)


@pytest.fixture
def server(tmp_path, api_server):
    """Starts placement-api with each of its HTTP servers; yields a
    function returning its base URL."""
    with contextlib.ExitStack() as running:
        yield lambda *args, **env: running.enter_context(
            live_server.placement_api(tmp_path, *args, server=api_server, **env)
        )


def test_serves_the_api(server):
    base = server("--workers", "2", "--threads", "2")
    status, headers, body = get(
        base + "/resource_providers", **{"x-auth-token": "admin"}
    )
    assert status == 200
    assert body == {"resource_providers": []}
    assert headers["x-openstack-request-id"].startswith("req-")
    status, _, body = get(
        base + "/resource_classes",
        **{"x-auth-token": "admin", "openstack-api-version": "placement 1.2"},
    )
    assert "VCPU" in [c["name"] for c in body["resource_classes"]]
    status, _, body = get(base + "/resource_providers")
    assert status == 401


def test_serves_under_a_prefix(server):
    base = server(SCRIPT_NAME="/placement")
    status, _, body = get(base + "/placement/")
    assert status == 200
    assert body["versions"][0]["max_version"] == "1.39"
    status, _, body = get(base + "/placement", **{"x-auth-token": "admin"})
    assert body["versions"][0]["id"] == "v1.0"
    status, _, body = get(
        base + "/placement/resource_classes/VCPU",
        **{"x-auth-token": "admin", "openstack-api-version": "placement 1.2"},
    )
    assert body["links"][0]["href"] == "/placement/resource_classes/VCPU"


def test_refuses_to_start_without_connection():
    result = helpers.run([helpers.script("placement-api")], timeout=60)
    assert result.returncode == 1
    assert "[placement_database] connection is not set" in result.stderr


# -- placement.wsgi.api: configuration ---------------------------------------

PROBE = """
from placement.wsgi import api
print(api.CONF.api.auth_strategy, api.CONF.placement.max_allocation_candidates)
"""


def _probe(**env):
    return helpers.run([sys.executable, "-c", PROBE], env, timeout=60)


def _write_conf(directory, connection):
    directory.mkdir(exist_ok=True)
    (directory / "placement.conf").write_text(
        "[api]\nauth_strategy = noauth2\n"
        "[placement]\nmax_allocation_candidates = 7\n"
        "[placement_database]\nconnection = %s\n"
        "sync_on_startup = True\n" % connection
    )


def test_wsgi_reads_os_placement_config_dir(tmp_path):
    _write_conf(tmp_path / "etc", "sqlite:///%s/p.sqlite" % tmp_path)
    result = _probe(OS_PLACEMENT_CONFIG_DIR=str(tmp_path / "etc"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].split() == ["noauth2", "7"]
    # sync_on_startup built the schema.
    assert (tmp_path / "p.sqlite").exists()


def test_environment_overrides_the_file(tmp_path):
    _write_conf(tmp_path / "etc", "sqlite:///%s/p.sqlite" % tmp_path)
    result = _probe(
        OS_PLACEMENT_CONFIG_DIR=str(tmp_path / "etc"),
        OS_PLACEMENT__MAX_ALLOCATION_CANDIDATES="9",
    )
    assert result.stdout.splitlines()[-1].split() == ["noauth2", "9"], result.stderr


def test_wsgi_without_connection_fails_hard(tmp_path):
    (tmp_path / "placement.conf").write_text("[api]\n")
    result = _probe(OS_PLACEMENT_CONFIG_DIR=str(tmp_path))
    assert result.returncode != 0
    assert "connection is not set" in result.stdout + result.stderr


# -- odd request lines through a real server ---------------------------------

ODD_TARGETS = [
    b"/resource_providers/%ff",
    b"/resource_providers/%ff/inventories",
    b"/resource_providers/abc%00def/traits",
    b"/resource_providers/%2F",
    b"/traits/%C3%A9",
    b"/traits/CUSTOM_%00",
    b"/traits/%ff",
    b"/resource_classes/%ff",
    b"/resource_classes/CUSTOM_%C3%A9",
    b"/allocations/%ff",
    b"/%ff",
    b"/usages?project_id=%ff",
    b"/traits?name=in:%ff",
    b"/resource_providers?uuid=%00",
    b"/allocation_candidates?resources=VCPU:%ff",
    b"/traits/" + b"A" * 3000,
    # Over gunicorn's request-line limit, and raw bytes it refuses.
    b"/resource_providers/" + b"a" * 5000,
    b"/" + b"a" * 9000,
    b"/resource_providers/\x00",
    b"/traits/\xff",
    b"/traits/\xc3\xa9",
    b"/resource_providers?name=\x00",
]


def _raw_request(port, method, target):
    """Send one request exactly as given; (status, headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(
            b"%s %s HTTP/1.1\r\nHost: x\r\nx-auth-token: admin\r\n"
            b"openstack-api-version: placement latest\r\n"
            b"content-type: application/json\r\ncontent-length: 2"
            b"\r\nconnection: close\r\n\r\n{}" % (method, target)
        )
        data = b"".join(iter(lambda: sock.recv(65536), b""))
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def _refused_by_the_parser(server, status, headers, body):
    """granian's HTTP parser (hyper) answers what it refuses (raw NUL or
    \\xff bytes, a bad method) itself: a 400 with no body, and the
    connection closed. placement-api's gunicorn worker answers the JSON
    error document instead."""
    return (
        server == "granian"
        and (status, body) == (400, b"")
        and headers.get("connection") == "close"
    )


def test_odd_paths_never_get_a_5xx_or_html(server, api_server):
    """Every answer is JSON; errors are the JSON error document (or, under
    granian, the empty 400 of its parser). (GET /allocations/{any
    consumer} is a 200 with no allocations.)"""
    port = int(server().rsplit(":", 1)[1])
    for target in ODD_TARGETS:
        for method in (b"GET", b"PUT", b"DELETE", b"G\x00T"):
            status, headers, body = _raw_request(port, method, target)
            where = (method, target[:60], status, body[:200])
            assert status < 500, where
            if _refused_by_the_parser(api_server, status, headers, body):
                continue
            assert headers["content-type"] == "application/json", where
            if status >= 400:
                assert json.loads(body)["errors"][0]["status"] == status, where


# -- restarts ----------------------------------------------------------------


def test_sighup_replaces_every_worker_and_no_request_fails(tmp_path, api_server):
    """SIGHUP to the master replaces its workers (forked again from the
    app it built) while 4 clients keep sending requests, each on a new
    connection: none of them is answered with an error (under gunicorn
    none fails at all), and the new workers serve."""
    with live_server.placement_api(
        tmp_path, "--workers", "2", server=api_server
    ) as url:
        port = int(url.rsplit(":", 1)[1])
        deadline = time.monotonic() + 60
        old = set()
        # The server answers once one worker is up; wait for both.
        while len(old) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            old = set(live_server.workers(port))
        assert len(old) == 2
        outcomes = []
        stop = threading.Event()

        def client():
            while not stop.is_set():
                try:
                    status = requests.get(url + "/", timeout=30).status_code
                except requests.RequestException as e:
                    status = type(e).__name__
                outcomes.append(status)

        senders = [threading.Thread(target=client) for _ in range(4)]
        for sender in senders:
            sender.start()
        try:
            os.kill(live_server.master(port), signal.SIGHUP)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                now = set(live_server.workers(port))
                if len(now) == 2 and not now & old:
                    break
                time.sleep(0.2)
            served_before = len(outcomes)
            while len(outcomes) < served_before + 5:
                time.sleep(0.1)
        finally:
            stop.set()
            for sender in senders:
                sender.join()
    assert len(now) == 2 and not now & old, (old, now)
    assert outcomes.count(200) > 5
    # granian's old worker closes a connection it has accepted but not yet
    # read a request from when it stops (hyper's graceful shutdown): such
    # a client sees the connection closed without an answer (doc/
    # operations.md "HTTP server"). Nothing is ever answered with an error.
    lost = {"gunicorn": set(), "granian": {"ConnectionError"}}[api_server]
    assert set(outcomes) - {200} <= lost, [o for o in outcomes if o != 200]


def test_an_oversized_head_is_refused_with_431(server, api_server):
    """A head of 120 fields of 4 KB (480 KB: over gunicorn's 100 fields
    and over granian's 417,792-byte buffer) is refused with a 431 and the
    connection closed; the server goes on serving."""
    base = server()
    port = int(base.rsplit(":", 1)[1])
    fields = b"".join(b"X-F%d: %s\r\n" % (i, b"a" * 4000) for i in range(120))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n")
        data = b"".join(iter(lambda: sock.recv(65536), b""))
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 "), head
    if api_server == "gunicorn":
        assert json.loads(body)["errors"][0]["status"] == 431
    else:
        assert body == b""
    assert get(base + "/")[0] == 200

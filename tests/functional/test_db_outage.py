"""A database outage seen by clients: 503 with the JSON error body and
Retry-After while the server is down, never its host or driver text, and
service back without a restart once it is up again. A 500 names only the
request id; the detail goes to the log."""

import os
import signal
import time

import httpx
import pytest
import requests

from placement.objects import trait as trait_obj
from tests import fixtures
from tests import private_mariadb
from tests.functional import live_server

ADMIN = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}


@pytest.fixture
def mariadb():
    private_mariadb.require()
    server = private_mariadb.PrivateMariaDB()
    try:
        server.start()
        yield server
    finally:
        server.close()


def _status_once_up(url, timeout=20):
    """The status of GET ``url``: its first 200, or the last status seen
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        status = requests.get(url, headers=ADMIN).status_code
        if status == 200 or time.monotonic() > deadline:
            return status
        time.sleep(0.5)


def test_database_down_answers_503_then_recovers(mariadb, tmp_path):
    mariadb.execute("CREATE DATABASE placement CHARACTER SET utf8mb4")
    with live_server.placement_api(
        str(tmp_path),
        "--db-sync",
        OS_PLACEMENT_DATABASE__CONNECTION=mariadb.url("placement"),
    ) as url:
        assert requests.get(url + "/traits", headers=ADMIN).status_code == 200
        mariadb.stop()
        for path in ("/traits", "/resource_providers"):
            resp = requests.get(url + path, headers=ADMIN, timeout=20)
            assert resp.status_code == 503, resp.text
            assert int(resp.headers["retry-after"]) > 0
            (error,) = resp.json()["errors"]
            assert error["status"] == 503
            assert error["request_id"] == resp.headers["x-openstack-request-id"]
            # The driver's text names the host and port: only the log has it.
            for leak in ("127.0.0.1", str(mariadb.port), "pymysql", "connect"):
                assert leak not in resp.text
        assert requests.get(url + "/healthcheck").status_code == 503
        mariadb.start()
        assert _status_once_up(url + "/traits") == 200


SECRET = "SELECT secret_column FROM hidden_table WHERE host = 'db.internal'"


@pytest.mark.parametrize("backend", fixtures.BACKENDS)
def test_500_names_request_id_only(backend, monkeypatch, caplog):
    fixtures.require_backend(backend)

    def broken(db, **filters):
        raise RuntimeError(SECRET)

    monkeypatch.setattr(trait_obj, "list_traits", broken)
    with fixtures.app(backend) as (app, _db):
        client = httpx.Client(
            transport=httpx.WSGITransport(app=app), base_url="http://localhost"
        )
        resp = client.get("/traits", headers=ADMIN)
    assert resp.status_code == 500
    request_id = resp.headers["x-openstack-request-id"]
    (error,) = resp.json()["errors"]
    assert error["request_id"] == request_id
    assert "internal error" in error["detail"]
    assert request_id in error["detail"]
    assert "secret" not in resp.text and "db.internal" not in resp.text
    logged = "\n".join(
        r.getMessage() + (str(r.exc_info[1]) if r.exc_info else "")
        for r in caplog.records
    )
    assert SECRET in logged and request_id in logged


def test_worker_replaced_while_database_is_down(mariadb, tmp_path, api_server):
    """A worker that dies during an outage is replaced, and its
    replacement starts although it cannot read the provider catalog: the
    service keeps answering 503 and recovers (gunicorn stops the whole
    server when a worker fails to start, granian when one dies within
    seconds of its last replacement)."""
    mariadb.execute("CREATE DATABASE placement CHARACTER SET utf8mb4")
    with live_server.placement_api(
        str(tmp_path),
        "--db-sync",
        "--workers",
        "1",
        server=api_server,
        OS_PLACEMENT_DATABASE__CONNECTION=mariadb.url("placement"),
    ) as url:
        port = int(url.rsplit(":", 1)[1])
        assert requests.get(url + "/traits", headers=ADMIN).status_code == 200
        mariadb.stop()
        (worker,) = live_server.workers(port)
        os.kill(worker, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while True:
            replaced = [pid for pid in live_server.workers(port) if pid != worker]
            if replaced or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert replaced
        resp = requests.get(url + "/traits", headers=ADMIN, timeout=20)
        assert resp.status_code == 503, resp.text
        mariadb.start()
        assert _status_once_up(url + "/traits") == 200

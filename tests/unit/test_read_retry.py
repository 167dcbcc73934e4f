"""A read the database aborted with a deadlock (Galera aborts a reader
holding a table a replicated schema change needs) is run again whole,
not answered 409: GET and HEAD only; a write's handler is never run
twice by the route (its transaction has its own retry)."""

import falcon
import falcon.testing
import pymysql
from sqlalchemy import exc as sa_exc

from placement.api import routes
from placement.db import retry
from placement.objects import resource_class
from tests.wsgi_client import call
from tests.wsgi_client import pipeline


def _deadlock():
    return sa_exc.OperationalError(
        "SELECT name FROM resource_classes",
        {},
        pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock"),
    )


def _failing(times, then):
    calls = []

    def fn(*args, **kwargs):
        calls.append(args)
        if len(calls) <= times:
            raise _deadlock()
        return then(*args, **kwargs)

    return fn, calls


def _resource_classes(placement):
    return call(
        placement,
        "/resource_classes",
        x_auth_token="admin",
        openstack_api_version="placement 1.23",
    )


def test_a_read_aborted_once_answers_as_if_it_had_not_been(monkeypatch):
    with pipeline() as placement:
        expected = _resource_classes(placement)
        assert expected.status == 200
        fn, calls = _failing(1, resource_class.list_all)
        monkeypatch.setattr(resource_class, "list_all", fn)
        response = _resource_classes(placement)
    assert response.status == 200
    assert response.json() == expected.json()
    assert len(calls) == 2


def test_a_read_aborted_every_time_is_a_409_after_its_tries(monkeypatch):
    with pipeline() as placement:
        fn, calls = _failing(99, resource_class.list_all)
        monkeypatch.setattr(resource_class, "list_all", fn)
        response = _resource_classes(placement)
    assert response.status == 409
    assert response.json()["errors"][0]["code"] == "placement.concurrent_update"
    assert len(calls) == 1 + retry.READ_RETRIES


def _route(method, handler):
    app = falcon.App()
    app.add_route("/thing", routes.Route([(method, handler)]))
    return falcon.testing.TestClient(app)


def _ok(req, resp):
    resp.media = {"ok": True}


def test_only_reads_are_run_again():
    for method in ("GET", "HEAD"):
        handler, calls = _failing(1, _ok)
        assert (
            _route(method, handler).simulate_request(method, "/thing").status_code
            == 200
        )
        assert len(calls) == 2
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        handler, calls = _failing(1, _ok)
        assert (
            _route(method, handler).simulate_request(method, "/thing").status_code
            == 500
        )
        assert len(calls) == 1

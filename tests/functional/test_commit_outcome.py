"""An allocation write whose COMMIT fails says what happened, on SQLite,
MySQL and PostgreSQL: a non-2xx answer means nothing of it was written.

The failure is injected in the database layer (``Database.commit_fault``):
raised just after a COMMIT that succeeded (as a connection lost while its
answer was on the way, or a certification failure reported late on
Galera, would be), the write is answered as done, with exactly its rows;
raised just before the COMMIT is sent, the client gets a clean 409 (or a
503 for a lost connection) and nothing is written.
"""

import sqlite3
import typing
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from placement.db import api as db_api
from tests import fixtures
from tests import ports
from tests import wsgi_client
from tests.functional.test_shared_database import _call
from tests.functional.test_shared_database import _host


@pytest.fixture(params=fixtures.BACKENDS)
def app(request):
    fixtures.require_backend(request.param)
    with fixtures.app(request.param) as (app, db):
        yield app, db


def _error(db, kind):
    """A DBAPIError of ``db``'s driver: a deadlock (retried) or a lost
    connection (503)."""
    if db.dialect == "mysql":
        import pymysql

        code = 1213 if kind == "deadlock" else 2013
        orig = pymysql.err.OperationalError(code, kind)
    elif db.dialect == "postgresql":
        import psycopg

        orig = (
            psycopg.errors.DeadlockDetected(kind)
            if kind == "deadlock"
            else psycopg.OperationalError("server closed the connection unexpectedly")
        )
    else:
        orig = sqlite3.OperationalError(
            "database is locked" if kind == "deadlock" else "disk I/O error"
        )
    error = sa_exc.OperationalError("COMMIT", None, orig)
    if kind == "lost":
        error.connection_invalidated = True
    return error


def _fail(db, point, kind, times):
    """Raise ``kind`` at ``point`` of the next ``times`` COMMITs."""
    left = [times]

    def fault(conn, at):
        if at == point and left[0]:
            left[0] -= 1
            raise _error(db, kind)

    db.commit_fault = fault


def _claim(rp, amount=1, generation=None):
    return {
        "allocations": {rp: {"resources": {"VCPU": amount}}},
        "project_id": "proj",
        "user_id": "user",
        "consumer_generation": generation,
        "consumer_type": "INSTANCE",
    }


def _usage(app, rp):
    usages = _call(app, "/resource_providers/%s/usages" % rp)
    assert usages.status == 200, usages.body
    return usages.json()["usages"]["VCPU"]


@pytest.mark.parametrize("kind", ["deadlock", "lost"])
def test_a_claim_committed_then_failed_is_answered_done(app, kind):
    app, db = app
    rp = _host(app, "rp")
    consumer = str(uuid.uuid4())
    _fail(db, db_api.AFTER_COMMIT, kind, 1)
    put = _call(app, "/allocations/" + consumer, "PUT", _claim(rp, 2))
    db.commit_fault = None
    assert put.status == 204, put.body
    got = _call(app, "/allocations/" + consumer).json()
    assert list(got["allocations"]) == [rp]
    assert got["allocations"][rp]["resources"] == {"VCPU": 2}
    assert got["consumer_generation"] == 1
    assert _usage(app, rp) == 2


def test_a_replacement_committed_then_failed_is_answered_done(app):
    app, db = app
    rp = _host(app, "rp")
    consumer = str(uuid.uuid4())
    assert _call(app, "/allocations/" + consumer, "PUT", _claim(rp)).status == 204
    _fail(db, db_api.AFTER_COMMIT, "deadlock", 1)
    put = _call(app, "/allocations/" + consumer, "PUT", _claim(rp, 3, generation=1))
    db.commit_fault = None
    assert put.status == 204, put.body
    got = _call(app, "/allocations/" + consumer).json()
    assert got["consumer_generation"] == 2
    assert got["allocations"][rp]["resources"] == {"VCPU": 3}
    assert _usage(app, rp) == 3


def test_several_consumers_committed_then_failed_are_answered_done(app):
    app, db = app
    rp = _host(app, "rp")
    consumers = [str(uuid.uuid4()) for _ in range(3)]
    body = {c: _claim(rp, n + 1) for n, c in enumerate(consumers)}
    _fail(db, db_api.AFTER_COMMIT, "deadlock", 1)
    post = _call(app, "/allocations", "POST", body)
    db.commit_fault = None
    assert post.status == 204, post.body
    for n, c in enumerate(consumers):
        got = _call(app, "/allocations/" + c).json()
        assert got["allocations"][rp]["resources"] == {"VCPU": n + 1}
        assert got["consumer_generation"] == 1
    assert _usage(app, rp) == 6


def test_a_delete_committed_then_failed_is_answered_done(app):
    app, db = app
    rp = _host(app, "rp")
    consumer = str(uuid.uuid4())
    assert _call(app, "/allocations/" + consumer, "PUT", _claim(rp)).status == 204
    _fail(db, db_api.AFTER_COMMIT, "deadlock", 1)
    deleted = _call(app, "/allocations/" + consumer, "DELETE")
    db.commit_fault = None
    assert deleted.status == 204, deleted.body
    assert _call(app, "/allocations/" + consumer).json()["allocations"] == {}
    assert _usage(app, rp) == 0


@pytest.mark.parametrize("kind, status", [("deadlock", 409), ("lost", 503)])
def test_a_claim_whose_commit_failed_wrote_nothing(app, kind, status):
    app, db = app
    rp = _host(app, "rp")
    consumer = str(uuid.uuid4())
    _fail(db, db_api.BEFORE_COMMIT, kind, 100)
    put = _call(app, "/allocations/" + consumer, "PUT", _claim(rp, 2))
    db.commit_fault = None
    assert put.status == status, put.body
    if status == 409:
        assert put.json()["errors"][0]["code"] == "placement.concurrent_update"
    got = _call(app, "/allocations/" + consumer).json()
    assert got["allocations"] == {}
    assert _usage(app, rp) == 0
    # And the same claim goes through once the COMMIT does.
    put = _call(app, "/allocations/" + consumer, "PUT", _claim(rp, 2))
    assert put.status == 204, put.body
    assert _usage(app, rp) == 2


# ------------------------------------------- every other write (issue 40)
#
# Each write below is made with its COMMIT failing: just after it was done
# (it must be answered as done: its usual status and body, which the
# state read back equals) and just before it is sent (it must be answered
# 409 for a deadlock on every try, 503 for a lost connection, with
# nothing written). One database per backend serves them all, each on
# its own providers and names.


@pytest.fixture(scope="module", params=fixtures.BACKENDS)
def shared(request):
    fixtures.require_backend(request.param)
    with fixtures.app(request.param) as (app, db):
        yield app, db


def _at(app, path, method="GET", body=None, version="latest"):
    return wsgi_client.call(
        app,
        path,
        method=method,
        body=body,
        x_auth_token="admin",
        x_roles="admin,service",
        openstack_api_version="placement %s" % version,
    )


def _ok(resp, status=200):
    assert resp.status == status, resp.body
    return resp.json() if resp.body else None


def _provider(app, parent=None):
    body = {"name": "rp-" + uuid.uuid4().hex}
    if parent is not None:
        body["parent_provider_uuid"] = parent
    return _ok(_at(app, "/resource_providers", "POST", body))["uuid"]


def _inventory(u):
    return "/resource_providers/%s/inventories" % u


def _custom(prefix):
    return "CUSTOM_%s_%s" % (prefix, uuid.uuid4().hex.upper())


class Write(typing.NamedTuple):
    setup: typing.Callable  # (app) -> ctx
    call: typing.Callable  # (ctx) -> (method, path, body, version)
    status: int  # answered when done
    looks: typing.Callable  # (ctx) -> [(path, version)] read before/after
    done: typing.Callable  # (app, ctx, resp body): asserts the state


def _same_as(path, version="latest", generation=None):
    """A ``done`` check: the answer's body is what GET ``path`` reads now
    (and has provider generation ``generation``)."""

    def done(app, ctx, body):
        got = _ok(_at(app, path.format(**ctx), version=version))
        assert body == got
        if generation is not None:
            assert got["resource_provider_generation"] == generation

    return done


def _gone(path, version="latest"):
    def done(app, ctx, body):
        assert _at(app, path.format(**ctx), version=version).status == 404

    return done


def _there(path, status=200, version="latest"):
    def done(app, ctx, body):
        assert _at(app, path.format(**ctx), version=version).status == status

    return done


def _host_ctx(app):
    return {"u": _host(app, "rp-" + uuid.uuid4().hex)}  # generation 1


def _with_traits(app):
    u = _provider(app)
    put = _at(
        app,
        "/resource_providers/%s/traits" % u,
        "PUT",
        {"resource_provider_generation": 0, "traits": ["HW_CPU_X86_AVX"]},
    )
    _ok(put)
    return {"u": u}


def _child_and_parent(app):
    return {"u": _provider(app), "p": _provider(app)}


def _new_provider(app):
    return {"u": str(uuid.uuid4()), "name": "rp-" + uuid.uuid4().hex}


def _new_child(app):
    return dict(_new_provider(app), p=_provider(app))


def _class(app):
    name = _custom("RC")
    _ok(_at(app, "/resource_classes", "POST", {"name": name}), 201)
    return {"name": name, "new": _custom("RC")}


def _trait(app):
    name = _custom("T")
    _ok(_at(app, "/traits/" + name, "PUT"), 201)
    return {"name": name}


def _consumer_on_host(app):
    ctx = _host_ctx(app)
    ctx["c"] = str(uuid.uuid4())
    _ok(_at(app, "/allocations/" + ctx["c"], "PUT", _claim(ctx["u"], 2)), 204)
    return ctx


def _reshaped_allocations(app, ctx, body):
    # Moved three times: the interim inventory, the allocations, the
    # final inventory.
    _expect_inventories(app, ctx, 5, {"VCPU": 16})
    got = _ok(_at(app, "/allocations/" + ctx["c"]))
    assert got["allocations"][ctx["u"]]["resources"] == {"VCPU": 4}
    assert got["consumer_generation"] == 2


WRITES = {
    "PUT inventories": Write(
        _host_ctx,
        lambda c: (
            "PUT",
            _inventory(c["u"]),
            {
                "resource_provider_generation": 1,
                "inventories": {"VCPU": {"total": 16}, "MEMORY_MB": {"total": 512}},
            },
            "latest",
        ),
        200,
        lambda c: [_inventory(c["u"])],
        _same_as(_inventory("{u}"), generation=2),
    ),
    "POST inventories": Write(
        _host_ctx,
        lambda c: (
            "POST",
            _inventory(c["u"]),
            {"resource_class": "MEMORY_MB", "total": 512, "allocation_ratio": 1.5},
            "latest",
        ),
        201,
        lambda c: [_inventory(c["u"])],
        _same_as(_inventory("{u}") + "/MEMORY_MB", generation=2),
    ),
    "PUT inventories/{rc}": Write(
        _host_ctx,
        lambda c: (
            "PUT",
            _inventory(c["u"]) + "/VCPU",
            {"resource_provider_generation": 1, "total": 16, "reserved": 2},
            "latest",
        ),
        200,
        lambda c: [_inventory(c["u"])],
        _same_as(_inventory("{u}") + "/VCPU", generation=2),
    ),
    "DELETE inventories/{rc}": Write(
        _host_ctx,
        lambda c: ("DELETE", _inventory(c["u"]) + "/VCPU", None, "latest"),
        204,
        lambda c: [_inventory(c["u"])],
        lambda app, c, body: _expect_inventories(app, c, 2, {}),
    ),
    "DELETE inventories": Write(
        _host_ctx,
        lambda c: ("DELETE", _inventory(c["u"]), None, "latest"),
        204,
        lambda c: [_inventory(c["u"])],
        lambda app, c, body: _expect_inventories(app, c, 2, {}),
    ),
    "PUT traits": Write(
        _with_traits,
        lambda c: (
            "PUT",
            "/resource_providers/%s/traits" % c["u"],
            {
                "resource_provider_generation": 1,
                "traits": ["HW_CPU_X86_SSE", "HW_CPU_X86_AVX2"],
            },
            "latest",
        ),
        200,
        lambda c: ["/resource_providers/%s/traits" % c["u"]],
        _same_as("/resource_providers/{u}/traits", generation=2),
    ),
    "DELETE traits": Write(
        _with_traits,
        lambda c: ("DELETE", "/resource_providers/%s/traits" % c["u"], None, "1.6"),
        204,
        lambda c: ["/resource_providers/%s/traits" % c["u"]],
        lambda app, c, body: _expect_traits(app, c, 2, []),
    ),
    "PUT aggregates": Write(
        lambda app: {"u": _provider(app), "a": str(uuid.uuid4())},
        lambda c: (
            "PUT",
            "/resource_providers/%s/aggregates" % c["u"],
            {"resource_provider_generation": 0, "aggregates": [c["a"]]},
            "latest",
        ),
        200,
        lambda c: ["/resource_providers/%s/aggregates" % c["u"]],
        _same_as("/resource_providers/{u}/aggregates", generation=1),
    ),
    "PUT aggregates 1.1": Write(
        lambda app: {"u": _provider(app), "a": str(uuid.uuid4())},
        lambda c: (
            "PUT",
            "/resource_providers/%s/aggregates" % c["u"],
            [c["a"]],
            "1.1",
        ),
        200,
        lambda c: ["/resource_providers/%s/aggregates" % c["u"]],
        _same_as("/resource_providers/{u}/aggregates", "1.1"),
    ),
    "POST resource_providers": Write(
        _new_provider,
        lambda c: (
            "POST",
            "/resource_providers",
            {"uuid": c["u"], "name": c["name"]},
            "latest",
        ),
        200,
        lambda c: ["/resource_providers/" + c["u"]],
        _same_as("/resource_providers/{u}"),
    ),
    "POST resource_providers (a child)": Write(
        _new_child,
        lambda c: (
            "POST",
            "/resource_providers",
            {"uuid": c["u"], "name": c["name"], "parent_provider_uuid": c["p"]},
            "latest",
        ),
        200,
        lambda c: ["/resource_providers/" + c["u"]],
        _same_as("/resource_providers/{u}"),
    ),
    "PUT resource_providers/{u} (rename)": Write(
        _child_and_parent,
        lambda c: (
            "PUT",
            "/resource_providers/" + c["u"],
            {"name": "renamed-" + c["u"]},
            "latest",
        ),
        200,
        lambda c: ["/resource_providers/" + c["u"]],
        _same_as("/resource_providers/{u}"),
    ),
    "PUT resource_providers/{u} (a parent)": Write(
        _child_and_parent,
        lambda c: (
            "PUT",
            "/resource_providers/" + c["u"],
            {"name": "moved-" + c["u"], "parent_provider_uuid": c["p"]},
            "latest",
        ),
        200,
        lambda c: ["/resource_providers/" + c["u"]],
        _same_as("/resource_providers/{u}"),
    ),
    "DELETE resource_providers/{u}": Write(
        _host_ctx,
        lambda c: ("DELETE", "/resource_providers/" + c["u"], None, "latest"),
        204,
        lambda c: ["/resource_providers/" + c["u"], _inventory(c["u"])],
        _gone("/resource_providers/{u}"),
    ),
    "POST resource_classes": Write(
        lambda app: {"name": _custom("RC")},
        lambda c: ("POST", "/resource_classes", {"name": c["name"]}, "latest"),
        201,
        lambda c: ["/resource_classes/" + c["name"]],
        _there("/resource_classes/{name}"),
    ),
    "PUT resource_classes/{name}": Write(
        lambda app: {"name": _custom("RC")},
        lambda c: ("PUT", "/resource_classes/" + c["name"], None, "latest"),
        201,
        lambda c: ["/resource_classes/" + c["name"]],
        _there("/resource_classes/{name}"),
    ),
    "PUT resource_classes/{name} (rename, 1.2)": Write(
        _class,
        lambda c: ("PUT", "/resource_classes/" + c["name"], {"name": c["new"]}, "1.2"),
        200,
        lambda c: ["/resource_classes/" + c["name"], "/resource_classes/" + c["new"]],
        _same_as("/resource_classes/{new}", "1.2"),
    ),
    "DELETE resource_classes/{name}": Write(
        _class,
        lambda c: ("DELETE", "/resource_classes/" + c["name"], None, "latest"),
        204,
        lambda c: ["/resource_classes/" + c["name"]],
        _gone("/resource_classes/{name}"),
    ),
    "PUT traits/{name}": Write(
        lambda app: {"name": _custom("T")},
        lambda c: ("PUT", "/traits/" + c["name"], None, "latest"),
        201,
        lambda c: ["/traits/" + c["name"]],
        _there("/traits/{name}", 204),
    ),
    "DELETE traits/{name}": Write(
        _trait,
        lambda c: ("DELETE", "/traits/" + c["name"], None, "latest"),
        204,
        lambda c: ["/traits/" + c["name"]],
        _gone("/traits/{name}"),
    ),
    "POST reshaper (no allocations)": Write(
        _host_ctx,
        lambda c: (
            "POST",
            "/reshaper",
            {
                "inventories": {
                    c["u"]: {
                        "resource_provider_generation": 1,
                        "inventories": {"VCPU": {"total": 16}},
                    }
                },
                "allocations": {},
            },
            "latest",
        ),
        204,
        lambda c: [_inventory(c["u"])],
        # Moved twice: the interim inventory, the final one.
        lambda app, c, body: _expect_inventories(app, c, 3, {"VCPU": 16}),
    ),
    "POST reshaper": Write(
        _consumer_on_host,
        lambda c: (
            "POST",
            "/reshaper",
            {
                "inventories": {
                    c["u"]: {
                        "resource_provider_generation": 2,
                        "inventories": {"VCPU": {"total": 16}},
                    }
                },
                "allocations": {c["c"]: _claim(c["u"], 4, generation=1)},
            },
            "latest",
        ),
        204,
        lambda c: [_inventory(c["u"]), "/allocations/" + c["c"]],
        _reshaped_allocations,
    ),
}


def _expect_inventories(app, ctx, generation, totals):
    got = _ok(_at(app, _inventory(ctx["u"])))
    assert got["resource_provider_generation"] == generation
    assert {rc: inv["total"] for rc, inv in got["inventories"].items()} == totals


def _expect_traits(app, ctx, generation, traits):
    got = _ok(_at(app, "/resource_providers/%s/traits" % ctx["u"]))
    assert got["resource_provider_generation"] == generation
    assert got["traits"] == traits


def _looks(app, write, ctx):
    """What the GETs of ``write.looks`` answer: (status, body) each (the
    body of a 200)."""
    seen = []
    for path in write.looks(ctx):
        resp = _at(app, path)
        seen.append((path, resp.status, resp.json() if resp.status == 200 else None))
    return seen


@pytest.mark.parametrize("kind", ["deadlock", "lost"])
@pytest.mark.parametrize("name", list(WRITES))
def test_a_write_committed_then_failed_is_answered_done(shared, name, kind):
    app, db = shared
    write = WRITES[name]
    ctx = write.setup(app)
    method, path, body, version = write.call(ctx)
    _fail(db, db_api.AFTER_COMMIT, kind, 1)
    try:
        resp = _at(app, path, method, body, version)
    finally:
        db.commit_fault = None
    assert resp.status == write.status, resp.body
    write.done(app, ctx, resp.json() if resp.body else None)


@pytest.mark.parametrize("kind, status", [("deadlock", 409), ("lost", 503)])
@pytest.mark.parametrize("name", list(WRITES))
def test_a_write_whose_commit_failed_wrote_nothing(shared, name, kind, status):
    app, db = shared
    write = WRITES[name]
    ctx = write.setup(app)
    method, path, body, version = write.call(ctx)
    before = _looks(app, write, ctx)
    _fail(db, db_api.BEFORE_COMMIT, kind, 100)
    try:
        resp = _at(app, path, method, body, version)
    finally:
        db.commit_fault = None
    assert resp.status == status, resp.body
    if status == 409 and version == "latest":
        assert resp.json()["errors"][0]["code"] == "placement.concurrent_update"
    assert _looks(app, write, ctx) == before


@pytest.mark.parametrize("kind", ["deadlock", "lost"])
def test_the_same_traits_set_meanwhile_by_another_are_answered_done(shared, kind):
    """A write not done whose exact content another client wrote from the
    same generation meanwhile: the database holds what it would have left,
    at the generation it would have answered, and it is answered as done
    (doc/architecture.md, "A failed COMMIT")."""
    app, db = shared
    ctx = _with_traits(app)
    path = "/resource_providers/%s/traits" % ctx["u"]
    body = {"resource_provider_generation": 1, "traits": ["HW_CPU_X86_SSE"]}
    other = []

    def fault(conn, at):
        if at != db_api.BEFORE_COMMIT or other:
            return
        other.append(None)  # its own COMMIT goes through
        conn.rollback()  # nothing of this write is written
        other[0] = _at(app, path, "PUT", body)  # the other client's
        raise _error(db, kind)

    db.commit_fault = fault
    try:
        resp = _at(app, path, "PUT", body)
    finally:
        db.commit_fault = None
    assert _ok(other[0]) == _ok(resp)
    assert _ok(resp)["resource_provider_generation"] == 2
    assert _ok(_at(app, path)) == _ok(resp)


# Writes, and what shows they were done although answered 503.
UNKNOWN = {
    "PUT inventories": lambda app, ctx, body: _expect_inventories(
        app, ctx, 2, {"VCPU": 16, "MEMORY_MB": 512}
    ),
    "DELETE resource_providers/{u}": _gone("/resource_providers/{u}"),
}


@pytest.mark.parametrize("name", list(UNKNOWN))
def test_a_commit_lost_with_the_database_is_an_unknown_outcome(shared, name):
    """The COMMIT went through, its answer was lost, and the database is
    then out of reach (connections refused) for every read-back try: the
    answer is a 503 saying the outcome is unknown, not one that says
    nothing was written."""
    app, db = shared
    write = WRITES[name]
    ctx = write.setup(app)
    method, path, body, version = write.call(ctx)
    reachable = db.engine
    unreachable = sa.create_engine(
        "sqlite:////nonexistent-dir/placement.db"
        if db.dialect == "sqlite"
        else reachable.url.set(host="127.0.0.1", port=ports.free_port())
    )

    def fault(conn, at):
        if at == db_api.AFTER_COMMIT:
            db.commit_fault = None
            db.engine = unreachable
            raise _error(db, "lost")

    db.commit_fault = fault
    try:
        resp = _at(app, path, method, body, version)
    finally:
        db.commit_fault = None
        db.engine = reachable
        unreachable.dispose()
    assert resp.status == 503, resp.body
    assert resp.headers["retry-after"]
    detail = resp.json()["errors"][0]["detail"]
    assert "whether it was done could not be found out" in detail, detail
    # It was done: the database, back, holds what the write leaves.
    UNKNOWN[name](app, ctx, None)

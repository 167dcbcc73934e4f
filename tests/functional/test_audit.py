"""The data audit (doc/audit.md): each defect built with SQL behind the
service, on SQLite, MySQL and PostgreSQL, is named by ``placement-manage
audit`` (exit status, text and --json) and by GET /maintenance/audit;
a clean database passes with exit 0, information alone included."""

import json
import random
import re
import uuid

import pytest
import sqlalchemy as sa

from placement.db import tables
from placement.objects import audit as audit_obj
from tests import fixtures
from tests import helpers
from tests import ports
from tests import wsgi_client
from tests.functional import live_server
from tests.functional import test_reference

ADMIN = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
PROJECT = "p-audit"
USER = "u-audit"


def _call(app, path, method="GET", body=None, headers=ADMIN):
    return wsgi_client.call(app, path, method=method, body=body, headers=headers)


def _ok(app, path, method="GET", body=None):
    resp = _call(app, path, method, body)
    assert resp.status in (200, 201, 204), (path, resp.body)
    return resp.json() if resp.body else None


def _provider(app, name, inventories=None, parent=None):
    body = {"name": name}
    if parent:
        body["parent_provider_uuid"] = parent
    rp = _ok(app, "/resource_providers", "POST", body)["uuid"]
    if inventories:
        _ok(
            app,
            "/resource_providers/%s/inventories" % rp,
            "PUT",
            {"resource_provider_generation": 0, "inventories": inventories},
        )
    return rp


def _claim(app, allocations):
    consumer = str(uuid.uuid4())
    _ok(
        app,
        "/allocations/" + consumer,
        "PUT",
        {
            "allocations": {
                rp: {"resources": resources} for rp, resources in allocations.items()
            },
            "project_id": PROJECT,
            "user_id": USER,
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
    )
    return consumer


def _command(db, *args):
    """``placement-manage audit`` on the test's database: (exit, output)."""
    url = db.engine.url.render_as_string(hide_password=False)
    result = helpers.run(
        [helpers.script("placement-manage"), "audit", *args],
        {"OS_PLACEMENT_DATABASE__CONNECTION": url},
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout


def _by_kind(found):
    return {check["kind"]: check for check in found["checks"]}


def _api(app, query=""):
    resp = _call(app, "/maintenance/audit" + query)
    assert resp.status == 200, resp.body
    return resp.json()


@pytest.mark.parametrize("backend", fixtures.BACKENDS)
def test_each_defect_is_named(backend):
    fixtures.require_backend(backend)
    with fixtures.app(backend) as (app, db):
        host = {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}}
        hosts = {
            name: _provider(app, name, host)
            for name in ("over", "units", "noinv", "healthy")
        }
        hosts["disk"] = _provider(app, "disk", {"DISK_GB": {"total": 100}})
        child = _provider(app, "child", {"VCPU": {"total": 2}}, hosts["healthy"])
        loop_a = _provider(app, "loop-a")
        loop_b = _provider(app, "loop-b")
        over_1 = _claim(app, {hosts["over"]: {"VCPU": 4}})
        over_2 = _claim(app, {hosts["over"]: {"VCPU": 2, "MEMORY_MB": 512}})
        units = _claim(app, {hosts["units"]: {"VCPU": 3, "MEMORY_MB": 1000}})
        noinv = _claim(app, {hosts["noinv"]: {"VCPU": 1, "MEMORY_MB": 256}})
        _claim(app, {hosts["disk"]: {"DISK_GB": 10}})
        _claim(app, {hosts["healthy"]: {"VCPU": 8}, child: {"VCPU": 2}})
        _ok(app, "/resource_classes", "POST", {"name": "CUSTOM_UNUSED"})
        _ok(app, "/traits/CUSTOM_UNUSED_TRAIT", "PUT")

        # Nothing wrong yet: only information (exit 0).
        found = _api(app)
        assert found["problems"] == 0, found
        checks = _by_kind(found)
        assert checks["unused_resource_classes"]["items"] == [{"name": "CUSTOM_UNUSED"}]
        assert checks["unused_traits"]["items"] == [{"name": "CUSTOM_UNUSED_TRAIT"}]
        status, text = _command(db)
        assert status == 0, text
        assert "Nothing is wrong." in text

        empty = str(uuid.uuid4())
        dangling = str(uuid.uuid4())
        ownerless = str(uuid.uuid4())
        userless = str(uuid.uuid4())
        with db.engine.begin() as conn:
            ids = dict(
                conn.execute(sa.text("SELECT uuid, id FROM resource_providers")).all()
            )
            classes = dict(
                conn.execute(sa.text("SELECT name, id FROM resource_classes")).all()
            )
            project, user = conn.execute(
                sa.text("SELECT project_id, user_id FROM consumers")
            ).first()

            def inventory(rp, rc, **values):
                sets = ", ".join("%s = :%s" % (k, k) for k in values)
                conn.execute(
                    sa.text(
                        "UPDATE inventories SET %s WHERE resource_provider_id = :rp"
                        " AND resource_class_id = :rc" % sets
                    ),
                    dict(values, rp=ids[rp], rc=classes[rc]),
                )

            # 6 VCPU used of 4.
            inventory(hosts["over"], "VCPU", total=4)
            # 3 VCPU above max_unit 2; 1000 MEMORY_MB not a multiple of 512.
            inventory(hosts["units"], "VCPU", max_unit=2)
            inventory(hosts["units"], "MEMORY_MB", step_size=512)
            conn.execute(
                sa.text(
                    "DELETE FROM inventories WHERE resource_provider_id = :rp"
                    " AND resource_class_id = :rc"
                ),
                {"rp": ids[hosts["noinv"]], "rc": classes["MEMORY_MB"]},
            )
            conn.execute(
                sa.text(
                    "INSERT INTO consumers (uuid, project_id, user_id, generation)"
                    " VALUES (:uuid, :project, :user, 0)"
                ),
                [
                    {"uuid": empty, "project": project, "user": user},
                    {"uuid": ownerless, "project": 999999, "user": user},
                    {"uuid": userless, "project": project, "user": 999998},
                ],
            )
            conn.execute(
                sa.text(
                    "INSERT INTO allocations (resource_provider_id, consumer_id,"
                    " resource_class_id, used) VALUES (:rp, :consumer, :rc, 1)"
                ),
                [
                    {"rp": ids[hosts["disk"]], "consumer": c, "rc": classes["DISK_GB"]}
                    for c in (dangling, ownerless, userless)
                ],
            )
            conn.execute(
                sa.text(
                    "UPDATE resource_providers SET root_provider_id = id WHERE id = :id"
                ),
                {"id": ids[child]},
            )
            for a, b in ((loop_a, loop_b), (loop_b, loop_a)):
                conn.execute(
                    sa.text(
                        "UPDATE resource_providers SET parent_provider_id = :parent"
                        " WHERE id = :id"
                    ),
                    {"id": ids[a], "parent": ids[b]},
                )
            # VGPU no longer at its reference id.
            conn.execute(
                sa.text("UPDATE resource_classes SET id = 100000 WHERE name = 'VGPU'")
            )

        expected = {
            "over_capacity": [
                {
                    "resource_provider": hosts["over"],
                    "name": "over",
                    "root_provider": hosts["over"],
                    "resource_class": "VCPU",
                    "capacity": 4,
                    "used": 6,
                    "consumers": sorted(
                        [
                            {"consumer": over_1, "used": 4},
                            {"consumer": over_2, "used": 2},
                        ],
                        key=lambda c: c["consumer"],
                    ),
                }
            ],
            "unit_limits": sorted(
                [
                    {
                        "resource_provider": hosts["units"],
                        "name": "units",
                        "resource_class": "MEMORY_MB",
                        "min_unit": 1,
                        "max_unit": 2147483647,
                        "step_size": 512,
                        "consumers": [
                            {"consumer": units, "used": 1000, "violates": ["step_size"]}
                        ],
                    },
                    {
                        "resource_provider": hosts["units"],
                        "name": "units",
                        "resource_class": "VCPU",
                        "min_unit": 1,
                        "max_unit": 2,
                        "step_size": 1,
                        "consumers": [
                            {"consumer": units, "used": 3, "violates": ["max_unit"]}
                        ],
                    },
                ],
                key=lambda i: i["resource_class"],
            ),
            "no_inventory": [
                {
                    "resource_provider": hosts["noinv"],
                    "name": "noinv",
                    "resource_provider_id": ids[hosts["noinv"]],
                    "resource_class": "MEMORY_MB",
                    "used": 256,
                    "consumers": [{"consumer": noinv, "used": 256}],
                }
            ],
            "empty_consumers": [{"consumer": empty, "project": PROJECT, "user": USER}],
            "missing_consumers": [{"consumer": dangling, "allocations": 1}],
            "missing_owners": sorted(
                [
                    {
                        "consumer": ownerless,
                        "project_id": 999999,
                        "user_id": user,
                        "missing": ["project"],
                    },
                    {
                        "consumer": userless,
                        "project_id": project,
                        "user_id": 999998,
                        "missing": ["user"],
                    },
                ],
                key=lambda i: i["consumer"],
            ),
            "wrong_roots": [
                {
                    "resource_provider": child,
                    "name": "child",
                    "id": ids[child],
                    "root_provider": child,
                    "root_provider_id": ids[child],
                    "expected_root_provider": hosts["healthy"],
                    "expected_root_provider_id": ids[hosts["healthy"]],
                }
            ],
            "parent_loops": sorted(
                [
                    {
                        "resource_provider": a,
                        "name": name,
                        "id": ids[a],
                        "parent_provider": b,
                    }
                    for a, b, name in (
                        (loop_a, loop_b, "loop-a"),
                        (loop_b, loop_a, "loop-b"),
                    )
                ],
                key=lambda i: i["resource_provider"],
            ),
            "unused_resource_classes": [{"name": "CUSTOM_UNUSED"}],
            "unused_traits": [{"name": "CUSTOM_UNUSED_TRAIT"}],
        }
        vgpu = os_resource_classes_index("VGPU")
        for found in (_api(app), json.loads(_command(db, "--json")[1])):
            checks = _by_kind(found)
            for kind, items in expected.items():
                assert checks[kind]["items"] == items, kind
                assert checks[kind]["count"] == len(items), kind
            assert checks["standard_class_ids"]["items"] == [
                {"problem": "VGPU has id 100000, not %d" % vgpu}
            ]
            errors = sum(
                len(items)
                for kind, items in expected.items()
                if checks[kind]["severity"] == "error"
            )
            assert found["problems"] == errors + 1

        status, text = _command(db)
        assert status == 1, text
        assert "%d problems found." % (errors + 1) in text
        # Each kind's section says what to do about it when it found rows,
        # and nothing when it found none.
        fixes = {check.kind: check.fix for check in audit_obj.CHECKS}
        sections = _sections(text)
        assert list(sections) == list(audit_obj.KINDS)
        found_kinds = set(expected) | {"standard_class_ids"}
        for kind, lines in sections.items():
            if kind in found_kinds:
                assert lines[-1] == "  What to do: " + fixes[kind], (kind, lines)
                assert lines[0].startswith("%s (" % kind), lines
            else:
                assert lines == [lines[0]] and ": 0." in lines[0], (kind, lines)
        assert hosts["over"] in text and over_1 in text
        assert userless in "\n".join(sections["missing_owners"])

        status, text = _command(db, "--kind", "unused_traits", "--json")
        assert status == 0, text
        assert [c["kind"] for c in json.loads(text)["checks"]] == ["unused_traits"]
        over = _api(app, "?kind=over_capacity")
        assert [c["kind"] for c in over["checks"]] == ["over_capacity"]
        assert over["problems"] == 1


def _sections(text):
    """{kind: its lines} of the command's text: a section starts with
    ``kind (severity): count. Title.`` and runs to the next one (the
    closing line, the problems' count, is left out)."""
    sections: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in text.splitlines():
        header = re.match(r"^([a-z_]+) \((error|info)\): \d+\. ", line)
        if header:
            lines = sections.setdefault(header.group(1), [])
        elif not line.startswith("  "):
            lines = []
            continue
        lines.append(line)
    return sections


def os_resource_classes_index(name):
    import os_resource_classes

    return os_resource_classes.STANDARDS.index(name)


def over_capacity_hosts(engine, count, prefix="oc"):
    """``count`` hosts over capacity (VCPU 2 used of 1), written with SQL
    in a few statements: names ``<prefix>00000``... and uuids that sort as
    the names do (``0000000N-...``), so the hosts past the audit's first
    ``ITEMS`` items are the last by name too. Their uuids, in order."""
    uuids = ["%08x-0000-4000-8000-%012x" % (i, i) for i in range(count)]
    t = tables
    with engine.begin() as conn:
        vcpu = conn.scalar(
            sa.select(t.resource_classes.c.id).where(
                t.resource_classes.c.name == "VCPU"
            )
        )
        project = conn.execute(
            t.projects.insert().values(external_id="p-" + prefix)
        ).inserted_primary_key[0]
        user = conn.execute(
            t.users.insert().values(external_id="u-" + prefix)
        ).inserted_primary_key[0]
        conn.execute(
            t.resource_providers.insert(),
            [
                {"uuid": u, "name": "%s%05d" % (prefix, i), "generation": 1}
                for i, u in enumerate(uuids)
            ],
        )
        conn.execute(
            t.resource_providers.update()
            .where(t.resource_providers.c.root_provider_id.is_(None))
            .values(root_provider_id=t.resource_providers.c.id)
        )
        ids = dict(
            conn.execute(
                sa.select(t.resource_providers.c.uuid, t.resource_providers.c.id)
            ).all()
        )
        conn.execute(
            t.inventories.insert(),
            [
                {
                    "resource_provider_id": ids[u],
                    "resource_class_id": vcpu,
                    "total": 1,
                    "reserved": 0,
                    "min_unit": 1,
                    "max_unit": 2,
                    "step_size": 1,
                    "allocation_ratio": 1.0,
                }
                for u in uuids
            ],
        )
        consumers = [str(uuid.uuid4()) for _ in uuids]
        conn.execute(
            t.consumers.insert(),
            [
                {"uuid": c, "project_id": project, "user_id": user, "generation": 1}
                for c in consumers
            ],
        )
        conn.execute(
            t.allocations.insert(),
            [
                {
                    "resource_provider_id": ids[u],
                    "consumer_id": c,
                    "resource_class_id": vcpu,
                    "used": 2,
                }
                for u, c in zip(uuids, consumers)
            ],
        )
    return uuids


@pytest.mark.parametrize("backend", fixtures.BACKENDS)
def test_in_tree_flags_every_root_past_the_item_cap(backend):
    """More roots over capacity than the audit lists items (ITEMS): asked
    page by page with in_tree, as the console's cloud view asks, every one
    is named, with its consumers; without it only the first ITEMS are."""
    fixtures.require_backend(backend)
    with fixtures.app(backend) as (app, db):
        healthy = _provider(app, "healthy", {"VCPU": {"total": 8}})
        child = _provider(app, "healthy-numa", {"VGPU": {"total": 1}}, healthy)
        _claim(app, {healthy: {"VCPU": 1}, child: {"VGPU": 1}})
        over = over_capacity_hosts(db.engine, audit_obj.ITEMS + 50)
        # The child over capacity: flagged on its root, asked by either.
        with db.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE inventories SET total = 0 WHERE resource_provider_id ="
                    " (SELECT id FROM resource_providers WHERE uuid = :uuid)"
                ),
                {"uuid": child},
            )
        everything = _api(app, "?kind=over_capacity")["checks"][0]
        assert everything["count"] == len(over) + 1
        assert len(everything["items"]) == audit_obj.ITEMS
        listed = {i["root_provider"] for i in everything["items"]}
        assert over[-1] not in listed  # what the console used to miss

        roots = [healthy] + over
        flagged = set()
        for start in range(0, len(roots), 50):
            page = roots[start : start + 50]
            found = _api(app, "?kind=over_capacity&in_tree=" + ",".join(page))
            (check,) = found["checks"]
            assert check["count"] == len(check["items"]) == found["problems"]
            for item in check["items"]:
                assert item["root_provider"] in page
                assert item["used"] == 2 or item["resource_provider"] == child
                assert len(item["consumers"]) == 1
            flagged |= {i["root_provider"] for i in check["items"]}
        assert flagged == set(roots)
        # The child's uuid names its tree.
        (item,) = _api(
            app, "?kind=over_capacity,unit_limits,no_inventory&in_tree=" + child
        )["checks"][0]["items"]
        assert (item["resource_provider"], item["root_provider"]) == (child, healthy)
        # A uuid that names no provider, or not as written (as a provider
        # list's in_tree matches): nothing.
        for unknown in (str(uuid.uuid4()), child.upper()):
            nothing = _api(app, "?kind=over_capacity&in_tree=" + unknown)
            assert nothing["problems"] == 0
        for query in (
            "?in_tree=" + healthy,  # every kind
            "?kind=over_capacity,empty_consumers&in_tree=" + healthy,
            "?kind=over_capacity&in_tree=" + ",".join(over[: audit_obj.IN_TREE + 1]),
            "?kind=over_capacity&in_tree=cn1",
            "?kind=over_capacity&in_tree=" + child.replace("-", ""),
        ):
            resp = _call(app, "/maintenance/audit" + query)
            assert resp.status == 400, (query, resp.body)


def test_command_in_tree():
    """``placement-manage audit --in-tree``: the per-provider checks (the
    default kinds with it) for those trees only, past the item cap too;
    exit 2, nothing run, for a kind it does not apply to, a malformed uuid
    or one naming no provider."""
    with fixtures.app("sqlite") as (app, db):
        healthy = _provider(app, "healthy", {"VCPU": {"total": 8}})
        over = over_capacity_hosts(db.engine, audit_obj.ITEMS + 5)
        code, out = _command(db, "--in-tree", over[-1], "--in-tree", over[0], "--json")
        assert code == 1
        found = json.loads(out)
        assert [c["kind"] for c in found["checks"]] == list(audit_obj.TREE_KINDS)
        check = _by_kind(found)["over_capacity"]
        assert {i["root_provider"] for i in check["items"]} == {over[0], over[-1]}
        assert found["problems"] == 2
        code, out = _command(db, "--in-tree", healthy)
        assert code == 0
        assert out.splitlines()[-1] == "Nothing is wrong."
        code, out = _command(db, "--in-tree", over[-1], "--kind", "over_capacity")
        assert code == 1
        assert "oc%05d" % (len(over) - 1) in out
        missing = str(uuid.uuid4())
        for args, said in (
            (["--in-tree", healthy, "--kind", "empty_consumers"], "empty_consumers"),
            (["--in-tree", "cn1"], "'cn1' is not a provider uuid"),
            (["--in-tree", missing], "no resource provider %s." % missing),
        ):
            url = db.engine.url.render_as_string(hide_password=False)
            result = helpers.run(
                [helpers.script("placement-manage"), "audit", *args],
                {"OS_PLACEMENT_DATABASE__CONNECTION": url},
            )
            assert result.returncode == 2, (args, result.stdout, result.stderr)
            assert said in result.stderr, result.stderr
            assert result.stdout == ""


def test_admin_only_and_bad_kind():
    with fixtures.app("sqlite") as (app, _db):
        resp = _call(
            app,
            "/maintenance/audit",
            headers={"x-auth-token": "user:project", "x-roles": "service"},
        )
        assert resp.status == 403, resp.body
        resp = _call(app, "/maintenance/audit?kind=over_capacity,nothing")
        assert resp.status == 400, resp.body
        assert "unknown kind nothing" in resp.json()["errors"][0]["detail"]
        resp = _call(app, "/maintenance/audit?limit=3")
        assert resp.status == 400, resp.body


# The reference's claims at once on few hosts: the shared bench's claims
# scenario's method (each claim asks for candidates with limit=5, picks one
# at random and writes it; a 409 asks again), not its sizes (see the test's
# docstring).
REF_HOSTS = 12
REF_VCPU = 4
REF_CLAIMS = 144
REF_THREADS = 16
REF_ROUNDS = 3


def _reference_claims(api):
    def claim(i):
        consumer = str(uuid.uuid4())
        for _ in range(3):
            found = api.call(
                "GET", "/allocation_candidates?resources=VCPU:1&limit=5"
            ).json()["allocation_requests"]
            if not found:
                return
            body = {
                "allocations": random.choice(found)["allocations"],
                "consumer_generation": None,
                "project_id": PROJECT,
                "user_id": USER,
                "consumer_type": "BENCH",
            }
            resp = api.call("PUT", "/allocations/" + consumer, body, expect=None)
            if resp.status_code != 409:
                assert resp.status_code == 204, resp.text
                return

    per_thread = REF_CLAIMS // REF_THREADS
    helpers.run_together(
        lambda t: [claim(t * per_thread + i) for i in range(per_thread)],
        REF_THREADS,
    )


@pytest.mark.slow
def test_names_what_the_reference_over_allocated(tmp_path):
    """The reference's claims run at once on MariaDB put some hosts over
    capacity; the audit names exactly those.

    The shared bench's method: the reference served by two gunicorn
    workers of 10 threads, each claim asking for candidates (limit=5),
    picking one at random and writing it, a 409 asking again. Not its
    sizes: the bench makes 1,000 claims of 8 VCPU by 8 clients on 100
    hosts of 64 VCPU (up to 5 retries); this test 144 claims of 1 VCPU by
    16 threads on 12 hosts of 4 VCPU (up to 3 tries), a round repeated
    at most 3 times on new hosts until some host is over capacity, so
    that it takes seconds."""
    fixtures.require_backend("mysql")
    with fixtures.database_url("mysql") as url:
        env = helpers.clean_env(
            OS_PLACEMENT_DATABASE__CONNECTION=url, OS_API__AUTH_STRATEGY="noauth2"
        )
        reference_env = dict(env, PYTHONPATH="")
        synced = helpers.run(
            [test_reference._reference("placement-manage"), "db", "sync"],
            reference_env,
        )
        assert synced.returncode == 0, synced.stderr
        port = ports.free_port()
        command = [
            test_reference._reference("gunicorn"),
            "-b",
            "127.0.0.1:%d" % port,
            "-w",
            "2",
            "--threads",
            "10",
            "placement.wsgi.api:application",
        ]
        with live_server.running(
            command,
            reference_env,
            str(tmp_path / "reference.log"),
            "http://127.0.0.1:%d/" % port,
            cwd=str(tmp_path),
        ):
            api = test_reference.Api("http://127.0.0.1:%d" % port)
            engine = sa.create_engine(url)
            try:
                for round_ in range(REF_ROUNDS):
                    for i in range(REF_HOSTS):
                        rp = api.call(
                            "POST",
                            "/resource_providers",
                            {"name": "ref-%d-%d" % (round_, i)},
                        ).json()["uuid"]
                        api.call(
                            "PUT",
                            "/resource_providers/%s/inventories" % rp,
                            {
                                "resource_provider_generation": 0,
                                "inventories": {"VCPU": {"total": REF_VCPU}},
                            },
                        )
                    _reference_claims(api)
                    expected = helpers.over_capacity_from_rows(engine)
                    if expected:
                        break
            finally:
                engine.dispose()
        synced = helpers.run([helpers.script("placement-manage"), "db", "sync"], env)
        assert synced.returncode == 0, synced.stderr
        result = helpers.run(
            [helpers.script("placement-manage"), "audit", "--json"], env
        )
    print("the reference put %d hosts over capacity" % len(expected))
    assert expected, "the reference over-allocated nothing in %d rounds" % REF_ROUNDS
    found = _by_kind(json.loads(result.stdout))
    assert {
        item["resource_provider"] for item in found["over_capacity"]["items"]
    } == expected
    assert result.returncode == 1
    for item in found["over_capacity"]["items"]:
        assert item["used"] > item["capacity"] == REF_VCPU
        assert sum(c["used"] for c in item["consumers"]) == item["used"]
    others = {k: c["count"] for k, c in found.items() if k != "over_capacity"}
    assert others == dict.fromkeys(others, 0), others

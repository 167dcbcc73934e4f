"""Names, ids and amounts the databases disagree about (doc/api.md "Names
and ids"), the same answer on SQLite, MySQL and PostgreSQL:

* a provider name is stored and matched byte for byte, and one that
  differs from a taken name only by trailing spaces is taken (409 on
  create and rename: upstream's MySQL unique key counts them as one);
* a project or user id ending with a space is a 400; ids are matched
  byte for byte (``/usages``);
* an amount of 2**63, 2**64 or more is a valid amount nothing can hold:
  200 on the three candidate routes alike, with every suffix.
"""

import concurrent.futures
import json
import threading
import urllib.parse
import uuid

import pytest

from placement import deploy
from placement.db import api as db_api
from placement.db import schema
from placement.objects import standard_names
from tests import fixtures
from tests import wsgi_client

HEADERS = {
    "x-auth-token": "admin",
    "accept": "application/json",
    "content-type": "application/json",
    "openstack-api-version": "placement 1.39",
}


class Client:
    def __init__(self, app):
        self.app = app

    def __call__(self, method, path, body=None, query=""):
        raw = b"" if body is None else json.dumps(body).encode()
        r = wsgi_client.call(self.app, path, method, raw, query=query, headers=HEADERS)
        return r.status, json.loads(r.body) if r.body else None


@pytest.fixture(scope="module", params=fixtures.BACKENDS)
def client(request):
    fixtures.require_backend(request.param)
    with fixtures.app(request.param) as (app, _db):
        yield Client(app)


def _provider(client, name, **more):
    status, body = client("POST", "/resource_providers", dict(name=name, **more))
    assert status == 200, body
    return body["uuid"]


def _names(client, name):
    status, body = client("GET", "/resource_providers", query="name=" + name)
    assert status == 200, body
    return [rp["name"] for rp in body["resource_providers"]]


def _error(status, body, expected, code):
    assert status == expected, body
    assert body["errors"][0]["code"] == code, body


@pytest.mark.parametrize("taken,sent", [("padtest", "padtest "), ("pad2  ", "pad2")])
def test_a_name_that_differs_by_trailing_spaces_is_taken(client, taken, sent):
    _provider(client, taken)
    status, body = client("POST", "/resource_providers", {"name": sent})
    _error(status, body, 409, "placement.duplicate_name")
    other = _provider(client, "other-" + taken.strip())
    status, body = client("PUT", "/resource_providers/" + other, {"name": sent})
    _error(status, body, 409, "placement.duplicate_name")
    # Nothing was written by either.
    assert _names(client, urllib.parse.quote(sent)) == []
    assert _names(client, urllib.parse.quote(taken)) == [taken]


def test_names_are_stored_and_matched_exactly(client):
    _provider(client, "lonely  ")
    _provider(client, "  lead")
    _provider(client, "lead")  # leading spaces count everywhere
    assert _names(client, "lonely%20%20") == ["lonely  "]
    assert _names(client, "lonely") == []
    assert _names(client, "lonely%20") == []
    assert _names(client, "lead") == ["lead"]
    assert _names(client, "%20%20lead") == ["  lead"]
    # Renaming a provider to its own name with other padding is no clash.
    rp = _provider(client, "self")
    status, body = client("PUT", "/resource_providers/" + rp, {"name": "self "})
    assert status == 200 and body["name"] == "self ", body


def _allocate(client, project, user="u"):
    rp = _provider(client, "host-%s" % uuid.uuid4())
    status, body = client(
        "PUT",
        "/resource_providers/%s/inventories" % rp,
        {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}},
    )
    assert status == 200, body
    consumer = str(uuid.uuid4())
    return consumer, client(
        "PUT",
        "/allocations/" + consumer,
        {
            "allocations": {rp: {"resources": {"VCPU": 1}}},
            "project_id": project,
            "user_id": user,
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
    )


@pytest.mark.parametrize(
    "project,user", [("padproj ", "u"), ("p", "paduser "), (" ", "u")]
)
def test_an_id_ending_with_a_space_is_refused(client, project, user):
    consumer, (status, body) = _allocate(client, project, user)
    _error(status, body, 400, "placement.undefined_code")
    assert client("GET", "/allocations/" + consumer)[1]["allocations"] == {}
    status, body = client(
        "POST",
        "/allocations",
        {
            consumer: {
                "allocations": {},
                "project_id": project,
                "user_id": user,
                "consumer_generation": None,
                "consumer_type": "INSTANCE",
            }
        },
    )
    _error(status, body, 400, "placement.undefined_code")


def test_ids_are_matched_exactly(client):
    _, (status, body) = _allocate(client, "exactproj", "exactuser")
    assert status == 204, body
    _, (status, body) = _allocate(client, "  exactproj", "exactuser")
    assert status == 204, body

    def usages(query):
        status, body = client("GET", "/usages", query=query)
        assert status == 200, body
        return body["usages"].get("INSTANCE", {}).get("VCPU", 0)

    assert usages("project_id=exactproj") == 1
    assert usages("project_id=%20%20exactproj") == 1
    assert usages("project_id=exactproj%20") == 0
    assert usages("project_id=exactproj&user_id=exactuser%20") == 0
    assert usages("project_id=exactproj&user_id=exactuser") == 1


HUGE = [2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**23]
SUFFIXES = ["", "1", "_X"]


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_huge_amounts_find_nothing_on_every_candidate_route(client, suffix):
    rp = _provider(client, "big-%s" % uuid.uuid4())
    status, body = client(
        "PUT",
        "/resource_providers/%s/inventories" % rp,
        {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}},
    )
    assert status == 200, body
    for amount in HUGE:
        query = "resources%s=VCPU:%d" % (suffix, amount)
        status, body = client("GET", "/allocation_candidates", query=query)
        assert status == 200 and body["allocation_requests"] == [], (query, body)
        status, body = client("GET", "/allocation_candidates/explain", query=query)
        assert status == 200, (query, body)
        assert str(amount) in json.dumps(body), (query, body)
        status, body = client("GET", "/allocation_candidates/capacity", query=query)
        assert status == 200, (query, body)


@pytest.fixture
def case_insensitive_app():
    """MySQL with the provider names in a case-insensitive collation, as a
    database whose tables another tool created may have them."""
    fixtures.require_backend("mysql")
    with fixtures.database_url("mysql") as url:
        conf = fixtures.configure()
        engine = db_api.create_engine(url, conf)
        try:
            schema.upgrade(engine)
            with engine.begin() as conn:
                conn.exec_driver_sql(
                    "ALTER TABLE resource_providers MODIFY name VARCHAR(200)"
                    " CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"
                )
            db = db_api.Database(engine, conf)
            standard_names.sync_standard_names(db)
            yield deploy.build_app(conf, db=db, sync_schema=False)
        finally:
            engine.dispose()


def test_a_name_the_collation_takes_for_another_is_taken(case_insensitive_app):
    client = Client(case_insensitive_app)
    _provider(client, "CaseTest")
    for sent in ("casetest", "CASETEST ", "CaseTest"):
        status, body = client("POST", "/resource_providers", {"name": sent})
        _error(status, body, 409, "placement.duplicate_name")
    assert _names(client, "CaseTest") == ["CaseTest"]
    assert _names(client, "casetest") == []


@pytest.mark.parametrize(
    "method,path,body",
    [
        ("POST", "/resource_classes", {"name": "CUSTOM_NEWLINE\n"}),
        ("PUT", "/traits/CUSTOM_NEWLINE%0A", None),
        (
            "POST",
            "/allocations",
            {
                str(uuid.uuid4()): {
                    "allocations": {},
                    "project_id": "p",
                    "user_id": "u",
                    "consumer_generation": None,
                    "consumer_type": "INSTANCE\n",
                }
            },
        ),
    ],
)
def test_a_name_with_a_final_newline_is_refused(client, method, path, body):
    # Python's "$" matches before a final newline: the schemas' patterns
    # (^[A-Z0-9_]+$ and the like) must not let "NAME\n" through.
    status, answer = client(method, path, body)
    assert status == 400, answer
    status, answer = client("GET", "/resource_classes/CUSTOM_NEWLINE")
    assert status == 404, answer


def _seed_padded_world(client, tag):
    """A provider with inventory, a trait and an aggregate, a consumer
    allocating from it, a custom class and a custom trait: the objects
    item "path values" twins name."""
    rp = _provider(client, "padpath-%s" % tag)
    rc, trait = "CUSTOM_PADRC_%s" % tag.upper(), "CUSTOM_PADTR_%s" % tag.upper()
    for path in ("/resource_classes/" + rc, "/traits/" + trait):
        status, body = client("PUT", path)
        assert status == 201, body
    status, body = client(
        "PUT",
        "/resource_providers/%s/inventories" % rp,
        {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}},
    )
    assert status == 200, body
    status, body = client(
        "PUT",
        "/resource_providers/%s/traits" % rp,
        {"resource_provider_generation": 1, "traits": [trait]},
    )
    assert status == 200, body
    status, body = client(
        "PUT",
        "/resource_providers/%s/aggregates" % rp,
        {"resource_provider_generation": 2, "aggregates": [str(uuid.uuid4())]},
    )
    assert status == 200, body
    consumer = str(uuid.uuid4())
    status, body = client(
        "PUT",
        "/allocations/" + consumer,
        {
            "allocations": {rp: {"resources": {"VCPU": 1}}},
            "project_id": "p",
            "user_id": "u",
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
    )
    assert status == 204, body
    return rp, consumer, rc, trait


def _padded_state(client, rp, consumer, rc, trait):
    state = {}
    for path in (
        "/resource_providers/" + rp,
        "/resource_providers/%s/inventories" % rp,
        "/resource_providers/%s/traits" % rp,
        "/resource_providers/%s/aggregates" % rp,
        "/resource_providers/%s/allocations" % rp,
        "/allocations/" + consumer,
        "/resource_classes/" + rc,
        "/traits/" + trait,
    ):
        state[path] = client("GET", path)
    return state


def _padded_requests(rp, consumer, rc, trait, generation, pad):
    """(method, path, body, query, statuses the twin may get): every route
    taking a path value, its value followed by ``pad``."""
    p = rp + " "  # the decoded path: a real space
    gen = {"resource_provider_generation": generation}
    inv = dict(gen, inventories={"VCPU": {"total": 4}})
    one = {"resource_class": "VCPU", "total": 4}
    requests = [
        ("GET", "/resource_providers/" + p, None, "", {404}),
        ("PUT", "/resource_providers/" + p, {"name": "renamed"}, "", {404}),
        ("DELETE", "/resource_providers/" + p, None, "", {404}),
        ("GET", "/resource_providers/%s/inventories" % p, None, "", {404}),
        ("POST", "/resource_providers/%s/inventories" % p, one, "", {404}),
        ("PUT", "/resource_providers/%s/inventories" % p, inv, "", {404}),
        ("DELETE", "/resource_providers/%s/inventories" % p, None, "", {404}),
        ("GET", "/resource_providers/%s/inventories/VCPU" % p, None, "", {404}),
        (
            "PUT",
            "/resource_providers/%s/inventories/VCPU" % p,
            dict(gen, total=4),
            "",
            {404},
        ),
        ("DELETE", "/resource_providers/%s/inventories/VCPU" % p, None, "", {404}),
        ("GET", "/resource_providers/%s/inventories/VCPU " % rp, None, "", {404}),
        (
            "PUT",
            "/resource_providers/%s/inventories/VCPU " % rp,
            dict(gen, total=4),
            "",
            {400, 404},
        ),
        (
            "DELETE",
            "/resource_providers/%s/inventories/VCPU " % rp,
            None,
            "",
            {404},
        ),
        ("GET", "/resource_providers/%s/usages" % p, None, "", {404}),
        ("GET", "/resource_providers/%s/allocations" % p, None, "", {404}),
        ("GET", "/resource_providers/%s/aggregates" % p, None, "", {404}),
        (
            "PUT",
            "/resource_providers/%s/aggregates" % p,
            dict(gen, aggregates=[]),
            "",
            {404},
        ),
        ("GET", "/resource_providers/%s/traits" % p, None, "", {404}),
        (
            "PUT",
            "/resource_providers/%s/traits" % p,
            dict(gen, traits=[]),
            "",
            {404},
        ),
        ("DELETE", "/resource_providers/%s/traits" % p, None, "", {404}),
        ("GET", "/allocations/%s " % consumer, None, "", {200}),
        ("DELETE", "/allocations/%s " % consumer, None, "", {404}),
        ("GET", "/resource_classes/%s " % rc, None, "", {404}),
        ("PUT", "/resource_classes/%s " % rc, None, "", {400}),
        ("DELETE", "/resource_classes/%s " % rc, None, "", {404}),
        ("GET", "/traits/%s " % trait, None, "", {404}),
        ("PUT", "/traits/%s " % trait, None, "", {400}),
        ("DELETE", "/traits/%s " % trait, None, "", {404}),
        ("GET", "/traits", None, "name=in:%s%%20" % trait, {200}),
        ("GET", "/traits", None, "name=in:%s%%20,%s%%20%%20" % (trait, trait), {200}),
    ]
    quoted = urllib.parse.quote(pad)
    return [
        (method, path.replace(" ", pad), body, query.replace("%20", quoted), statuses)
        for method, path, body, query, statuses in requests
    ]


@pytest.mark.parametrize("pad", [" ", "  ", "\x00"], ids=["space", "spaces", "nul"])
def test_a_padded_path_value_names_nothing(client, pad):
    """A path value (or ?name=in: trait) that differs from an existing
    one only by trailing spaces names nothing on every backend (MySQL's
    PAD SPACE collations took it for the unpadded one), and acting on it
    leaves the unpadded object as it was. A NUL, which PostgreSQL cannot
    hold, is answered alike too (it was a 400 there)."""
    tag = uuid.uuid4().hex[:8]
    rp, consumer, rc, trait = _seed_padded_world(client, tag)
    before = _padded_state(client, rp, consumer, rc, trait)
    failures = []
    assert {status for status, _ in before.values()} <= {200, 204}, before
    generation = before["/resource_providers/" + rp][1]["generation"]
    for method, path, body, query, statuses in _padded_requests(
        rp, consumer, rc, trait, generation, pad
    ):
        status, answer = client(method, path, body, query=query)
        empty = None
        if status == 200 and method == "GET":
            empty = answer.get("traits", answer.get("allocations"))
        code = answer["errors"][0].get("code") if status >= 400 else None
        if (
            status not in statuses
            or empty not in (None, [], {})
            or code not in (None, "placement.undefined_code")
        ):
            failures.append((method, path, query, status, answer))
        after = _padded_state(client, rp, consumer, rc, trait)
        if after != before:
            failures.append(("wrote", method, path, status, answer))
            before = after
    assert not failures, "\n".join(map(str, failures))


@pytest.mark.parametrize(
    "taken,sent,path",
    [
        ("wordtest", "wordtest ", "create"),
        ("word2  ", "word2", "create"),
        ("wordtest3", "wordtest3 ", "rename"),
    ],
)
def test_a_padded_name_conflict_is_worded_alike(client, taken, sent, path):
    # resource-providers.md: create says "name: <name>", rename does not.
    _provider(client, taken)
    if path == "create":
        status, body = client("POST", "/resource_providers", {"name": sent})
        expected = "Conflicting resource provider name: %s already exists." % sent
    else:
        other = _provider(client, "other-" + taken)
        status, body = client("PUT", "/resource_providers/" + other, {"name": sent})
        expected = "Conflicting resource provider %s already exists." % sent
    _error(status, body, 409, "placement.duplicate_name")
    assert expected in body["errors"][0]["detail"], body


def test_padded_twins_created_at_once_make_one_provider(client):
    def _create_at(barrier, name):
        barrier.wait()
        return client("POST", "/resource_providers", {"name": name})

    """Three concurrent creates of "raceN", "raceN " and "raceN  " (threads
    calling the app, each request on a pooled connection of its own): one
    provider, the others a 409 (PostgreSQL's check under READ COMMITTED
    missed the other transactions' rows before)."""
    triples = 30
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=3)
    answers = []
    try:
        for n in range(triples):
            barrier = threading.Barrier(3)

            names = ["race%d" % n + " " * pad for pad in range(3)]
            answers.append(list(pool.map(_create_at, [barrier] * 3, names)))
    finally:
        pool.shutdown()
    status, body = client("GET", "/resource_providers")
    assert status == 200, body
    made = {}
    for rp in body["resource_providers"]:
        if rp["name"].startswith("race"):
            made.setdefault(rp["name"].rstrip(" "), []).append(rp["name"])
    twins = {base: names for base, names in made.items() if len(names) > 1}
    assert not twins, twins
    assert len(made) == triples, made
    for triple in answers:
        assert sorted(s for s, _ in triple) == [200, 409, 409], triple

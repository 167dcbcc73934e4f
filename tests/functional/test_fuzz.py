"""Property-based bad-input suite (hypothesis) against the in-process app.

Every route and method, at every microversion, gets malformed JSON, bodies
that are valid documents with one field replaced by a wrong type, a huge or
negative number, unicode or an overlong string, bad and non-canonical
uuids in paths, and query strings with unknown, duplicate and nonsense
parameters. Whatever comes in:

* never a 5xx;
* every error is the API's JSON body (doc/api.md "Errors"): ``errors[0]`` with status,
  title, detail, request_id (and ``code`` from 1.23 once a version was
  negotiated);
* a rejected request writes nothing: the state read back through the API
  (providers and generations, inventories, aggregates, traits,
  allocations, usages, classes, traits) is unchanged;
* an accepted name or id reads back byte for byte, and a filter by name
  or id finds that exact value only (doc/api.md "Names and ids").

The values are those that break databases and drivers: strings a
collation takes for another (trailing and leading spaces, case, tabs,
no-break spaces), integers at and past 2**31, 2**53, 2**63 and 2**64,
floats such as 1e400, -0 and NaN, lone and paired surrogates, and the same
member or element twice in one body.

Runs on SQLite, MySQL and PostgreSQL with bounded, derandomized example counts;
``PLACEMENT_FUZZ_EXAMPLES`` scales them up for a longer local hunt.
"""

import json
import os
import urllib.parse
import uuid

import hypothesis
import pytest
from hypothesis import strategies as st

from placement.api import routes
from tests import fixtures
from tests import wsgi_client

SCALE = float(os.environ.get("PLACEMENT_FUZZ_EXAMPLES", "1"))


def examples(n):
    return hypothesis.settings(
        max_examples=max(1, int(n * SCALE)),
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
    )


ADMIN = {"x-auth-token": "admin", "accept": "application/json"}
VERSIONS = ["1.%d" % minor for minor in range(40)]
PROJECT, USER = str(uuid.uuid4()), str(uuid.uuid4())


class Client:
    """Direct WSGI calls (PEP 3333 environ), no HTTP stack in between."""

    def __init__(self, app):
        self.app = app

    def call(self, method, path, query="", body=None, headers=None, version="1.39"):
        raw = (
            body
            if isinstance(body, bytes)
            else (b"" if body is None else json.dumps(body).encode())
        )
        sent = dict(ADMIN)
        if raw:
            sent["content-type"] = "application/json"
        if version is not None:
            sent["openstack-api-version"] = "placement %s" % version
        sent.update(headers or {})
        r = wsgi_client.call(self.app, path, method, raw, query=query, headers=sent)
        # Any call's, the set-up's and clean-up's too: a 500 is a bug of
        # the service, whatever was sent (a database's refusal is a 503 or
        # a 409).
        assert r.status < 500, ((method, path, query), r.status, r.body)
        return r.status, r.headers, r.body

    def get(self, path, query=""):
        status, _, data = self.call("GET", path, query)
        assert status == 200, (path, status, data)
        return json.loads(data)

    def write(self, method, path, body=None, version="1.39"):
        status, _, data = self.call(method, path, body=body, version=version)
        assert status in (200, 201, 204), (method, path, status, data)
        return json.loads(data) if data else None


class World:
    """The seeded state and its read-back through the API."""

    def __init__(self, client):
        self.client = client
        self.root, self.child, self.other = (str(uuid.uuid4()) for _ in range(3))
        self.consumer = str(uuid.uuid4())
        self.agg = str(uuid.uuid4())
        self.rc, self.trait = "CUSTOM_FUZZ_RC", "CUSTOM_FUZZ_TRAIT"
        # Every project and user id a write was accepted with.
        self.projects, self.users = {PROJECT}, {USER}
        c = client
        c.write("PUT", "/resource_classes/%s" % self.rc)
        c.write("PUT", "/traits/%s" % self.trait)
        c.write("POST", "/resource_providers", {"name": "fuzz-root", "uuid": self.root})
        c.write(
            "POST",
            "/resource_providers",
            {
                "name": "fuzz-child",
                "uuid": self.child,
                "parent_provider_uuid": self.root,
            },
        )
        c.write(
            "POST", "/resource_providers", {"name": "fuzz-other", "uuid": self.other}
        )
        for rp, gen in ((self.root, 0), (self.child, 0)):
            c.write(
                "PUT",
                "/resource_providers/%s/inventories" % rp,
                {
                    "resource_provider_generation": gen,
                    "inventories": {
                        "VCPU": {"total": 8, "max_unit": 8},
                        "MEMORY_MB": {"total": 4096, "reserved": 256},
                        self.rc: {"total": 10},
                    },
                },
            )
        c.write(
            "PUT",
            "/resource_providers/%s/traits" % self.root,
            {
                "traits": [self.trait, "HW_CPU_X86_AVX2"],
                "resource_provider_generation": 1,
            },
        )
        c.write(
            "PUT",
            "/resource_providers/%s/aggregates" % self.root,
            {"aggregates": [self.agg], "resource_provider_generation": 2},
        )
        c.write(
            "PUT",
            "/allocations/%s" % self.consumer,
            {
                "allocations": {
                    self.root: {"resources": {"VCPU": 2}},
                    self.child: {"resources": {self.rc: 1}},
                },
                "project_id": PROJECT,
                "user_id": USER,
                "consumer_generation": None,
                "consumer_type": "INSTANCE",
            },
        )

    @property
    def providers(self):
        return (self.root, self.child, self.other)

    def snapshot(self):
        c = self.client
        state = {
            "providers": sorted(
                (rp["uuid"], rp["name"], rp["generation"], rp["parent_provider_uuid"])
                for rp in c.get("/resource_providers")["resource_providers"]
            ),
            "classes": sorted(
                r["name"] for r in c.get("/resource_classes")["resource_classes"]
            ),
            "traits": sorted(c.get("/traits")["traits"]),
            "consumer": c.get("/allocations/%s" % self.consumer),
            "usages": c.get("/usages", "project_id=%s" % PROJECT),
        }
        for rp in self.providers:
            base = "/resource_providers/%s" % rp
            state[rp] = {
                part: c.get(base + "/" + part)
                for part in ("inventories", "aggregates", "traits", "allocations")
            }
        return state

    def generation(self, state, rp):
        for row in state["providers"]:
            if row[0] == rp:
                return row[2]
        return 0


@pytest.fixture(scope="module", params=fixtures.BACKENDS)
def world(request):
    fixtures.require_backend(request.param)
    with fixtures.app(request.param) as (app, _db):
        yield World(Client(app))


# -- strategies ---------------------------------------------------------


# Integers at and past what the drivers and columns hold (INTEGER,
# BIGINT, a double's exact integers, orjson's 64 bits), floats at the
# edges of a double.
INT_EDGES = [
    2**31 - 1,
    2**31,
    2**32,
    2**53,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    10**30,
    -(2**31) - 1,
    -(2**63),
    -(2**63) - 1,
    -(2**64),
    -1,
    0,
]
FLOAT_EDGES = [1e308, -1e308, 1.5, 0.0, -0.0, 5e-324, 2.0**53, 2.0**64, 1e19]


def _huge():
    return st.sampled_from(INT_EDGES + FLOAT_EDGES)


def twins(value):
    """Strings a database, a collation or a client may take for ``value``:
    trailing spaces (MySQL's PAD SPACE), case (case-insensitive
    collations), leading spaces, a tab, a no-break space."""
    found = [
        value + " ",
        value + "  ",
        " " + value,
        value.upper(),
        value.lower(),
        value.swapcase(),
        value + "\t",
        value + "\u00a0",
    ]
    return [t for t in dict.fromkeys(found) if t != value]


# Lone and paired surrogates: JSON can escape them, UTF-8 cannot hold the
# lone ones (bodies only: a query string is UTF-8 bytes).
SURROGATES = st.sampled_from(["\ud800", "a\udfff", "\udbff\udc00", "\udc00\ud800"])

ODD_TEXT = st.one_of(
    st.text(max_size=30),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=10),
    st.sampled_from(
        [
            "",
            " ",
            "\x00",
            "\u2603",
            "\U0001f600",
            "CUSTOM_",
            "custom_lower",
            "VCPU",
            "null",
            "true",
            "in:",
            "in:,",
            "!",
            "!VCPU",
            "a" * 256,
            "B" * 5000,
            "%00",
            "..",
            "'; DROP TABLE x; --",
            "x ",
            " x",
            "  ",
            "\t",
            "\u00a0",
            "fuzz-root ",
            "FUZZ-ROOT",
        ]
    ),
)

JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    _huge(),
    st.floats(allow_nan=False),
    ODD_TEXT,
    SURROGATES,
)

JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(ODD_TEXT, inner, max_size=4)
    ),
    max_leaves=12,
)


def uuids(world):
    """Valid, unknown, non-canonical and broken uuids, and twins of the
    seeded ones (trailing spaces, case: a collation may take them for the
    seeded uuid)."""
    u = uuid.UUID(world.root)
    return st.one_of(
        st.sampled_from(list(world.providers)),
        st.sampled_from([t for rp in world.providers for t in twins(rp)]),
        st.uuids().map(str),
        st.sampled_from(
            [
                str(u).upper(),
                u.hex,
                "{%s}" % u,
                "urn:uuid:%s" % u,
                str(u)[:-1],
                str(u) + "0",
                str(u).replace("-", "_"),
                "00000000-0000-0000-0000-000000000000",
                "not-a-uuid",
                "",
            ]
        ),
        ODD_TEXT,
    )


def path_params(world, name):
    if name in ("uuid", "consumer_uuid"):
        values = uuids(world)
        if name == "consumer_uuid":
            values = st.one_of(
                st.just(world.consumer), st.sampled_from(twins(world.consumer)), values
            )
        return values
    return st.one_of(
        st.sampled_from(
            [t for known in (world.rc, world.trait, "VCPU") for t in twins(known)]
        ),
        st.sampled_from(
            [
                world.rc,
                world.trait,
                "VCPU",
                "DISK_GB",
                "HW_CPU_X86_AVX2",
                "CUSTOM_NEW_X",
            ]
        ),
        ODD_TEXT,
    )


PATH_PARAMS = ("uuid", "consumer_uuid", "resource_class", "name")


def paths(world):
    """(template, method, concrete path) over the whole route table."""
    choices = [
        (path, method) for path, methods in routes.ROUTES for method, _ in methods
    ]

    def concrete(choice):
        template, method = choice
        names = [n for n in PATH_PARAMS if "{%s}" % n in template]

        def fill(values):
            path = template
            for name, value in zip(names, values):
                path = path.replace("{%s}" % name, value.replace("/", "_"))
            return template, method, path

        return st.tuples(*(path_params(world, n) for n in names)).map(fill)

    return st.sampled_from(choices).flatmap(concrete)


def versions():
    """Mostly valid versions, sometimes ones negotiation refuses."""
    return st.sampled_from(VERSIONS + ["latest", "1.40", "2.0", "1.", "x"])


def _templates(world, state, version):
    """Valid-looking bodies per (route template, method)."""
    gen = world.generation(state, world.root)
    inv = {
        "total": 8,
        "reserved": 0,
        "min_unit": 1,
        "max_unit": 8,
        "step_size": 1,
        "allocation_ratio": 1.0,
    }
    if version >= (1, 12):
        allocs = {
            "allocations": {world.root: {"resources": {"VCPU": 1}}},
            "project_id": PROJECT,
            "user_id": USER,
            "consumer_generation": None,
            "consumer_type": "MIGRATION",
        }
    else:
        allocs = {
            "allocations": [
                {"resource_provider": {"uuid": world.root}, "resources": {"VCPU": 1}}
            ],
            "project_id": PROJECT,
            "user_id": USER,
        }
    return {
        ("/resource_providers", "POST"): {
            "name": "new",
            "uuid": str(uuid.uuid4()),
            "parent_provider_uuid": world.root,
        },
        ("/resource_providers/{uuid}", "PUT"): {
            "name": "renamed",
            "parent_provider_uuid": world.root,
        },
        ("/resource_providers/{uuid}/inventories", "POST"): dict(
            inv, resource_class="DISK_GB"
        ),
        ("/resource_providers/{uuid}/inventories", "PUT"): {
            "resource_provider_generation": gen,
            "inventories": {"VCPU": inv, world.rc: {"total": 3}},
        },
        ("/resource_providers/{uuid}/inventories/{resource_class}", "PUT"): dict(
            inv, resource_provider_generation=gen
        ),
        ("/resource_providers/{uuid}/aggregates", "PUT"): (
            {
                "aggregates": [world.agg, str(uuid.uuid4())],
                "resource_provider_generation": gen,
            }
            if version >= (1, 19)
            else [world.agg]
        ),
        ("/resource_providers/{uuid}/traits", "PUT"): {
            "traits": [world.trait],
            "resource_provider_generation": gen,
        },
        ("/resource_classes", "POST"): {"name": "CUSTOM_FUZZ_NEW"},
        ("/resource_classes/{name}", "PUT"): {"name": "CUSTOM_FUZZ_NEW"},
        ("/allocations/{consumer_uuid}", "PUT"): allocs,
        ("/allocations", "POST"): {
            str(uuid.uuid4()): dict(
                allocs
                if version >= (1, 12)
                else {
                    "allocations": {world.root: {"resources": {"VCPU": 1}}},
                    "project_id": PROJECT,
                    "user_id": USER,
                },
                consumer_generation=None,
            )
        },
        ("/reshaper", "POST"): {
            "inventories": {
                world.root: {
                    "resource_provider_generation": gen,
                    "inventories": {"VCPU": inv},
                }
            },
            "allocations": {world.consumer: dict(allocs, consumer_generation=1)},
        },
    }


def _nodes(doc, prefix=()):
    """Every (path to a node) of a JSON document, the root included."""
    yield prefix
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _nodes(value, prefix + (key,))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _nodes(value, prefix + (i,))


# Names and ids the seeded world holds: their twins are the values a
# database may confuse with them.
KNOWN_TEXT = ["fuzz-root", "fuzz-other", PROJECT, USER]
KNOWN_TWINS = [t for known in KNOWN_TEXT for t in twins(known)]


def _same_type(value):
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.one_of(st.integers(), _huge().filter(lambda v: isinstance(v, int)))
    if isinstance(value, float):
        return st.one_of(st.floats(allow_nan=False), _huge())
    return st.one_of(
        ODD_TEXT,
        st.just(value.upper()),
        st.just(value + "\u2603"),
        st.just(value * 50),
        st.sampled_from(twins(value)),
        st.sampled_from(KNOWN_TWINS),
        SURROGATES,
    )


def json_text(node, where=None, first=None, path=()):
    """JSON text of ``node``; the object member at ``where`` comes twice,
    ``first`` the value of its first copy (a duplicate key: the last one
    counts to a JSON parser, a check may read either)."""
    if isinstance(node, dict):
        members = []
        for key, value in node.items():
            here = path + (key,)
            if here == where:
                members.append("%s:%s" % (json.dumps(key), json.dumps(first)))
            members.append(
                "%s:%s" % (json.dumps(key), json_text(value, where, first, here))
            )
        return "{%s}" % ",".join(members)
    if isinstance(node, list):
        return "[%s]" % ",".join(
            json_text(v, where, first, path + (i,)) for i, v in enumerate(node)
        )
    return json.dumps(node)


@st.composite
def mutated(draw, doc):
    """("json", ``doc`` with one node replaced, removed, given an unknown
    key, or replaced by a value a database takes for another), or ("raw",
    its text with one member or element twice)."""
    doc = json.loads(json.dumps(doc))
    where = draw(st.sampled_from(list(_nodes(doc))))
    if not where:
        return "json", draw(JSON_VALUES)
    parent = doc
    for step in where[:-1]:
        parent = parent[step]
    action = draw(
        st.sampled_from(
            ["same-type", "same-type", "twin", "twice", "replace", "drop", "extra"]
        )
    )
    current = parent[where[-1]]
    if action == "twin" and isinstance(current, str):
        parent[where[-1]] = draw(st.sampled_from(twins(current) + KNOWN_TWINS))
    elif action == "twice" and isinstance(parent, list):
        parent.append(current)  # the same element twice
    elif action == "twice":
        first = draw(st.one_of(st.just(current), JSON_SCALARS))
        return "raw", json_text(doc, where, first).encode()
    elif action == "same-type" and isinstance(current, (bool, int, float, str)):
        # Gets past type checks to range, length and database limits.
        parent[where[-1]] = draw(_same_type(current))
    elif action == "drop":
        del parent[where[-1]]
    elif action == "extra" and isinstance(parent, dict):
        parent[draw(ODD_TEXT)] = draw(JSON_VALUES)
    else:
        parent[where[-1]] = draw(st.one_of(JSON_SCALARS, JSON_VALUES))
    return "json", doc


def bodies(world, state, template, method, version):
    docs = _templates(world, state, _version_tuple(version))
    raw = st.sampled_from(
        [
            b"{",
            b"[1,",
            b"nul",
            b"\xff\xfe",
            b'{"a":}',
            b"1e999999",
            b'"\\ud800"',
            b"{} {}",
            b"[" * 5000,
            b"1e400",
            b"-1e400",
            b"NaN",
            b"-0",
            b"-0.0",
            b'"\\udc00"',
            b'{"name": "a", "name": "a"}',
            b'{"total": 1e400}',
        ]
    )
    options = [raw.map(lambda b: ("raw", b)), JSON_VALUES.map(lambda v: ("json", v))]
    if (template, method) in docs:
        options += [mutated(docs[(template, method)])] * 3
    return st.one_of(*options)


def _version_tuple(version):
    try:
        major, minor = version.split(".")
        return int(major), int(minor)
    except ValueError:
        return (1, 39)


NUMBERS = ["0", "1", "-1", "1.5", "1e3", "01", "99999999999999999999", "9" * 400, ""]
AMOUNTS = [
    "VCPU:1",
    "VCPU:0",
    "VCPU:-1",
    "VCPU:",
    ":1",
    "VCPU",
    "VCPU:99999999999999999999",
    "VCPU:1,VCPU:2",
    "VCPU:1,,DISK_GB:1",
    "NOPE:1",
    "vcpu:1",
    "VCPU:1:2",
    "VCPU: 1",
    "VCPU:1 ",
    "VCPU:1e3",
    "VCPU:-%d" % 2**63,
] + ["VCPU:%d" % n for n in (2**31, 2**53 + 1, 2**63, 2**64, 10**23)]


def _query_hints(world):
    """Edge values per parameter, so that name and value both fit often
    enough to reach the deeper checks."""
    aggs = [
        "in:" + world.agg,
        "in:",
        "!" + world.agg,
        "!in:" + world.agg,
        world.agg.upper(),
        world.agg + "," + world.agg,
        "in:x,y",
    ]
    traits = [
        world.trait,
        "!" + world.trait,
        "in:",
        "in:%s,!%s" % (world.trait, world.trait),
        "!",
        "HW_CPU_X86_AVX2,!HW_CPU_X86_AVX2",
        "in:" + world.trait + ",NOPE",
        world.trait.lower(),
    ]
    ids = [world.root, world.root.upper(), world.root.replace("-", ""), "x", ""]
    return {
        "resources": AMOUNTS,
        "resources1": AMOUNTS,
        "resources_X": AMOUNTS,
        "limit": NUMBERS,
        "member_of": aggs,
        "member_of1": aggs,
        "required": traits,
        "required1": traits,
        "root_required": traits,
        "in_tree": ids,
        "in_tree1": ids,
        "uuid": ids,
        "group_policy": ["none", "isolate", "NONE", ""],
        "same_subtree": ["_1,_X", "1", "_1", "_1,", ",", "_9"],
        "consumer_type": ["INSTANCE", "all", "unknown", "ALL,INSTANCE", ""],
        "project_id": ["p", "", "a" * 300, PROJECT, *twins(PROJECT)],
        "user_id": ["u", "", USER, *twins(USER)],
        "associated": ["true", "false", "yes", ""],
        "name": [
            "startswith:CUSTOM_",
            "in:" + world.trait,
            "fuzz-root",
            "in:",
            "startswith:",
            *twins("fuzz-root"),
        ],
    }


CANDIDATE_PARAMS = [
    "resources",
    "resources1",
    "resources_X",
    "limit",
    "member_of",
    "member_of1",
    "required",
    "required1",
    "root_required",
    "in_tree",
    "in_tree1",
    "group_policy",
    "same_subtree",
]
# Edge values per parameter tried in pairs (their square is the cost).
REPEATED_VALUES = 12
# Routes whose query string is /allocation_candidates' own (one parser):
# repeated parameters are tried there only.
SAME_PARSER = ("/allocation_candidates/explain", "/allocation_candidates/capacity")
ROUTE_PARAMS = {
    "/allocation_candidates": CANDIDATE_PARAMS,
    "/allocation_candidates/explain": CANDIDATE_PARAMS,
    "/allocation_candidates/capacity": CANDIDATE_PARAMS,
    "/resource_providers": [
        "name",
        "uuid",
        "member_of",
        "resources",
        "in_tree",
        "required",
    ],
    "/usages": ["project_id", "user_id", "consumer_type"],
    "/traits": ["name", "associated"],
}


@st.composite
def queries(draw, world, template):
    hints = _query_hints(world)
    known = ROUTE_PARAMS.get(template, sorted(hints))
    names = st.one_of(
        st.sampled_from(known),
        st.sampled_from(known),
        st.sampled_from(known),
        st.sampled_from(sorted(hints) + ["bogus", ""]),
        ODD_TEXT,
    )
    generic = st.one_of(uuids(world), ODD_TEXT)

    def pair(name):
        values = generic
        if name in hints:
            hinted = st.sampled_from(hints[name])
            values = st.one_of(hinted, hinted, hinted, generic)
        return values.map(lambda value: (name, value))

    pairs = draw(st.lists(names.flatmap(pair), min_size=1, max_size=5))
    if draw(st.booleans()):
        # A well-formed base lets the other parameters get past the
        # "resources is required" checks to their own validation.
        pairs.insert(0, ("resources", "VCPU:1"))
    if pairs and draw(st.booleans()):
        pairs.append(pairs[0])  # duplicate parameter
    query = urllib.parse.urlencode(pairs)
    if draw(st.integers(0, 9)) == 0:
        query += draw(
            st.sampled_from(["&", "&&", "=", "%", "%zz", "a=%ff", ";x=1", "+"])
        )
    return query


# -- the properties -----------------------------------------------------


def seeded_path(world, template, name):
    """``template`` with the seeded root, consumer, VCPU and ``name``."""
    return (
        template.replace("{uuid}", world.root)
        .replace("{consumer_uuid}", world.consumer)
        .replace("{resource_class}", "VCPU")
        .replace("{name}", name)
    )


def check_response(version, status, headers, data, request):
    if status < 400 or status == 401:
        return
    assert headers.get("content-type", "").startswith("application/json"), (
        request,
        status,
        headers,
        data,
    )
    body = json.loads(data)
    error = body["errors"][0]
    assert len(body["errors"]) == 1
    assert error["status"] == status, (request, body)
    assert error["title"] and isinstance(error["title"], str)
    assert isinstance(error["detail"], str), (request, body)
    assert error["request_id"] == headers["x-openstack-request-id"]
    negotiated = headers.get("openstack-api-version", "").rpartition(" ")[2]
    if negotiated and _version_tuple(negotiated) >= (1, 23):
        assert error["code"].startswith("placement."), (request, body)
    elif not negotiated:
        assert "code" not in error, (request, body)


def exercise(world, method, path, query, body, version, template=None):
    before = world.snapshot()
    status, headers, data = world.client.call(
        method, path, query, body=body, version=version
    )
    request = (
        method,
        path,
        query,
        body[:200] if isinstance(body, bytes) else body,
        version,
    )
    check_response(version, status, headers, data, request)
    if status >= 400:
        assert world.snapshot() == before, (
            "rejected request wrote",
            request,
            status,
            data,
        )
    else:
        if method not in ("GET", "HEAD", "OPTIONS"):
            check_main_reads(world, request)
        if template is not None and body:
            try:
                doc = json.loads(body)
            except ValueError:
                return
            check_read_back(world, template, method, path, doc, request)


# The reads every deployment depends on: an accepted write must leave
# them answering.
MAIN_READS = [
    ("/resource_providers", ""),
    ("/allocation_candidates", "resources=VCPU:1"),
]


def check_main_reads(world, request):
    for path, query in MAIN_READS:
        status, _, data = world.client.call("GET", path, query)
        assert 200 <= status < 300, ("after", request, path, status, data)


def _text(value):
    return value if isinstance(value, str) else None


def check_read_back(world, template, method, path, doc, request):
    """An accepted write's names and ids read back exactly as sent."""
    if not isinstance(doc, dict):
        return
    c = world.client
    if template == "/resource_providers" and method == "POST":
        found = [
            rp
            for rp in c.get("/resource_providers")["resource_providers"]
            if rp["name"] == doc.get("name")
        ]
        assert found, ("the name sent is not listed", request)
    elif template == "/resource_providers/{uuid}" and method == "PUT":
        name = c.get(path)["name"]
        assert name == doc.get("name"), ("renamed to", name, request)
    elif template == "/allocations/{consumer_uuid}" and method == "PUT":
        _check_owner(world, path, doc, request)
    elif template in ("/allocations", "/reshaper") and method == "POST":
        entries = doc if template == "/allocations" else doc.get("allocations")
        for consumer, entry in (entries or {}).items():
            if isinstance(entry, dict):
                _check_owner(world, "/allocations/" + consumer, entry, request)


def _check_owner(world, path, doc, request):
    """The consumer at ``path`` is owned by the ids sent (1.12+ bodies)."""
    project, user = _text(doc.get("project_id")), _text(doc.get("user_id"))
    if project is None or not doc.get("allocations"):
        return
    world.projects.add(project)
    world.users.add(user)
    got = world.client.get(path)
    assert (got.get("project_id"), got.get("user_id")) == (project, user), (
        "owner read back",
        got,
        request,
    )


def check_filters(world, template, query, status, data):
    """A filter by name or id finds that exact value only."""
    if status != 200 or template not in ("/resource_providers", "/usages"):
        return
    last = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    body = json.loads(data)
    if template == "/resource_providers" and "name" in last:
        names = {rp["name"] for rp in body["resource_providers"]}
        assert names <= {last["name"]}, ("?name= found", names, query)
    if template == "/usages" and (
        last.get("project_id") not in world.projects
        or last.get("user_id", USER) not in world.users
    ):
        # No write was accepted with this project (or user): nothing used.
        assert not body["usages"], ("usages of an unknown owner", query, body)


def test_bodies(world):
    """Bad bodies at every write route, method and microversion."""
    writes = [(t, m) for t, ms in routes.ROUTES for m, _ in ms if m in ("PUT", "POST")]

    @examples(100)
    @hypothesis.given(data=st.data())
    def run(data):
        state = world.snapshot()
        version = data.draw(versions(), "version")
        template, method = data.draw(st.sampled_from(writes), "route")
        path = template
        for name in PATH_PARAMS:
            token = "{%s}" % name
            if token in path:
                choice = data.draw(
                    st.one_of(st.just(world.root), path_params(world, name)), name
                )
                path = path.replace(token, choice.replace("/", "_"))
        kind, body = data.draw(bodies(world, state, template, method, version), "body")
        raw = body if kind == "raw" else json.dumps(body).encode()
        exercise(world, method, path, "", raw, version, template)

    run()


def test_paths_and_methods(world):
    """Every route with odd path parameters and every method, no body."""

    @examples(60)
    @hypothesis.given(
        route=paths(world),
        version=versions(),
        method=st.sampled_from(
            ["GET", "PUT", "POST", "DELETE", "PATCH", "OPTIONS", None]
        ),
    )
    def run(route, version, method):
        template, listed, path = route
        method = method or listed
        # Deleting the seeded world would only shrink later examples.
        if method == "DELETE" and any(
            p in path for p in (*world.providers, world.consumer, world.rc, world.trait)
        ):
            return
        exercise(world, method, path, "", None, version)

    run()


def test_query_strings(world):
    """Unknown, duplicate and nonsense parameters on every GET route."""
    gets = [t for t, ms in routes.ROUTES for m, _ in ms if m == "GET"]

    @examples(150)
    @hypothesis.given(
        request=st.sampled_from(gets).flatmap(
            lambda t: st.tuples(st.just(t), queries(world, t))
        ),
        version=versions(),
    )
    def run(request, version):
        template, query = request
        path = seeded_path(
            world, template, world.rc if "classes" in template else world.trait
        )
        status, headers, data = world.client.call("GET", path, query, version=version)
        check_response(version, status, headers, data, ("GET", path, query, version))
        check_filters(world, template, query, status, data)

    run()


# The seeded values each path parameter can name, by template.
def _originals(world, template, name):
    if name == "uuid":
        return list(world.providers)
    if name == "consumer_uuid":
        return [world.consumer]
    if name == "resource_class":
        return ["VCPU", "MEMORY_MB", world.rc]
    if template.startswith("/traits"):
        return [world.trait, "HW_CPU_X86_AVX2"]
    return [world.rc, "VCPU"]


def twin_paths(world):
    """(template, method, path, twinned value) over every route taking a
    path value: the seeded values, one of them replaced by a twin."""
    choices = [
        (path, method)
        for path, methods in routes.ROUTES
        for method, _ in methods
        if "{" in path
    ]

    @st.composite
    def draw(draw_one):
        template, method = draw_one(st.sampled_from(choices))
        names = [n for n in PATH_PARAMS if "{%s}" % n in template]
        twinned = draw_one(st.sampled_from(names))
        path = template
        for name in names:
            original = draw_one(st.sampled_from(_originals(world, template, name)))
            value = original
            if name == twinned:
                value = draw_one(st.sampled_from(twins(original)))
            path = path.replace("{%s}" % name, value)
        return template, method, path, value

    return draw()


def test_path_twins(world):
    """A twin of a seeded path value (trailing spaces, other case, a
    leading space, a tab, a no-break space) names nothing (doc/api.md
    "Names and ids"): a GET is a 404 (GET /allocations/{c}: no
    allocations), a DELETE a 404, any other write refused, and nothing
    the API reads back changes. MySQL's PAD SPACE collations took the
    padded uuid or name for the seeded one."""

    @examples(60)
    @hypothesis.given(route=twin_paths(world))
    def run(route):
        template, method, path, twin = route
        before = world.snapshot()
        status, headers, data = world.client.call(method, path)
        request = (method, path)
        check_response("1.39", status, headers, data, request)
        if template == "/allocations/{consumer_uuid}" and method == "GET":
            assert status == 200, (request, status, data)
            assert json.loads(data) == {"allocations": {}}, (request, data)
        elif method in ("GET", "DELETE"):
            assert status == 404, (request, status, data)
        else:
            assert status >= 400, (request, status, data)
        assert world.snapshot() == before, ("a twin wrote", request, status, data)

    run()


# Accept values that admit no JSON, and the media type errors come in.
NOT_JSON = {
    "text/html": "text/html",
    "application/xml": "text/plain",
    "application/json;q=0": "text/plain",
}


def test_headers(world):
    """Odd Accept, Content-Type, Content-Length and microversion headers."""

    @examples(40)
    @hypothesis.given(
        route=paths(world),
        accept=st.sampled_from(
            [
                "text/html",
                "application/xml",
                "*/*",
                "",
                "application/json;q=0",
                "garbage/",
                "application/json, text/plain;q=0.5",
            ]
        ),
        ctype=st.sampled_from(
            [
                "text/plain",
                "",
                "application/json; x=y",
                "APPLICATION/JSON",
                "multipart/form-data",
            ]
        ),
        version_header=st.sampled_from(
            [
                "placement 1.39",
                "placement latest",
                "placement",
                "PLACEMENT 1.2",
                "compute 2.1, placement 1.10",
                "placement 1.2.3",
                "placement 01.9",
                "placement 1.0009",
                "",
                ",",
            ]
        ),
    )
    def run(route, accept, ctype, version_header):
        _, method, path = route
        if method == "DELETE":
            return
        status, headers, data = world.client.call(
            method,
            path,
            body=b'{"x": 1}',
            version=None,
            headers={
                "accept": accept,
                "content-type": ctype,
                "openstack-api-version": version_header,
            },
        )
        request = (method, path, accept, ctype, version_header)
        if accept in NOT_JSON and status >= 400 and status != 401:
            # Errors follow Accept: not JSON for these.
            assert headers["content-type"].startswith(NOT_JSON[accept]), (
                request,
                headers,
                data,
            )
            return
        check_response(None, status, headers, data, request)

    run()


def test_query_hints_exhaustive(world):
    """Every edge value of every parameter of each list route, alone and
    after a well-formed base, at the newest version and the oldest that
    has the route: the combinations random sampling reaches too rarely."""
    hints = _query_hints(world)
    for template, names in ROUTE_PARAMS.items():
        for name in names:
            for value in hints[name]:
                for base in ([], [("resources", "VCPU:1")]):
                    query = urllib.parse.urlencode(base + [(name, value)])
                    for version in ("1.39", "1.10"):
                        status, headers, data = world.client.call(
                            "GET", template, query, version=version
                        )
                        check_response(
                            version,
                            status,
                            headers,
                            data,
                            ("GET", template, query, version),
                        )
                        check_filters(world, template, query, status, data)


def test_repeated_parameters_exhaustive(world):
    """Every parameter of each list route given twice, each copy any of its
    edge values: no 5xx, whichever copy is valid. The copies the handler
    does not read are validated too (limit, group_policy) or ignored."""
    hints = _query_hints(world)
    for template, names in ROUTE_PARAMS.items():
        if template in SAME_PARSER:
            continue
        for name in names:
            values = hints[name][:REPEATED_VALUES]
            for first in values:
                for second in values:
                    query = urllib.parse.urlencode(
                        [("resources", "VCPU:1"), (name, first), (name, second)]
                    )
                    status, headers, data = world.client.call("GET", template, query)
                    check_response(
                        "1.39", status, headers, data, ("GET", template, query)
                    )
                    check_filters(world, template, query, status, data)


BODY_EDGES = [
    2**31,
    2**63,
    2**64,
    -(2**63),
    -1,
    0,
    1e308,
    1.5,
    None,
    True,
    "",
    "\U0001f600" * 300,
    "a" * 70000,
    "\x00",
    [],
    {},
]


def test_body_edges_exhaustive(world):
    """Each node of each valid-looking body replaced by each edge value,
    at the newest version and an old one: no 5xx, JSON error bodies."""
    for version in ("1.39", "1.10"):
        docs = _templates(world, world.snapshot(), _version_tuple(version))
        for (template, method), doc in docs.items():
            path = seeded_path(world, template, "CUSTOM_FUZZ_NEW")
            for where in list(_nodes(doc))[1:]:
                for edge in BODY_EDGES:
                    body = json.loads(json.dumps(doc))
                    parent = body
                    for step in where[:-1]:
                        parent = parent[step]
                    parent[where[-1]] = edge
                    status, headers, data = world.client.call(
                        method, path, body=body, version=version
                    )
                    check_response(
                        version,
                        status,
                        headers,
                        data,
                        (method, path, where, edge, version),
                    )


def test_collation_twins_exhaustive(world):
    """Each name and id of the seeded world, sent again as each of its
    twins (trailing or leading spaces, other case, a tab, a no-break
    space) in every filter and write that takes it: no 5xx, a filter finds
    the exact value only, an accepted write reads back exactly, a refused
    one writes nothing. The twins MySQL's PAD SPACE takes for the original
    are the cases random sampling found too rarely."""
    c = world.client
    failures = []
    owners = [(t, USER) for t in twins(PROJECT)] + [(PROJECT, t) for t in twins(USER)]
    for params in [{"name": t} for t in twins("fuzz-root") + twins("fuzz-other")]:
        _filter(world, failures, "/resource_providers", params)
    for project, user in [(PROJECT, USER)] + owners:
        _filter(world, failures, "/usages", {"project_id": project, "user_id": user})
    for twin in twins("fuzz-other"):
        created = str(uuid.uuid4())
        body = {"name": twin, "uuid": created}
        _write(world, failures, "POST", "/resource_providers", body)
        renamed = "/resource_providers/" + world.root
        body = {"name": twin}
        _write(world, failures, "PUT", "/resource_providers/{uuid}", body, renamed)
        # Back as seeded, for the next twin and the other tests.
        c.write("PUT", renamed, {"name": "fuzz-root"})
        c.call("DELETE", "/resource_providers/" + created)
    for project, user in owners:
        body = {
            "allocations": {world.root: {"resources": {"VCPU": 1}}},
            "project_id": project,
            "user_id": user,
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        }
        path = "/allocations/%s" % uuid.uuid4()
        _write(world, failures, "PUT", "/allocations/{consumer_uuid}", body, path)
        c.call("DELETE", path)
    # Every case reported at once.
    assert not failures, "\n".join(failures)


def _filter(world, failures, template, params):
    query = urllib.parse.urlencode(params)
    status, headers, data = world.client.call("GET", template, query)
    try:
        check_response("1.39", status, headers, data, ("GET", template, query))
        check_filters(world, template, query, status, data)
    except AssertionError as e:
        failures.append(str(e)[:300])


def _write(world, failures, method, template, body, path=None):
    raw = json.dumps(body).encode()
    try:
        exercise(world, method, path or template, "", raw, "1.39", template)
    except AssertionError as e:
        failures.append(str(e)[:300])

"""schemathesis against a live ``placement-api``, driven by the server's own
``/openapi.json``.

For a few microversions, every operation of that version's document gets
a bounded number of generated requests (``PLACEMENT_OPENAPI_EXAMPLES``
each, default 10), half of them aimed at a real provider, class, trait
and consumer seeded first, so that success bodies are exercised too, not
only 400s and 404s. Every answer must be no 5xx, have a status the
document lists for the operation, and a body that conforms to the
schema given for that status. Runs on SQLite, MySQL and PostgreSQL.
"""

import os
import typing
import uuid

import hypothesis
import pytest
import requests
import schemathesis
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance
from schemathesis.specs.openapi.checks import response_schema_conformance
from schemathesis.specs.openapi.checks import status_code_conformance

from tests import fixtures
from tests import helpers
from tests.functional import live_server

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("PLACEMENT_OPENAPI_EXAMPLES", "10"))
VERSIONS = ("1.0", "1.20", "1.39")
TOKEN = {"x-auth-token": "admin"}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
PROVIDER = str(uuid.uuid4())
CONSUMER = str(uuid.uuid4())
PROJECT = str(uuid.uuid4())
# Values for path parameters that name things that exist.
SEEDED = {
    "uuid": PROVIDER,
    "resource_class": "VCPU",
    "name": "CUSTOM_SEEDED",
    "consumer_uuid": CONSUMER,
}


def _seed(base):
    """Make the seeded things exist (again: generated requests delete)."""
    session = requests.Session()
    session.headers.update(TOKEN, **{"openstack-api-version": "placement 1.39"})
    session.post(
        base + "/resource_providers", json={"uuid": PROVIDER, "name": "seeded"}
    )
    session.put(base + "/resource_classes/CUSTOM_SEEDED")
    session.put(base + "/traits/CUSTOM_SEEDED")
    generation = session.get(base + "/resource_providers/" + PROVIDER).json()[
        "generation"
    ]
    resp = session.put(
        base + "/resource_providers/%s/inventories" % PROVIDER,
        json={
            "resource_provider_generation": generation,
            "inventories": {"VCPU": {"total": 8}, "CUSTOM_SEEDED": {"total": 4}},
        },
    )
    if resp.ok:
        generation = resp.json()["resource_provider_generation"]
    session.put(
        base + "/resource_providers/%s/traits" % PROVIDER,
        json={"resource_provider_generation": generation, "traits": ["CUSTOM_SEEDED"]},
    )
    session.put(
        base + "/allocations/" + CONSUMER,
        json={
            "allocations": {PROVIDER: {"resources": {"VCPU": 1}}},
            "project_id": PROJECT,
            "user_id": PROJECT,
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
    )


def _aimed(case):
    """The case with its path parameters pointing at seeded things."""
    for name in case.path_parameters or {}:
        case.path_parameters[name] = SEEDED[name]
    return case


class Live(typing.NamedTuple):
    backend: str
    url: str


@pytest.fixture(scope="module", params=fixtures.BACKENDS)
def live(request, tmp_path_factory):
    fixtures.require_backend(request.param)
    workdir = tmp_path_factory.mktemp("openapi")
    with fixtures.database_url(request.param) as url:
        with live_server.placement_api(
            workdir, "--db-sync", OS_PLACEMENT_DATABASE__CONNECTION=url
        ) as base:
            yield Live(request.param, base)


def _exercise(operation, base, failures):
    """Send the operation's bounded examples; the number sent."""
    strategy = operation.as_strategy()
    if "{" in operation.path:
        strategy = st.one_of(strategy, strategy.map(_aimed))
    sent = []

    @helpers.bounded_examples(EXAMPLES)
    @hypothesis.given(case=strategy)
    def run(case):
        sent.append(case)
        response = case.call(base_url=base, headers=TOKEN)
        try:
            case.validate_response(response, checks=CHECKS)
        except Exception as e:
            failures.append("%s: %s" % (operation.label, e))

    _seed(base)
    run()
    return len(sent)


@pytest.mark.parametrize("version", VERSIONS)
def test_live_answers_conform(live, version):
    if live.backend != "sqlite" and version != VERSIONS[-1]:
        # Bounded time: the other versions differ in bodies, not in SQL.
        pytest.skip("MySQL and PostgreSQL run the latest microversion only")
    schema = schemathesis.openapi.from_url(
        live.url + "/openapi.json?microversion=%s" % version
    )
    failures = []
    sent = {
        result.ok().label: _exercise(result.ok(), live.url, failures)
        for result in schema.get_all_operations()
    }
    described = [op for item in schema.raw_schema["paths"].values() for op in item]
    assert len(sent) == len(described) and all(sent.values())
    print(
        "schemathesis %s %s: %d examples, %d operations, %d failures"
        % (live.backend, version, sum(sent.values()), len(sent), len(failures))
    )
    assert not failures, "\n\n".join(failures[:10])

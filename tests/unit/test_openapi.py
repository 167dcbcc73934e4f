"""The OpenAPI documents: valid OpenAPI 3.1 at every microversion, built
from the route table, and the generated API reference is current."""

import importlib.util
import os

import pytest
from openapi_spec_validator import validate

from placement import versions
from placement.api import openapi
from placement.api import routes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# About 4 s each: the first, the latest and one between (the documents
# are built by the same code at every version).
@pytest.mark.parametrize("version", ["1.0", "1.20", "1.39"])
def test_document_is_valid_openapi_3_1(version):
    document = openapi.document(versions.Version.parse(version))
    assert document["openapi"] == "3.1.0"
    validate(document)


def test_every_route_of_the_route_table_is_described():
    document = openapi.document(versions.MAX)
    described = {
        (path, method.upper())
        for path, item in document["paths"].items()
        for method in item
    }
    table = {(path, method) for path, methods in routes.ROUTES for method, _ in methods}
    assert described == table


def test_every_handler_has_exactly_one_description():
    handlers = set()
    for _, methods in routes.ROUTES:
        for _, fn in methods:
            handlers.update(
                openapi.handler_name(v) for v in getattr(fn, "variants", (fn,))
            )
    assert handlers == set(openapi.OPERATIONS)


def test_operations_follow_the_version_gates():
    early = openapi.document(versions.Version(1, 1))["paths"]
    assert "/traits" not in early
    assert "delete" not in early["/resource_providers/{uuid}/inventories"]
    assert "/resource_providers/{uuid}/aggregates" in early
    assert "/resource_classes/{name}" not in early  # from 1.2
    at_1_6 = openapi.document(versions.Version(1, 6))["paths"]
    assert "requestBody" in at_1_6["/resource_classes/{name}"]["put"]
    at_1_7 = openapi.document(versions.Version(1, 7))["paths"]
    assert "requestBody" not in at_1_7["/resource_classes/{name}"]["put"]
    assert set(at_1_7["/resource_classes/{name}"]["put"]["responses"]) >= {"201", "204"}


def test_query_and_body_schemas_are_the_handlers_own():
    from placement.schemas import allocation
    from placement.schemas import resource_provider

    at_1_14 = openapi.document(versions.Version(1, 14))["paths"]
    params = {
        p["name"]: p["schema"]
        for p in at_1_14["/resource_providers"]["get"]["parameters"]
        if p["in"] == "query"
    }
    assert params == resource_provider.LIST_QUERY_1_14["properties"]
    body = at_1_14["/allocations/{consumer_uuid}"]["put"]["requestBody"]
    assert body["content"]["application/json"]["schema"] == allocation.PUT_V1_12


def test_api_reference_is_current():
    spec = importlib.util.spec_from_file_location(
        "api_reference", os.path.join(ROOT, "tools", "api_reference.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with open(os.path.join(ROOT, "doc", "api-reference.md")) as f:
        assert f.read() == module.render(), (
            "doc/api-reference.md is stale: run .venv/bin/python tools/api_reference.py"
        )

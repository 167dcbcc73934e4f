"""The compiled schema check (``request._check``, jsonschema_rs) never
passes a value jsonschema, with our pattern and format, refuses: a body
it passes skips jsonschema, so it must be as strict. Values drawn from
every schema the service validates, near valid and spoiled."""

import random

import jsonschema
import pytest

from placement import deploy
from placement import schemas
from placement import versions
from placement.schemas import aggregate
from placement.schemas import allocation
from placement.schemas import allocation_candidate
from placement.schemas import inventory
from placement.schemas import reshaper
from placement.schemas import resource_class
from placement.schemas import resource_provider
from placement.schemas import trait
from placement.schemas import usage
from placement.web import errors
from placement.web import request
from tests import fixtures

UUIDS = [
    "c0ffee00-0000-4000-8000-000000000002",
    "C0FFEE00-0000-4000-8000-000000000002",
    "c0ffee0000004000800000000000000a",
    "{c0ffee00-0000-4000-8000-000000000002}",
    "urn:uuid:c0ffee00-0000-4000-8000-000000000002",
    "c0ffee00-0000-4000-8000-00000000000",
    "c0ffee00-0000-4000-8000-000000000002\n",
    "not-a-uuid-------------------------0",
]
STRINGS = UUIDS + [
    "",
    " ",
    "p",
    "p ",
    "p \n",
    "VCPU",
    "VCPU\n",
    "CUSTOM_X",
    "CUSTOM_x",
    "CUSTOM_X\n",
    "INSTANCE",
    "all",
    "unknown",
    "1",
    "01",
    "x" * 255,
    "x" * 256,
    "\U0001f600" * 255,
    "\U0001f600" * 256,
    "é",
]
NUMBERS = [
    0,
    1,
    -1,
    2,
    1.0,
    1.5,
    2**31,
    2**63 - 1,
    2**63,
    2**64,
    -(2**70),
    1e300,
    True,
    False,
]


def _schemas():
    found = []
    for module in (
        aggregate,
        allocation,
        allocation_candidate,
        inventory,
        reshaper,
        resource_class,
        resource_provider,
        trait,
        usage,
    ):
        for value in vars(module).values():
            if isinstance(value, dict) and value.get("type") == "object":
                found.append(value)
            elif isinstance(value, versions.Table):
                for minor in range(versions.MAX.minor + 1):
                    try:
                        found.append(value(versions.Version(1, minor)))
                    except LookupError:
                        pass
    return found


def _any(rng, depth):
    kind = rng.randrange(6 if depth < 3 else 4)
    if kind == 0:
        return rng.choice(STRINGS)
    if kind == 1:
        return rng.choice(NUMBERS)
    if kind == 2:
        return None
    if kind == 3:
        return rng.choice([[], {}])
    if kind == 4:
        return [_any(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {rng.choice(STRINGS): _any(rng, depth + 1) for _ in range(rng.randrange(3))}


def _value(schema, rng, depth=0):
    """A value for ``schema``, sometimes spoiled."""
    if rng.random() < 0.08:
        return _any(rng, depth)
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kinds = schema.get("type", "object")
    kind = rng.choice(kinds) if isinstance(kinds, list) else kinds
    if kind == "object":
        out = {}
        properties = schema.get("properties", {})
        for name, sub in properties.items():
            if name in schema.get("required", ()) or rng.random() < 0.6:
                out[name] = _value(sub, rng, depth + 1)
        for sub in schema.get("patternProperties", {}).values():
            for _ in range(rng.randrange(3)):
                out[rng.choice(STRINGS)] = _value(sub, rng, depth + 1)
        if rng.random() < 0.1:
            out[rng.choice(STRINGS)] = _any(rng, depth + 1)
        return out
    if kind == "array":
        items = schema.get("items", {})
        return [_value(items, rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind in ("integer", "number"):
        return rng.choice(NUMBERS)
    if kind == "string":
        return rng.choice(STRINGS)
    if kind == "boolean":
        return rng.choice([True, False, 0, 1, "true"])
    return None


def _jsonschema_passes(data, schema):
    cls = request._validator_class(jsonschema.validators.validator_for(schema))
    validator = cls(schema, format_checker=request.FORMAT_CHECKER)
    return next(validator.iter_errors(data), None) is None


@pytest.mark.parametrize("seed", range(2))
def test_compiled_check_never_laxer(seed):
    rng = random.Random(seed)
    passed = refused = 0
    for schema in _schemas():
        for _ in range(150):
            data = _value(schema, rng)
            if request._check(schema).is_valid(data):
                assert _jsonschema_passes(data, schema), (schema, data)
                passed += 1
            else:
                refused += 1
    # Both kinds seen: the draw reaches valid values as well as spoiled.
    assert passed > 500 and refused > 500, (passed, refused)


def test_refused_body_reports_jsonschema_error():
    schema = allocation.PUT_V1_38
    body = {
        "allocations": {UUIDS[0]: {"resources": {"VCPU": 0}}},
        "project_id": "p",
        "user_id": "u",
        "consumer_generation": None,
        "consumer_type": "INSTANCE",
    }
    with pytest.raises(errors.BadRequest) as raised:
        request.validate(body, schema)
    assert "0 is less than the minimum of 1" in str(raised.value)
    body["allocations"][UUIDS[0]]["resources"]["VCPU"] = 1
    request.validate(body, schema)


def test_the_request_schemas_are_compiled_ahead(monkeypatch):
    """``deploy.build_app`` compiles every request schema's check before
    any request: among them each microversion's candidate query and
    provider PUT body."""
    found = {id(schema) for schema in schemas.request_schemas()}
    tables = (allocation_candidate.QUERY, resource_provider.PUT, allocation.PUT_SCHEMA)
    for table in tables:
        assert {id(schema) for schema in table.values()} <= found
    assert id(trait.LIST_TRAITS_QUERY) in found
    monkeypatch.setattr(request, "_CHECKS", {})
    with fixtures.database("sqlite") as db:
        deploy.build_app(fixtures.configure(), db=db)
    for schema in schemas.request_schemas():
        held = request._CHECKS[id(schema)]
        assert held[0] is schema

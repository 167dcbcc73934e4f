"""Schemas for allocation writes: PUT /allocations/{c} (per microversion)
and POST /allocations (doc/api.md "Allocations")."""

import copy

from placement import versions

CLASS_NAME_PATTERN = "^[A-Z0-9_]+$"
UUID_KEY_PATTERN = "^[0-9a-fA-F-]{36}$"

# A project or user id may not end with a space: upstream's MySQL schema
# cannot tell 'p' from 'p ' (doc/api.md "Names and ids").
_STRING_ID = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "[^ ]$"}
CONSUMER_TYPE = {
    "type": "string",
    "pattern": CLASS_NAME_PATTERN,
    "minLength": 1,
    "maxLength": 255,
}
CONSUMER_GENERATION = {"type": ["integer", "null"]}

RESOURCES = {
    "type": "object",
    "minProperties": 1,
    "patternProperties": {
        CLASS_NAME_PATTERN: {"type": "integer", "minimum": 1},
    },
    "additionalProperties": False,
}

# Accepted from 1.34 and ignored: which request group used which provider.
MAPPINGS = {
    "type": "object",
    "minProperties": 1,
    "patternProperties": {
        "^[A-Za-z0-9_-]*$": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string", "format": "uuid"},
        },
    },
}

_LIST_ALLOCATIONS = {
    "type": "array",
    "minItems": 1,
    "items": {
        "type": "object",
        "properties": {
            "resource_provider": {
                "type": "object",
                "properties": {"uuid": {"type": "string", "format": "uuid"}},
                "required": ["uuid"],
                "additionalProperties": False,
            },
            "resources": RESOURCES,
        },
        "required": ["resource_provider", "resources"],
        "additionalProperties": False,
    },
}

DICT_ALLOCATIONS = {
    "type": "object",
    "patternProperties": {
        UUID_KEY_PATTERN: {
            "type": "object",
            "properties": {
                "generation": {"type": "integer"},
                "resources": RESOURCES,
            },
            "required": ["resources"],
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}


def _object(properties, required):
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


def _evolve(schema, properties=None, required=(), allocations=None):
    """A copy of ``schema`` with more properties/required names."""
    schema = copy.deepcopy(schema)
    schema["properties"].update(properties or {})
    schema["required"] = schema["required"] + list(required)
    if allocations is not None:
        schema["properties"]["allocations"] = allocations
    return schema


PUT_V1_0 = _object({"allocations": _LIST_ALLOCATIONS}, ["allocations"])
PUT_V1_8 = _evolve(
    PUT_V1_0,
    {"project_id": _STRING_ID, "user_id": _STRING_ID},
    ["project_id", "user_id"],
)
_NON_EMPTY_DICT = dict(DICT_ALLOCATIONS, minProperties=1)
PUT_V1_12 = _evolve(PUT_V1_8, allocations=_NON_EMPTY_DICT)
# From 1.28 an empty allocations object is the generation-safe delete.
PUT_V1_28 = _evolve(
    PUT_V1_12,
    {"consumer_generation": CONSUMER_GENERATION},
    ["consumer_generation"],
    allocations=DICT_ALLOCATIONS,
)
PUT_V1_34 = _evolve(PUT_V1_28, {"mappings": MAPPINGS})
PUT_V1_38 = _evolve(PUT_V1_34, {"consumer_type": CONSUMER_TYPE}, ["consumer_type"])

PUT_SCHEMA = versions.Table(
    (None, PUT_V1_0),
    (versions.OWNER_REQUIRED, PUT_V1_8),
    (versions.DICT_ALLOCATIONS, PUT_V1_12),
    (versions.CONSUMER_GENERATION, PUT_V1_28),
    (versions.MAPPINGS, PUT_V1_34),
    (versions.CONSUMER_TYPES, PUT_V1_38),
)

# One consumer's entry of POST /allocations (and of the reshaper).
CONSUMER_V1_13 = _object(
    {"allocations": DICT_ALLOCATIONS, "project_id": _STRING_ID, "user_id": _STRING_ID},
    ["allocations", "project_id", "user_id"],
)
CONSUMER_V1_28 = _evolve(
    CONSUMER_V1_13,
    {"consumer_generation": CONSUMER_GENERATION},
    ["consumer_generation"],
)
CONSUMER_V1_34 = _evolve(CONSUMER_V1_28, {"mappings": MAPPINGS})
CONSUMER_V1_38 = _evolve(
    CONSUMER_V1_34, {"consumer_type": CONSUMER_TYPE}, ["consumer_type"]
)

# (first version, schema) rows: POST /allocations and the reshaper build on these.
CONSUMER_SCHEMAS = (
    (None, CONSUMER_V1_13),
    (versions.CONSUMER_GENERATION, CONSUMER_V1_28),
    (versions.MAPPINGS, CONSUMER_V1_34),
    (versions.CONSUMER_TYPES, CONSUMER_V1_38),
)


def consumers_object(consumer_schema, min_properties=1):
    """An object of consumer entries keyed by consumer uuid."""
    return {
        "type": "object",
        "minProperties": min_properties,
        "patternProperties": {UUID_KEY_PATTERN: consumer_schema},
        "additionalProperties": False,
    }


POST_SCHEMA = versions.Table(
    *((first, consumers_object(consumer)) for first, consumer in CONSUMER_SCHEMAS)
)

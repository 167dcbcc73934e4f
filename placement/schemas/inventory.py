"""Schemas for inventory bodies: POST, PUT of one class, PUT of the set."""

import copy

MAX_INT = 2147483647
MAX_FLOAT = 3.40282e38
CLASS_NAME_PATTERN = "^[A-Z0-9_]+$"

# The record fields with their defaults (applied when omitted).
DEFAULTS = {
    "reserved": 0,
    "min_unit": 1,
    "max_unit": MAX_INT,
    "step_size": 1,
    "allocation_ratio": 1.0,
}
FIELDS = ("total",) + tuple(DEFAULTS)

# Key order is visible: a schema failure prints the fragment as written.
_RECORD_PROPERTIES = {
    "total": {"type": "integer", "maximum": MAX_INT, "minimum": 1},
    "reserved": {"type": "integer", "maximum": MAX_INT, "minimum": 0},
    "min_unit": {"type": "integer", "maximum": MAX_INT, "minimum": 1},
    "max_unit": {"type": "integer", "maximum": MAX_INT, "minimum": 1},
    "step_size": {"type": "integer", "maximum": MAX_INT, "minimum": 1},
    "allocation_ratio": {"type": "number", "maximum": MAX_FLOAT},
    # Accepted everywhere; only the PUT routes use it (POST ignores it).
    "resource_provider_generation": {"type": "integer"},
}


def _record(extra_properties=None, extra_required=()):
    properties = copy.deepcopy(_RECORD_PROPERTIES)
    properties.update(extra_properties or {})
    return {
        "type": "object",
        "properties": properties,
        "required": ["total", *extra_required],
        "additionalProperties": False,
    }


POST_INVENTORY = _record(
    {"resource_class": {"type": "string", "pattern": CLASS_NAME_PATTERN}},
    extra_required=["resource_class"],
)

PUT_INVENTORY = _record(extra_required=["resource_provider_generation"])

PUT_INVENTORIES = {
    "type": "object",
    "properties": {
        "resource_provider_generation": {"type": "integer"},
        "inventories": {
            "type": "object",
            "patternProperties": {CLASS_NAME_PATTERN: _record()},
            # Keys that are not class names are rejected outright (upstream
            # lets them through to a confusing 400 or even a 500).
            "additionalProperties": False,
        },
    },
    "required": ["resource_provider_generation", "inventories"],
    "additionalProperties": False,
}

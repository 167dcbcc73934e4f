"""Query-string schemas for GET /usages."""

import copy
import typing

_STRING_ID = {"type": "string", "minLength": 1, "maxLength": 255}

QUERY_V1_9: dict[str, typing.Any] = {
    "type": "object",
    "properties": {"project_id": _STRING_ID, "user_id": _STRING_ID},
    "required": ["project_id"],
    "additionalProperties": False,
}

QUERY_V1_38 = copy.deepcopy(QUERY_V1_9)
# A type name, "unknown", or (upstream quirk kept) anything starting "all".
QUERY_V1_38["properties"]["consumer_type"] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 255,
    "pattern": "^([A-Z0-9_]+|all.*|unknown)$",
}

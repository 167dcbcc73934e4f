"""Schemas for /resource_providers: POST and PUT bodies, the list query."""

import copy

from placement import versions
from placement.schemas import uuids

# The shared "uuid" format accepts every UUID-like spelling; the list query
# wants the canonical dashed form only.
CANONICAL_UUID = {"type": "string", "pattern": "^%s$" % uuids.CANONICAL}
_NAME = {"type": "string", "maxLength": 200}
# Plain validators, no anyOf: a failure then names the property itself
# ("Failed validating 'format' in schema['properties']['uuid']").
_UUID = {"type": "string", "format": "uuid"}
_PARENT = {"type": ["string", "null"], "format": "uuid"}


def _body(properties, required=("name",)):
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


# The handler drops an empty uuid before validation: like an absent one,
# it asks for a generated uuid.
POST_PROVIDER = _body({"name": _NAME, "uuid": _UUID})
POST_PROVIDER_1_14 = copy.deepcopy(POST_PROVIDER)
POST_PROVIDER_1_14["properties"]["parent_provider_uuid"] = _PARENT

PUT_PROVIDER = _body({"name": _NAME})
PUT_PROVIDER_1_14 = copy.deepcopy(PUT_PROVIDER)
PUT_PROVIDER_1_14["properties"]["parent_provider_uuid"] = _PARENT

POST = versions.Table(
    (None, POST_PROVIDER), (versions.NESTED_PROVIDERS, POST_PROVIDER_1_14)
)
PUT = versions.Table(
    (None, PUT_PROVIDER), (versions.NESTED_PROVIDERS, PUT_PROVIDER_1_14)
)


def _query(**properties):
    return {"type": "object", "properties": properties, "additionalProperties": False}


_STRING = {"type": "string"}
LIST_QUERY_1_0 = _query(name=_STRING, uuid=CANONICAL_UUID)
LIST_QUERY_1_3 = _query(**LIST_QUERY_1_0["properties"], member_of=_STRING)
LIST_QUERY_1_4 = _query(**LIST_QUERY_1_3["properties"], resources=_STRING)
LIST_QUERY_1_14 = _query(**LIST_QUERY_1_4["properties"], in_tree=CANONICAL_UUID)
LIST_QUERY_1_18 = _query(**LIST_QUERY_1_14["properties"], required=_STRING)

LIST_QUERY = versions.Table(
    (None, LIST_QUERY_1_0),
    (versions.PROVIDER_MEMBER_OF, LIST_QUERY_1_3),
    (versions.PROVIDER_RESOURCES, LIST_QUERY_1_4),
    (versions.NESTED_PROVIDERS, LIST_QUERY_1_14),
    (versions.PROVIDER_TRAITS, LIST_QUERY_1_18),
)

"""JSON schemas of response bodies, per microversion.

Nothing validates responses at run time: these feed the OpenAPI document
(``placement.api.openapi``), and the schemathesis run checks every answer
of a live server against them, so a body that drifts from its schema
fails the suite.
"""

from placement import versions

CLASS_NAME = "^[A-Z0-9_]+$"
_STRING = {"type": "string"}
_INTEGER = {"type": "integer"}
_UUID = {"type": "string", "format": "uuid"}
_NULLABLE_UUID = {"type": ["string", "null"], "format": "uuid"}


def obj(properties, required=None, additional=False):
    """An object with exactly ``properties`` (all required by default)."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties if required is None else required),
        "additionalProperties": additional,
    }


def keyed(value, pattern=CLASS_NAME):
    """An object whose keys match ``pattern``, each holding ``value``."""
    return {
        "type": "object",
        "patternProperties": {pattern: value},
        "additionalProperties": False,
    }


def array(items):
    return {"type": "array", "items": items}


LINKS = array(obj({"rel": _STRING, "href": _STRING}))


def error(version):
    """The ``{"errors": [...]}`` body every 4xx/5xx of the app carries."""
    item = {
        "status": _INTEGER,
        "title": _STRING,
        "detail": _STRING,
        "request_id": _STRING,
        "code": _STRING,
        # A 406 for an unsupported microversion names the supported range.
        "max_version": _STRING,
        "min_version": _STRING,
    }
    required = ["status", "title", "detail", "request_id"]
    if version >= versions.ERROR_CODES:
        required.append("code")
    return obj({"errors": {**array(obj(item, required)), "minItems": 1}})


# The 401 of the auth middleware is not the app's error document.
UNAUTHORIZED = obj({"message": _STRING, "code": _STRING, "title": _STRING})

ROOT = obj(
    {
        "versions": array(
            obj(
                {
                    "id": _STRING,
                    "max_version": _STRING,
                    "min_version": _STRING,
                    "status": _STRING,
                    "links": LINKS,
                }
            )
        )
    }
)

RESOURCE_CLASS = obj({"name": _STRING, "links": LINKS})
RESOURCE_CLASSES = obj({"resource_classes": array(RESOURCE_CLASS)})


def provider(version):
    properties = {
        "uuid": _UUID,
        "name": _STRING,
        "generation": _INTEGER,
        "links": LINKS,
    }
    if version >= versions.NESTED_PROVIDERS:
        properties["parent_provider_uuid"] = _NULLABLE_UUID
        properties["root_provider_uuid"] = _UUID
    return obj(properties)


# POST /resource_providers: an empty 201 before 1.20, the provider after.
CREATED_PROVIDER = versions.Table(
    (None, {201: None}), (versions.CREATE_RETURNS_PROVIDER, {200: provider})
)


def providers(version):
    return obj({"resource_providers": array(provider(version))})


INVENTORY_RECORD = obj(
    {
        "total": _INTEGER,
        "reserved": _INTEGER,
        "min_unit": _INTEGER,
        "max_unit": _INTEGER,
        "step_size": _INTEGER,
        "allocation_ratio": {"type": "number"},
    }
)
INVENTORY = obj(
    {**INVENTORY_RECORD["properties"], "resource_provider_generation": _INTEGER}
)
INVENTORIES = obj(
    {"resource_provider_generation": _INTEGER, "inventories": keyed(INVENTORY_RECORD)}
)
AMOUNTS = keyed(_INTEGER)
PROVIDER_USAGES = obj({"resource_provider_generation": _INTEGER, "usages": AMOUNTS})

AGGREGATES = versions.Table(
    (None, obj({"aggregates": array(_UUID)})),
    (
        versions.AGGREGATES_GENERATION,
        obj({"aggregates": array(_UUID), "resource_provider_generation": _INTEGER}),
    ),
)

TRAITS = obj({"traits": array(_STRING)})
PROVIDER_TRAITS = obj(
    {"traits": array(_STRING), "resource_provider_generation": _INTEGER}
)


def provider_allocations(version):
    entry = {"resources": AMOUNTS}
    if version >= versions.CONSUMER_GENERATION:
        entry["consumer_generation"] = {"type": ["integer", "null"]}
    return obj(
        {
            "resource_provider_generation": _INTEGER,
            "allocations": keyed(obj(entry), ".*"),
        }
    )


def consumer_allocations(version):
    """GET /allocations/{c}: the owner fields only when it holds any."""
    owner = {}
    if version >= versions.DICT_ALLOCATIONS:
        owner.update(project_id=_STRING, user_id=_STRING)
    if version >= versions.CONSUMER_GENERATION:
        owner["consumer_generation"] = {"type": ["integer", "null"]}
    if version >= versions.CONSUMER_TYPES:
        owner["consumer_type"] = {"type": ["string", "null"]}
    allocations = keyed(obj({"generation": _INTEGER, "resources": AMOUNTS}), ".*")
    return obj({"allocations": allocations, **owner}, required=["allocations"])


def total_usages(version):
    if version >= versions.CONSUMER_TYPES:
        per_type = keyed(_INTEGER, ".*")
        per_type["required"] = ["consumer_count"]
        return obj({"usages": keyed(per_type, ".*")})
    return obj({"usages": AMOUNTS})


def allocation_candidates(version):
    amounts = AMOUNTS
    if version >= versions.DICT_ALLOCATIONS:
        allocations = keyed(obj({"resources": amounts}), ".*")
    else:
        allocations = array(
            obj({"resource_provider": obj({"uuid": _UUID}), "resources": amounts})
        )
    request = {"allocations": allocations}
    if version >= versions.MAPPINGS:
        request["mappings"] = keyed(array(_UUID), ".*")
    summary = {
        "resources": keyed(obj({"capacity": _INTEGER, "used": _INTEGER})),
    }
    if version >= versions.CANDIDATE_TRAITS:
        summary["traits"] = array(_STRING)
    if version >= versions.NESTED_CANDIDATES:
        summary["parent_provider_uuid"] = _NULLABLE_UUID
        summary["root_provider_uuid"] = _UUID
    return obj(
        {
            "allocation_requests": array(obj(request)),
            "provider_summaries": keyed(obj(summary), ".*"),
        }
    )


_STEP = obj({"filter": _STRING, "providers": _INTEGER, "trees": _INTEGER}, ["filter"])
# The request-wide "groups" step, when no tree has a provider for every
# group, names the group filter that left no tree the others share.
_REQUEST_STEP = obj(
    {
        "filter": _STRING,
        "trees": _INTEGER,
        "emptied_by": obj(
            {
                "group": _STRING,
                "resource_class": _STRING,
                "filter": _STRING,
                "trees": _INTEGER,
            },
            ["group", "filter", "trees"],
        ),
    },
    ["filter"],
)
EXPLAIN = obj(
    {
        "candidates": _INTEGER,
        # Keys are group suffixes: "" for the unsuffixed group.
        "groups": keyed(array(_STEP), "^(|[A-Za-z0-9_-]{1,64})$"),
        "request": array(_REQUEST_STEP),
        "closest": array(
            obj(
                {
                    "provider": _UUID,
                    "tree": _UUID,
                    "name": {"type": ["string", "null"]},
                    "group": _STRING,
                    "resource_class": _STRING,
                    "filter": _STRING,
                    "lacks": {"type": "object"},
                },
                ["filter", "name"],
            )
        ),
        "truncated": {"type": "boolean"},
        "reason": _STRING,
    }
)


CAPACITY = obj(
    {
        "capacity": _INTEGER,
        "roots": array(
            obj(
                {
                    "uuid": _UUID,
                    "name": {"type": ["string", "null"]},
                    "count": _INTEGER,
                    "limited_by": array(_STRING),
                }
            )
        ),
        "aggregates": keyed(_INTEGER, "^[0-9a-fA-F-]{32,36}$"),
        "exact": {"type": "boolean"},
    }
)


# GET /roots: one page of the console's cloud view.
ROOTS = obj(
    {
        "total": _INTEGER,
        "roots": array(
            obj(
                {
                    "uuid": _UUID,
                    "name": _STRING,
                    "providers": _INTEGER,
                    "usage": keyed(obj({"capacity": _INTEGER, "used": _INTEGER})),
                    "traits": array(_STRING),
                    "aggregates": array(_UUID),
                }
            )
        ),
    }
)

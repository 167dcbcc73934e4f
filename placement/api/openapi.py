"""``GET /openapi.json``: an OpenAPI 3.1 document of the API, one per
microversion (``?microversion=1.20``, default the latest).

Nothing here is written per route by hand that the code already knows:
paths, methods and operation ids come from the route table
(``routes.ROUTES``, by the names of its handler functions); whether an
operation exists at the version, and which of a route's per-version
handlers serves it, from the handlers' version gates; query parameters
and request bodies are the very JSON schemas the handlers validate with,
picked for the version. ``OPERATIONS`` only says,
per handler, which of those schemas it reads, which response bodies
(``placement.schemas.responses``) and statuses it answers. A test fails
when a handler of the route table has no entry, and the schemathesis run
checks every live answer against the document.

One document per microversion rather than per-operation version notes:
a body's shape changes with the version, and a document for a version
describes exactly what a client at that version sends and receives. Each
operation requires the ``OpenStack-API-Version`` header with the
document's version.
"""

import dataclasses
import functools
import re
import urllib.parse
from typing import Any
from typing import Callable

import orjson

from placement import versions
from placement.api import middleware
from placement.api import routes
from placement.handlers import aggregate
from placement.handlers import usage
from placement.schemas import allocation as allocation_schema
from placement.schemas import allocation_candidate as candidate_schema
from placement.schemas import audit as audit_schema
from placement.schemas import cloud_view as cloud_view_schema
from placement.schemas import drain as drain_schema
from placement.schemas import inventory as inventory_schema
from placement.schemas import reshaper as reshaper_schema
from placement.schemas import resource_class as resource_class_schema
from placement.schemas import resource_provider as provider_schema
from placement.schemas import responses
from placement.schemas import trait as trait_schema
from placement.web import errors
from placement.web import microversion

OPENAPI_PATH = "/openapi.json"
TOKEN_HEADER = "X-Auth-Token"


def _at(value, version):
    """A schema given as is, or per version (a versions.Table, a function)."""
    return value(version) if callable(value) else value


@dataclasses.dataclass(frozen=True)
class Operation:
    """What one handler reads and answers. Each schema is a dict, or a
    callable taking the Version (a versions.Table of the schemas module)."""

    ok: Any  # {status: body schema, None for no body}, or per version
    query: Any = None
    body: Any = None
    errors: tuple = ()  # statuses beyond the ones every operation has


def _candidates_query(version):
    """The version's query schema with its group names (patterns, each
    with an optional suffix) listed by their unsuffixed name: numbered
    and named groups (resources1, required_NET...) take the same values."""
    query = candidate_schema.QUERY(version)
    properties = dict(query["properties"])
    for pattern, value in query.get("patternProperties", {}).items():
        for name in candidate_schema.GROUP_PARAMS:
            if re.search(pattern, name):
                properties[name] = value
    return dict(query, properties=properties)


def _usages_query(version):
    return usage.USAGES(version)[0]


def _aggregates_body(version):
    return aggregate.FORM(version).schema


def _read(schema, **kw):
    return Operation(ok={200: schema}, **kw)


def _write(schema, body, status=200, errors=(404, 409, 415)):
    return Operation(ok={status: schema}, body=body, errors=errors)


_DELETE = Operation(ok={204: None}, errors=(404, 409))
_CREATED_OR_EXISTS = Operation(ok={201: None, 204: None})
_NOT_FOUND = (404,)

OPERATIONS = {
    "root.home": _read(responses.ROOT),
    "resource_class.list_resource_classes": _read(responses.RESOURCE_CLASSES),
    "resource_class.create_resource_class": _write(
        None, resource_class_schema.RESOURCE_CLASS, 201, (409, 415)
    ),
    "resource_class.get_resource_class": _read(
        responses.RESOURCE_CLASS, errors=_NOT_FOUND
    ),
    "resource_class._rename_resource_class": _write(
        responses.RESOURCE_CLASS, resource_class_schema.RESOURCE_CLASS
    ),
    "resource_class._ensure_resource_class": _CREATED_OR_EXISTS,
    "resource_class.delete_resource_class": _DELETE,
    "resource_provider.list_resource_providers": _read(
        responses.providers, query=provider_schema.LIST_QUERY
    ),
    "resource_provider.create_resource_provider": Operation(
        ok=responses.CREATED_PROVIDER, body=provider_schema.POST, errors=(409, 415)
    ),
    "resource_provider.get_resource_provider": _read(
        responses.provider, errors=_NOT_FOUND
    ),
    "resource_provider.update_resource_provider": _write(
        responses.provider, provider_schema.PUT
    ),
    "resource_provider.delete_resource_provider": _DELETE,
    "inventory.get_inventories": _read(responses.INVENTORIES, errors=_NOT_FOUND),
    "inventory.create_inventory": _write(
        responses.INVENTORY, inventory_schema.POST_INVENTORY, 201
    ),
    "inventory.set_inventories": _write(
        responses.INVENTORIES, inventory_schema.PUT_INVENTORIES
    ),
    "inventory.delete_inventories": _DELETE,
    "inventory.get_inventory": _read(responses.INVENTORY, errors=_NOT_FOUND),
    "inventory.update_inventory": _write(
        responses.INVENTORY, inventory_schema.PUT_INVENTORY
    ),
    "inventory.delete_inventory": _DELETE,
    "usage.list_usages": _read(responses.PROVIDER_USAGES, errors=_NOT_FOUND),
    "aggregate.get_aggregates": _read(responses.AGGREGATES, errors=_NOT_FOUND),
    "aggregate.set_aggregates": _write(responses.AGGREGATES, _aggregates_body),
    "allocation.list_for_resource_provider": _read(
        responses.provider_allocations, errors=_NOT_FOUND
    ),
    "trait.list_traits_for_resource_provider": _read(
        responses.PROVIDER_TRAITS, errors=_NOT_FOUND
    ),
    "trait.update_traits_for_resource_provider": _write(
        responses.PROVIDER_TRAITS, trait_schema.SET_PROVIDER_TRAITS
    ),
    "trait.delete_traits_for_resource_provider": _DELETE,
    "allocation.set_allocations": _write(
        None, allocation_schema.POST_SCHEMA, 204, (409, 415)
    ),
    "allocation.list_for_consumer": _read(responses.consumer_allocations),
    "allocation.set_allocations_for_consumer": _write(
        None, allocation_schema.PUT_SCHEMA, 204, (409, 415)
    ),
    "allocation.delete_allocations": _DELETE,
    "allocation_candidate.list_allocation_candidates": _read(
        responses.allocation_candidates, query=_candidates_query
    ),
    "allocation_candidate_explain.explain": _read(
        responses.EXPLAIN, query=_candidates_query
    ),
    "allocation_candidate_capacity.capacity": _read(
        responses.CAPACITY, query=_candidates_query
    ),
    "trait.list_traits": _read(responses.TRAITS, query=trait_schema.LIST_TRAITS_QUERY),
    "trait.get_trait": Operation(ok={204: None}, errors=_NOT_FOUND),
    "trait.put_trait": _CREATED_OR_EXISTS,
    "trait.delete_trait": _DELETE,
    "usage.get_total_usages": _read(responses.total_usages, query=_usages_query),
    "reshaper.reshape": _write(None, reshaper_schema.RESHAPER_SCHEMA, 204),
    "drain.drain": _read(drain_schema.ANSWER, query=drain_schema.QUERY, errors=(409,)),
    "audit.audit": _read(audit_schema.AUDIT, query=audit_schema.QUERY),
    "cloud_view.list_roots": _read(responses.ROOTS, query=cloud_view_schema.QUERY),
}


def handler_name(fn: Callable[..., Any]) -> str:
    """``module.function`` of a handler under ``placement.handlers``
    (wrappers keep the name of what they wrap)."""
    return "%s.%s" % (fn.__module__.rpartition(".")[2], fn.__name__)


def serving(
    fn: Callable[..., Any], version: versions.Version
) -> Callable[..., Any] | None:
    """The handler that serves ``version`` for the route entry ``fn``
    (one of its per-version variants), or None outside its versions."""
    for variant in getattr(fn, "variants", (fn,)):
        first = getattr(variant, "first", None)
        before = getattr(variant, "before", None)
        if version.within(first, before):
            return variant
    return None


_PATH_PARAM = re.compile(r"{(\w+)}")


def _parameters(path, op, version):
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PATH_PARAM.findall(path)
    ]
    params.append(
        {
            "name": microversion.HEADER,
            "in": "header",
            "required": True,
            "schema": {"type": "string", "enum": ["placement %s" % version]},
        }
    )
    if op.query is not None:
        query = _at(op.query, version)
        for name, schema in query["properties"].items():
            params.append(
                {
                    "name": name,
                    "in": "query",
                    "required": name in query.get("required", ()),
                    "schema": schema,
                }
            )
    return params


_DESCRIPTIONS = {
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad request: malformed or invalid input",
    401: "No valid token",
    403: "Forbidden by policy",
    404: "Not found, or not at this microversion",
    406: "Not acceptable: only application/json is produced",
    409: "Conflict: generation mismatch, in use, or exists",
    415: "Unsupported media type: send application/json",
}
# Bad query/headers (400), no token (401), policy (403), unacceptable
# Accept (406): possible on every operation but the root.
_COMMON_ERRORS = (400, 401, 403, 406)


def _json(schema):
    return {"content": {"application/json": {"schema": schema}}}


def _responses(op, version, public):
    out = {}
    for status, schema in _at(op.ok, version).items():
        out[str(status)] = {"description": _DESCRIPTIONS[status]}
        if schema is not None:
            out[str(status)].update(_json(_at(schema, version)))
    statuses = set(op.errors) | (set() if public else set(_COMMON_ERRORS))
    for status in sorted(statuses):
        schema = responses.UNAUTHORIZED if status == 401 else responses.error(version)
        out[str(status)] = {"description": _DESCRIPTIONS[status], **_json(schema)}
    return out


def _operation(path, method, name, fn, version):
    """The operation ``name`` (``module.function`` of the route's handler)
    served by ``fn`` at ``version``."""
    op = OPERATIONS[handler_name(fn)]
    public = path == "/"
    operation = {
        "operationId": "%s_%s" % (method.lower(), name.replace(".", "_")),
        "tags": [name.partition(".")[0]],
        "parameters": _parameters(path, op, version),
        "responses": _responses(op, version, public),
    }
    if fn.__doc__:
        operation["description"] = fn.__doc__.strip()
    if op.body is not None:
        operation["requestBody"] = {"required": True, **_json(_at(op.body, version))}
    if public:
        operation["security"] = []
    return operation


def document(version: versions.Version) -> dict[str, Any]:
    """The OpenAPI document (a dict) of the API at ``version``."""
    paths = {}
    for path, methods in routes.ROUTES:
        item: dict[str, Any] = {}
        for method, handler in methods:
            fn = serving(handler, version)
            if fn is not None:
                item[method.lower()] = _operation(
                    path, method, handler_name(handler), fn, version
                )
        if item:
            paths[path] = item
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Placement API",
            "version": str(version),
            "description": "The Placement API at microversion %s. Other "
            "microversions: %s?microversion=X.Y (%s to %s)."
            % (
                version,
                OPENAPI_PATH,
                versions.MIN,
                versions.MAX,
            ),
            "x-openstack-microversion": str(version),
        },
        "paths": paths,
        "components": {
            "securitySchemes": {
                "token": {"type": "apiKey", "in": "header", "name": TOKEN_HEADER}
            }
        },
        "security": [{"token": []}],
    }


@functools.lru_cache(maxsize=None)
def document_json(version: versions.Version) -> bytes:
    return orjson.dumps(document(version))


def _requested_version(query_string):
    values = urllib.parse.parse_qs(query_string).get("microversion")
    if not values or values[-1] == "latest":
        return versions.MAX
    try:
        version = versions.Version.parse(values[-1])
    except ValueError:
        raise errors.BadRequest("Invalid microversion: %s" % values[-1])
    if not versions.MIN <= version <= versions.MAX:
        raise errors.BadRequest(
            "Microversion %s is outside %s to %s"
            % (version, versions.MIN, versions.MAX)
        )
    return version


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    """The WSGI app of ``/openapi.json``: it needs no token, like ``/``."""
    try:
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            raise errors.MethodNotAllowed(environ.get("REQUEST_METHOD"), ["GET"])
        status = "200 OK"
        body = document_json(_requested_version(environ.get("QUERY_STRING", "")))
        headers = []
    except errors.PlacementError as error:
        status = "%d %s" % (error.status, error.title)
        body = errors.error_body(error, environ.get(middleware.REQUEST_ID_ENV), None)
        headers = list(error.headers.items())
    headers += [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
    ]
    start_response(status, headers)
    return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else body]

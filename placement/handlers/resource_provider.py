"""/resource_providers and /resource_providers/{uuid}."""

import uuid as uuidlib

import orjson

from placement import exception
from placement import versions
from placement.handlers import query_params
from placement.objects import provider_list
from placement.objects import resource_provider as rp_obj
from placement.schemas import resource_provider as schema
from placement.web import decorators
from placement.web import errors
from placement.web import request

# Links after "self", each with the version that introduced it.
_LINKS = (
    ("inventories", versions.MIN),
    ("usages", versions.MIN),
    ("aggregates", versions.AGGREGATES),
    ("traits", versions.TRAITS),
    ("allocations", versions.ALLOCATIONS_LINK),
)


def _path(uuid):
    return "/resource_providers/%s" % uuid


# Stands for a provider's uuid in the links template; orjson writes it
# as the escape below (the rels never contain it, a mount prefix would not).
_UUID = "\0"
_UUID_JSON = "\\u0000"


def _renderer(req):
    """provider -> body; the per-version parts are worked out once per
    request, not once per provider (lists can hold thousands).

    The links are serialized once with a placeholder uuid and split there;
    each provider's links are those pieces joined with its uuid, included
    as ready-made JSON (orjson.Fragment). Stored uuids are canonical, so
    they need no escaping.
    """
    return _render_with(*_form(req))


def _form(req):
    """What a provider's JSON depends on besides the provider: the pieces
    of its links around its uuid, and whether it shows its tree."""
    version = req.context.version
    base = request.link_href(req, _path(_UUID))
    links = [{"rel": "self", "href": base}]
    links += [
        {"rel": rel, "href": "%s/%s" % (base, rel)}
        for rel, first in _LINKS
        if version >= first
    ]
    pieces = tuple(orjson.dumps(links).decode().split(_UUID_JSON))
    return pieces, version >= versions.NESTED_PROVIDERS


def _render_with(pieces, nested):
    def render(provider):
        body = {
            "uuid": provider["uuid"],
            "name": provider["name"],
            "generation": provider["generation"],
            "links": orjson.Fragment(provider["uuid"].join(pieces)),
        }
        if nested:
            body["parent_provider_uuid"] = provider["parent_provider_uuid"]
            body["root_provider_uuid"] = provider["root_provider_uuid"]
        return body

    return render


# Stands for a provider's generation in its JSON written ahead: orjson
# escapes a NUL in any string, so the only raw one is this.
_GENERATION = orjson.Fragment(b"\0")


def _encoding(req):
    """The unfiltered list's provider_list.Encoding for this request: the
    same JSON as rendering the list."""
    form = _form(req)
    render = _render_with(*form)

    def provider(fields):
        before, after = orjson.dumps(
            render(dict(fields, generation=_GENERATION))
        ).split(b"\0")
        return before, after

    return provider_list.Encoding(form, provider, b'{"resource_providers":[', b"]}")


def _render(req, provider):
    return _renderer(req)(provider)


# Filters one listing may carry (doc/api.md "Errors"): each is a subquery
# of one statement, and PostgreSQL's planning time grows faster than
# their number (400 take minutes).
MAX_FILTERS = 32


@decorators.accepts_json
def list_resource_providers(req, resp):
    ctx = req.context.ctx
    ctx.can("placement:resource_providers:list")
    version = req.context.version
    pairs = request.query_pairs(req)
    request.validate_query(pairs, schema.LIST_QUERY(version))
    filters = request.query_last(pairs)
    count = sum(1 for k, _v in pairs if k in ("member_of", "required"))
    if "resources" in filters:
        filters["resources"] = query_params.parse_resources(filters["resources"])
    if "member_of" in filters:
        filters["member_of"] = query_params.parse_member_of(
            [v for k, v in pairs if k == "member_of"], version
        )
    if "required" in filters:
        filters["required"] = query_params.parse_required(
            [v for k, v in pairs if k == "required"], version
        )
    if not filters:
        listing = provider_list.list_encoded(ctx.db, _encoding(req))
        if listing is not None:
            request.render(resp, listing[0])
            request.set_last_modified(req, resp, listing[1], always=True)
            return
    if count + len(filters.get("resources", ())) > MAX_FILTERS:
        raise errors.BadRequest(
            "Invalid query string parameters: at most %d filters "
            "(member_of and required parameters, classes in resources)" % MAX_FILTERS
        )
    try:
        providers, last_modified = provider_list.list_providers(ctx.db, **filters)
    except exception.ResourceClassNotFound as e:
        raise errors.BadRequest(query_params.UNKNOWN_RESOURCE_CLASS % e.message)
    except exception.TraitNotFound as e:
        raise errors.BadRequest(
            'Invalid trait(s) in "required" parameter: %s' % e.message
        )
    render = _renderer(req)
    request.render(
        resp, {"resource_providers": [render(provider) for provider in providers]}
    )
    request.set_last_modified(req, resp, last_modified, always=True)


@decorators.consumes_json
def create_resource_provider(req, resp):
    ctx = req.context.ctx
    ctx.can("placement:resource_providers:create")
    version = req.context.version
    data = request.json_body(req)
    if isinstance(data, dict) and data.get("uuid") == "":
        del data["uuid"]
    request.validate(data, schema.POST(version))
    # Any UUID-like spelling is stored in the canonical lowercase form.
    uuid = str(uuidlib.UUID(data["uuid"])) if data.get("uuid") else str(uuidlib.uuid4())
    try:
        provider = rp_obj.create(
            ctx.db, uuid, data["name"], data.get("parent_provider_uuid")
        )
    except exception.ObjectActionError as e:
        raise errors.BadRequest(
            'Unable to create resource provider "%s", '
            "%s: %s" % (data["name"], uuid, e.message)
        )
    request.set_location(req, resp, _path(uuid))
    if version < versions.CREATE_RETURNS_PROVIDER:
        request.no_content(resp, 201)
        return
    request.render(resp, _render(req, provider))
    request.set_last_modified(req, resp, None, always=True)


@decorators.accepts_json
def get_resource_provider(req, resp, uuid):
    ctx = req.context.ctx
    ctx.can("placement:resource_providers:show")
    provider = rp_obj.get(ctx.db, uuid)
    request.render(resp, _render(req, provider))
    request.set_last_modified(
        req, resp, request.last_modified_of([provider]), always=True
    )


@decorators.consumes_json
def update_resource_provider(req, resp, uuid):
    ctx = req.context.ctx
    ctx.can("placement:resource_providers:update")
    version = req.context.version
    rp_obj.get(ctx.db, uuid)  # an unknown provider is a 404 before the body
    data = request.json_body(req, schema.PUT(version))
    try:
        provider = rp_obj.update(
            ctx.db,
            uuid,
            data["name"],
            data.get("parent_provider_uuid", rp_obj.UNCHANGED),
            allow_reparenting=version >= versions.REPARENTING,
        )
    except exception.ObjectActionError as e:
        raise errors.BadRequest(
            "Unable to save resource provider %s: %s" % (uuid, e.message)
        )
    request.render(resp, _render(req, provider))
    request.set_last_modified(req, resp, provider["updated_at"], always=True)


def delete_resource_provider(req, resp, uuid):
    ctx = req.context.ctx
    ctx.can("placement:resource_providers:delete")
    try:
        rp_obj.delete(ctx.db, uuid)
    except exception.ResourceProviderNotFound as e:
        raise errors.NotFound(e.message)
    request.no_content(resp)

"""/traits, /traits/{name} and /resource_providers/{uuid}/traits."""

import re

from placement import exception
from placement import versions
from placement.objects import trait as trait_obj
from placement.schemas import trait as schema
from placement.web import decorators
from placement.web import errors
from placement.web import request

_CUSTOM_TRAIT = re.compile(schema.CUSTOM_TRAIT_PATTERN)
_MAX_NAME = schema.CUSTOM_TRAIT["maxLength"]


def _filters(params):
    """Keyword filters for trait_obj.list_traits from GET /traits params."""
    filters = {}
    if "name" in params:
        value = params["name"]
        if ":" not in value:
            raise errors.BadRequest(
                "Badly formatted name parameter. Expected name query string "
                "parameter in form: ?name=[in|startswith]:[name1,name2|prefix]"
                '. Got: "%s"' % value
            )
        operator, arg = value.split(":", 1)
        # Any other operator filters nothing, as upstream does.
        if operator == "in":
            filters["names"] = arg.split(",")
        elif operator == "startswith":
            filters["prefix"] = arg
    if "associated" in params:
        value = params["associated"].lower()
        if value not in ("true", "false"):
            raise errors.BadRequest(
                'The query parameter "associated" only accepts "true" or "false"'
            )
        filters["associated"] = value == "true"
    return filters


def _render_traits(req, resp, rows, **extra):
    request.render(resp, dict(traits=[r["name"] for r in rows], **extra))
    request.set_last_modified(req, resp, request.last_modified_of(rows), always=True)


@decorators.versioned(versions.TRAITS)
@decorators.accepts_json
def list_traits(req, resp):
    req.context.ctx.can("placement:traits:list")
    pairs = request.query_pairs(req)
    request.validate_query(pairs, schema.LIST_TRAITS_QUERY)
    filters = _filters(request.query_last(pairs))
    _render_traits(req, resp, trait_obj.list_traits(req.context.ctx.db, **filters))


def _trait_not_found(e):
    # The trait handlers word their own 404 (so it carries vary).
    return errors.NotFound(e.message)


@decorators.versioned(versions.TRAITS)
def get_trait(req, resp, name):
    req.context.ctx.can("placement:traits:show")
    try:
        trait = trait_obj.get_trait(req.context.ctx.db, name)
    except exception.TraitNotFound as e:
        raise _trait_not_found(e)
    request.no_content(resp)
    request.set_last_modified(req, resp, trait["created_at"], always=True)


@decorators.versioned(versions.TRAITS)
def put_trait(req, resp, name):
    req.context.ctx.can("placement:traits:update")
    if len(name) > _MAX_NAME or not _CUSTOM_TRAIT.fullmatch(name):
        raise errors.BadRequest(
            "The trait is invalid. A valid trait must be no longer than 255 "
            'characters, start with the prefix "CUSTOM_" and use following '
            'characters: "A"-"Z", "0"-"9" and "_"'
        )
    trait, created = trait_obj.ensure_trait(req.context.ctx.db, name)
    request.no_content(resp, 201 if created else 204)
    request.set_location(req, resp, "/traits/%s" % name)
    request.set_last_modified(req, resp, trait["created_at"], always=True)


@decorators.versioned(versions.TRAITS)
def delete_trait(req, resp, name):
    req.context.ctx.can("placement:traits:delete")
    try:
        trait_obj.delete_trait(req.context.ctx.db, name)
    except exception.TraitNotFound as e:
        raise _trait_not_found(e)
    request.no_content(resp)


@decorators.versioned(versions.TRAITS)
@decorators.accepts_json
def list_traits_for_resource_provider(req, resp, uuid):
    req.context.ctx.can("placement:resource_providers:traits:list")
    try:
        generation, rows = trait_obj.get_provider_traits(req.context.ctx.db, uuid)
    except exception.ResourceProviderNotFound as e:
        # Handler-worded 404 (vary), unlike the PUT/DELETE lookups.
        raise errors.NotFound(
            "No resource provider with uuid %s found: %s" % (uuid, e.message)
        )
    _render_traits(req, resp, rows, resource_provider_generation=generation)


@decorators.versioned(versions.TRAITS)
@decorators.consumes_json
def update_traits_for_resource_provider(req, resp, uuid):
    req.context.ctx.can("placement:resource_providers:traits:update")
    body = request.json_body(req, schema.SET_PROVIDER_TRAITS)
    try:
        generation, rows = trait_obj.set_provider_traits(
            req.context.ctx.db,
            uuid,
            body["traits"],
            body["resource_provider_generation"],
        )
    except exception.TraitNotFound as e:
        raise errors.BadRequest("No such trait %s" % ", ".join(e.names))
    _render_traits(req, resp, rows, resource_provider_generation=generation)


@decorators.versioned(versions.TRAITS)
def delete_traits_for_resource_provider(req, resp, uuid):
    req.context.ctx.can("placement:resource_providers:traits:delete")
    trait_obj.delete_provider_traits(req.context.ctx.db, uuid)
    request.no_content(resp)

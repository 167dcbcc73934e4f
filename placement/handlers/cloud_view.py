"""GET /roots: one page of the console's cloud view in one call (the root
providers matching the provider list's filters, by name, each with its
tree's capacity and usage per class, its traits and aggregates; see
doc/console.md)."""

from placement import exception
from placement import versions
from placement.handlers import query_params
from placement.objects import cloud_view
from placement.schemas import cloud_view as schema
from placement.web import decorators
from placement.web import errors
from placement.web import request

PAGE = 50  # roots per page unless ``limit`` says


@decorators.versioned(versions.PROVIDER_TRAITS)
@decorators.accepts_json
def list_roots(req, resp):
    """One page of root providers with their trees' usage."""
    ctx = req.context.ctx
    ctx.can("placement:resource_providers:list")
    version = req.context.version
    pairs = request.query_pairs(req)
    request.validate_query(pairs, schema.QUERY)
    query = request.query_last(pairs)
    member_of = required = resources = None
    if "member_of" in query:
        member_of = query_params.parse_member_of(
            [v for k, v in pairs if k == "member_of"], version
        )
    if "required" in query:
        required = query_params.parse_required(
            [v for k, v in pairs if k == "required"], version
        )
    if "resources" in query:
        resources = query_params.parse_resources(query["resources"])
    limit = int(query.get("limit", PAGE))
    try:
        found = cloud_view.page(
            ctx.db,
            query.get("name"),
            member_of,
            resources,
            required,
            int(query.get("page", 0)) * limit,
            limit,
        )
    except exception.ResourceClassNotFound as e:
        raise errors.BadRequest(query_params.UNKNOWN_RESOURCE_CLASS % e.message)
    except exception.TraitNotFound as e:
        raise errors.BadRequest(
            'Invalid trait(s) in "required" parameter: %s' % e.message
        )
    request.render(resp, found.as_dict())
    request.set_last_modified(req, resp, None, always=True)

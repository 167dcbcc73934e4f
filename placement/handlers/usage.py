"""GET /resource_providers/{uuid}/usages and GET /usages (doc/api.md "Usages")."""

from placement import exception
from placement import versions
from placement.objects import usage as usage_obj
from placement.schemas import usage as schema
from placement.web import decorators
from placement.web import errors
from placement.web import request


@decorators.accepts_json
def list_usages(req, resp, uuid):
    req.context.ctx.can("placement:resource_providers:usages")
    try:
        generation, usages = usage_obj.provider_usages(req.context.ctx.db, uuid)
    except exception.ResourceProviderNotFound as e:
        raise errors.NotFound(
            "No resource provider with uuid %s found: %s" % (uuid, e.message)
        )
    request.render(resp, {"resource_provider_generation": generation, "usages": usages})
    request.set_last_modified(req, resp, None, always=True)


def _totals(db, query):
    return usage_obj.total_usages(db, query["project_id"], query.get("user_id"))


def _by_type(db, query):
    return usage_obj.usages_by_type(
        db, query["project_id"], query.get("user_id"), query.get("consumer_type")
    )


USAGES = versions.Table(
    (None, (schema.QUERY_V1_9, _totals)),
    (versions.CONSUMER_TYPES, (schema.QUERY_V1_38, _by_type)),
)


@decorators.versioned(versions.USAGES)
@decorators.accepts_json
def get_total_usages(req, resp):
    pairs = request.query_pairs(req)
    query = request.query_last(pairs)
    # The policy sees the project asked for (a reader may ask for its own).
    req.context.ctx.can("placement:usages", {"project_id": query.get("project_id")})
    query_schema, usages = USAGES(req.context.version)
    request.validate_query(pairs, query_schema)
    request.render(resp, {"usages": usages(req.context.ctx.db, query)})
    request.set_last_modified(req, resp, None, always=True)

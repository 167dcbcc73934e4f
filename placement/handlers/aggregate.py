"""/resource_providers/{uuid}/aggregates: a bare list before 1.19, with the
provider generation (checked and moved on PUT) from 1.19."""

from placement import versions
from placement.objects import aggregate as aggregate_obj
from placement.objects import resource_provider as rp_obj
from placement.schemas import aggregate as schema
from placement.web import decorators
from placement.web import request


class _BareList:
    schema = schema.AGGREGATES

    @staticmethod
    def parse(data):
        return data, None

    @staticmethod
    def body(aggregates, generation):
        return {"aggregates": aggregates}


class _WithGeneration:
    schema = schema.AGGREGATES_WITH_GENERATION

    @staticmethod
    def parse(data):
        return data["aggregates"], data["resource_provider_generation"]

    @staticmethod
    def body(aggregates, generation):
        return {"aggregates": aggregates, "resource_provider_generation": generation}


FORM = versions.Table(
    (None, _BareList), (versions.AGGREGATES_GENERATION, _WithGeneration)
)


def _render(req, resp, aggregates, generation):
    request.render(resp, FORM(req.context.version).body(aggregates, generation))
    request.set_last_modified(req, resp, None, always=True)


@decorators.accepts_json
@decorators.versioned(versions.AGGREGATES)
def get_aggregates(req, resp, uuid):
    req.context.ctx.can("placement:resource_providers:aggregates:list")
    generation, aggregates = aggregate_obj.get_provider_aggregates(
        req.context.ctx.db, uuid
    )
    _render(req, resp, aggregates, generation)


@decorators.consumes_json
@decorators.versioned(versions.AGGREGATES)
def set_aggregates(req, resp, uuid):
    req.context.ctx.can("placement:resource_providers:aggregates:update")
    form = FORM(req.context.version)
    db = req.context.ctx.db
    # A missing provider is a 404 whatever the body (an accepted body
    # meets it in the write).
    aggregates, expected = form.parse(
        request.json_body(req, form.schema, refused=lambda: rp_obj.get(db, uuid))
    )
    generation = aggregate_obj.set_provider_aggregates(db, uuid, aggregates, expected)
    _render(req, resp, aggregates, generation)

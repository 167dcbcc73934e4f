"""/allocations/{consumer_uuid}, POST /allocations and
/resource_providers/{uuid}/allocations (doc/api.md "Allocations")."""

import uuid as uuidlib

from oslo_utils import uuidutils

from placement import exception
from placement import versions
from placement.handlers import consumer_body
from placement.objects import allocation as allocation_obj
from placement.objects import allocation_reads
from placement.schemas import allocation as schema
from placement.web import decorators
from placement.web import errors
from placement.web import request

# Keys GET /allocations/{c} adds beside "allocations", by microversion.
CONSUMER_FIELDS = versions.Table(
    (None, ()),
    (versions.DICT_ALLOCATIONS, ("project_id", "user_id")),
    (
        versions.CONSUMER_GENERATION,
        ("project_id", "user_id", "consumer_generation"),
    ),
    (
        versions.CONSUMER_TYPES,
        ("project_id", "user_id", "consumer_generation", "consumer_type"),
    ),
)


@decorators.accepts_json
def list_for_consumer(req, resp, consumer_uuid):
    req.context.ctx.can("placement:allocations:list")
    found = allocation_reads.for_consumer(req.context.ctx.db, consumer_uuid)
    body = {"allocations": found.allocations}
    if found.allocations:
        values = {
            "project_id": found.project_id,
            "user_id": found.user_id,
            "consumer_generation": found.generation,
            "consumer_type": found.consumer_type,
        }
        body.update((key, values[key]) for key in CONSUMER_FIELDS(req.context.version))
    request.render(resp, body)
    request.set_last_modified(req, resp, found.modified, always=True)


@decorators.accepts_json
def list_for_resource_provider(req, resp, uuid):
    req.context.ctx.can("placement:resource_providers:allocations:list")
    try:
        found = allocation_reads.for_provider(req.context.ctx.db, uuid)
    except exception.ResourceProviderNotFound as e:
        raise errors.NotFound(
            "Resource provider '%s' not found: %s" % (uuid, e.message)
        )
    allocations = found.allocations
    if req.context.version < versions.CONSUMER_GENERATION:
        allocations = {
            consumer: {"resources": entry["resources"]}
            for consumer, entry in allocations.items()
        }
    request.render(
        resp,
        {"resource_provider_generation": found.generation, "allocations": allocations},
    )
    request.set_last_modified(req, resp, found.modified, always=True)


def write(req, writes, unknown_class_prefix):
    """Replace the allocations of ``writes``; an unknown resource class is a
    400 worded per endpoint."""
    try:
        allocation_obj.replace_allocations(
            req.context.ctx.db,
            writes,
            check_generation=req.context.version >= versions.CONSUMER_GENERATION,
        )
    except exception.ResourceClassNotFound as e:
        raise errors.BadRequest(unknown_class_prefix + e.message)


@decorators.consumes_json
def set_allocations_for_consumer(req, resp, consumer_uuid):
    req.context.ctx.can("placement:allocations:update")
    if not uuidutils.is_uuid_like(consumer_uuid):
        raise errors.BadRequest("Malformed consumer_uuid: %s" % consumer_uuid)
    consumer_uuid = str(uuidlib.UUID(consumer_uuid))
    version = req.context.version
    conf = req.context.ctx.db.conf
    data = request.json_body(req, schema.PUT_SCHEMA(version))
    write(
        req,
        [consumer_body.consumer_write(conf, consumer_uuid, data, version)],
        "Unable to allocate inventory for consumer %s: " % consumer_uuid,
    )
    request.no_content(resp)


@decorators.versioned(versions.POST_ALLOCATIONS)
@decorators.consumes_json
def set_allocations(req, resp):
    req.context.ctx.can("placement:allocations:manage")
    version = req.context.version
    conf = req.context.ctx.db.conf
    data = request.json_body(req, schema.POST_SCHEMA(version))
    writes = [
        consumer_body.consumer_write(conf, c, entry, version)
        for c, entry in data.items()
    ]
    write(req, writes, "Unable to allocate inventory ")
    request.no_content(resp)


def delete_allocations(req, resp, consumer_uuid):
    req.context.ctx.can("placement:allocations:delete")
    try:
        allocation_obj.delete_consumer_allocations(req.context.ctx.db, consumer_uuid)
    except exception.ConsumerNotFound as e:
        raise errors.NotFound(e.message)
    request.no_content(resp)

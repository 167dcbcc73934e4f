"""/resource_providers/{uuid}/inventories[/{resource_class}]."""

from placement import error_codes
from placement import exception
from placement import versions
from placement.objects import inventory as inv_obj
from placement.objects import resource_provider as rp_obj
from placement.schemas import inventory as schema
from placement.web import decorators
from placement.web import errors
from placement.web import request


def _path(uuid, rc_name):
    return "/resource_providers/%s/inventories/%s" % (uuid, rc_name)


def _check_capacity(req, uuid, records, prefix):
    try:
        inv_obj.check_capacity(
            uuid, records, req.context.version >= versions.RESERVED_EQUALS_TOTAL
        )
    except exception.BadRequest as e:
        raise errors.BadRequest("%s %s: %s" % (prefix, uuid, e.message))


def _provider_not_found(error):
    """The GET routes word a missing provider twice, as their own 404."""
    return errors.NotFound("%s : %s" % (error.message, error.message))


def _echoed(record, sent):
    """A write's answer: the values sent, defaults filled in, as the
    contract has it (not a re-read: a "total": 4.0 answers 4.0, a ratio
    answers as sent although it is stored as a float32 would hold it)."""
    if "allocation_ratio" in sent:
        return dict(record, allocation_ratio=sent["allocation_ratio"])
    return record


def _render_one(resp, record, generation, status=200):
    request.render(resp, dict(record, resource_provider_generation=generation), status)


@decorators.accepts_json
def get_inventories(req, resp, uuid):
    ctx = req.context.ctx
    ctx.can("placement:resource_providers:inventories:list")
    try:
        generation, rows = inv_obj.get_inventories(ctx.db, uuid)
    except exception.ResourceProviderNotFound as e:
        raise _provider_not_found(e)
    request.render(
        resp,
        {
            "resource_provider_generation": generation,
            "inventories": {
                row["resource_class"]: inv_obj.stored_record(row) for row in rows
            },
        },
    )
    request.set_last_modified(req, resp, request.last_modified_of(rows))


@decorators.accepts_json
def get_inventory(req, resp, uuid, resource_class):
    ctx = req.context.ctx
    ctx.can("placement:resource_providers:inventories:show")
    try:
        generation, row = inv_obj.get_inventory(ctx.db, uuid, resource_class)
    except exception.ResourceProviderNotFound as e:
        raise _provider_not_found(e)
    except inv_obj.InventoryNotFound as e:
        raise errors.NotFound(e.message)
    _render_one(resp, inv_obj.stored_record(row), generation)
    request.set_last_modified(req, resp, request.last_modified_of([row]))


@decorators.consumes_json
def create_inventory(req, resp, uuid):
    ctx = req.context.ctx
    ctx.can("placement:resource_providers:inventories:create")
    rp_obj.get(ctx.db, uuid)
    data = request.json_body(req, schema.POST_INVENTORY)
    rc_name = data["resource_class"]
    record = inv_obj.with_defaults(data)
    prefix = "Unable to create inventory for resource provider"
    _check_capacity(req, uuid, {rc_name: record}, prefix)
    try:
        generation = inv_obj.create_inventory(ctx.db, uuid, rc_name, record)
    except exception.ResourceClassNotFound as e:
        raise errors.BadRequest("%s %s: %s" % (prefix, uuid, e.message))
    request.set_location(req, resp, _path(uuid, rc_name))
    _render_one(resp, _echoed(record, data), generation, status=201)
    request.set_last_modified(req, resp, None, always=True)


@decorators.consumes_json
def set_inventories(req, resp, uuid):
    ctx = req.context.ctx
    ctx.can("placement:resource_providers:inventories:update")
    # A missing provider is a 404 whatever the body, and a stale generation
    # a 409 before a refused capacity. The provider is looked up on its own
    # only for a refused body or capacity: otherwise the write's own lookup
    # makes both checks, in that order.
    data = request.json_body(
        req, schema.PUT_INVENTORIES, refused=lambda: rp_obj.get(ctx.db, uuid)
    )
    records = {
        name: inv_obj.with_defaults(record)
        for name, record in data["inventories"].items()
    }
    try:
        _check_capacity(
            req, uuid, records, "Unable to update inventory for resource provider"
        )
    except errors.BadRequest:
        provider = rp_obj.get(ctx.db, uuid)
        inv_obj.check_generation(provider, data["resource_provider_generation"])
        raise
    try:
        generation = inv_obj.replace_inventories(
            ctx.db, uuid, data["resource_provider_generation"], records
        )
    except exception.ResourceClassNotFound as e:
        raise errors.BadRequest(
            "Unknown resource class in inventory for resource provider "
            "%s: %s" % (uuid, e.message)
        )
    request.render(
        resp,
        {
            "resource_provider_generation": generation,
            "inventories": {
                name: _echoed(record, data["inventories"][name])
                for name, record in records.items()
            },
        },
    )
    request.set_last_modified(req, resp, None, always=True)


@decorators.consumes_json
def update_inventory(req, resp, uuid, resource_class):
    ctx = req.context.ctx
    ctx.can("placement:resource_providers:inventories:update")
    provider = rp_obj.get(ctx.db, uuid)
    data = request.json_body(req, schema.PUT_INVENTORY)
    inv_obj.check_generation(provider, data["resource_provider_generation"])
    record = inv_obj.with_defaults(data)
    _check_capacity(
        req,
        uuid,
        {resource_class: record},
        "Unable to update inventory for resource provider",
    )
    try:
        generation = inv_obj.update_inventory(
            ctx.db, uuid, data["resource_provider_generation"], resource_class, record
        )
    except inv_obj.InventoryNotFound as e:
        raise errors.BadRequest(
            "No inventory record with resource class for resource provider "
            "%s: %s" % (uuid, e.message)
        )
    _render_one(resp, _echoed(record, data), generation)
    request.set_last_modified(req, resp, None, always=True)


def delete_inventory(req, resp, uuid, resource_class):
    ctx = req.context.ctx
    ctx.can("placement:resource_providers:inventories:delete")
    try:
        inv_obj.delete_inventory(ctx.db, uuid, resource_class)
    except (exception.ResourceClassNotFound, inv_obj.InventoryNotFound) as e:
        raise errors.NotFound(
            "No inventory of class %s found for delete: %s"
            % (resource_class, e.message)
        )
    except exception.Conflict as e:
        # Upstream quirk: "in use" here carries the concurrent-update code.
        raise errors.Conflict(
            "Unable to delete inventory of class %s: %s" % (resource_class, e.message),
            code=error_codes.CONCURRENT_UPDATE,
        )
    request.no_content(resp)


@decorators.versioned(versions.DELETE_INVENTORIES, method_not_allowed=True)
def delete_inventories(req, resp, uuid):
    ctx = req.context.ctx
    ctx.can("placement:resource_providers:inventories:delete")
    inv_obj.delete_inventories(ctx.db, uuid)
    request.no_content(resp)

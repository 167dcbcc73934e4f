"""/resource_classes and /resource_classes/{name} (v1.2+)."""

from placement import exception
from placement import versions
from placement.objects import resource_class as rc_obj
from placement.schemas import resource_class as schema
from placement.web import decorators
from placement.web import errors
from placement.web import request


def _path(name):
    return "/resource_classes/%s" % name


def _render_class(req, name):
    return {
        "name": name,
        "links": [{"rel": "self", "href": request.link_href(req, _path(name))}],
    }


@decorators.versioned(versions.RESOURCE_CLASSES)
@decorators.accepts_json
def list_resource_classes(req, resp):
    ctx = req.context.ctx
    ctx.can("placement:resource_classes:list")
    rows = rc_obj.list_all(ctx.db)
    request.render(
        resp, {"resource_classes": [_render_class(req, row["name"]) for row in rows]}
    )
    request.set_last_modified(req, resp, request.last_modified_of(rows))


@decorators.versioned(versions.RESOURCE_CLASSES)
@decorators.consumes_json
def create_resource_class(req, resp):
    ctx = req.context.ctx
    ctx.can("placement:resource_classes:create")
    name = request.json_body(req, schema.RESOURCE_CLASS)["name"]
    try:
        rc_obj.create(ctx.db, name)
    except exception.Exists:
        raise errors.Conflict("Conflicting resource class already exists: %s" % name)
    request.set_location(req, resp, _path(name))
    request.no_content(resp, 201)


@decorators.versioned(versions.RESOURCE_CLASSES)
@decorators.accepts_json
def get_resource_class(req, resp, name):
    ctx = req.context.ctx
    ctx.can("placement:resource_classes:show")
    row = rc_obj.get(ctx.db, name)
    request.render(resp, _render_class(req, row["name"]))
    request.set_last_modified(req, resp, request.last_modified_of([row]), always=True)


@decorators.versioned(versions.RESOURCE_CLASSES, versions.ENSURE_RESOURCE_CLASS)
@decorators.consumes_json
def _rename_resource_class(req, resp, name):
    ctx = req.context.ctx
    ctx.can("placement:resource_classes:update")
    new_name = request.json_body(req, schema.RESOURCE_CLASS)["name"]
    row = rc_obj.rename(ctx.db, name, new_name)
    request.render(resp, _render_class(req, row["name"]))


@decorators.versioned(versions.ENSURE_RESOURCE_CLASS)
def _ensure_resource_class(req, resp, name):
    """Body-less create-or-check: 201 when created, 204 when it existed."""
    ctx = req.context.ctx
    ctx.can("placement:resource_classes:update")
    request.validate({"name": name}, schema.RESOURCE_CLASS)
    status = 204
    if not rc_obj.exists(ctx.db, name):
        try:
            rc_obj.create(ctx.db, name)
            status = 201
        except exception.Exists:
            pass  # created concurrently: it exists, which is all we promise
    request.set_location(req, resp, _path(name))
    request.no_content(resp, status)


@decorators.by_version(_rename_resource_class, _ensure_resource_class)
def update_resource_class(req, resp, name):
    """PUT /resource_classes/{name}: a rename before 1.7, then a body-less
    create-or-check."""


@decorators.versioned(versions.RESOURCE_CLASSES)
def delete_resource_class(req, resp, name):
    ctx = req.context.ctx
    ctx.can("placement:resource_classes:delete")
    try:
        rc_obj.delete(ctx.db, name)
    except exception.BadRequest as e:
        raise errors.BadRequest("Error in delete resource class: %s" % e.message)
    except exception.ResourceClassInUse as e:
        raise errors.Conflict("Error in delete resource class: %s" % e.message)
    request.no_content(resp)

"""POST /reshaper (doc/api.md "Reshaper")."""

from placement import exception
from placement import versions
from placement.handlers import consumer_body
from placement.objects import reshaper as reshaper_obj
from placement.schemas import reshaper as schema
from placement.web import decorators
from placement.web import errors
from placement.web import request


@decorators.versioned(versions.RESHAPER)
@decorators.consumes_json
def reshape(req, resp):
    req.context.ctx.can("placement:reshaper:reshape")
    version = req.context.version
    data = request.json_body(req, schema.RESHAPER_SCHEMA(version))
    inventories = {
        rp: (entry["resource_provider_generation"], entry["inventories"])
        for rp, entry in data["inventories"].items()
    }
    db = req.context.ctx.db
    writes = [
        consumer_body.consumer_write(db.conf, c, entry, version)
        for c, entry in data["allocations"].items()
    ]
    try:
        reshaper_obj.reshape(db, inventories, writes)
    except exception.ResourceClassNotFound as e:
        raise errors.BadRequest("malformed reshaper data: " + e.message)
    request.no_content(resp)

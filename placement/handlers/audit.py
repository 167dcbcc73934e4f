"""GET /maintenance/audit: the data audit, read-only (doc/audit.md)."""

from placement.objects import audit as audit_obj
from placement.schemas import audit as schema
from placement.web import decorators
from placement.web import errors
from placement.web import request


@decorators.accepts_json
def audit(req, resp):
    """What in the database is wrong: per kind of check, its severity
    (error or info), what to do about it, and the rows it found
    (``kind=a,b`` runs only those checks)."""
    req.context.ctx.can("placement:maintenance:audit")
    pairs = request.query_pairs(req)
    request.validate_query(pairs, schema.QUERY)
    kind = request.query_last(pairs).get("kind")
    kinds = kind.split(",") if kind else audit_obj.KINDS
    unknown = sorted(set(kinds) - set(audit_obj.KINDS))
    if unknown:
        raise errors.BadRequest(
            "Invalid query string parameters: unknown kind %s; the kinds are %s"
            % (", ".join(unknown), ", ".join(audit_obj.KINDS))
        )
    request.render(resp, audit_obj.run(req.context.ctx.db, kinds))

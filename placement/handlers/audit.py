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
    (``kind=a,b`` runs only those checks; ``in_tree=uuid,...`` limits the
    per-provider checks to those providers' trees)."""
    req.context.ctx.can("placement:maintenance:audit")
    pairs = request.query_pairs(req)
    request.validate_query(pairs, schema.QUERY)
    query = request.query_last(pairs)
    kind = query.get("kind")
    trees = query.get("in_tree")
    kinds = kind.split(",") if kind else audit_obj.KINDS
    unknown = sorted(set(kinds) - set(audit_obj.KINDS))
    if unknown:
        raise errors.BadRequest(
            "Invalid query string parameters: unknown kind %s; the kinds are %s"
            % (", ".join(unknown), ", ".join(audit_obj.KINDS))
        )
    in_tree = None
    if trees is not None:
        if not kind or set(kinds) - set(audit_obj.TREE_KINDS):
            raise errors.BadRequest(
                "Invalid query string parameters: in_tree applies to the kinds"
                " %s only; name them with kind" % ", ".join(audit_obj.TREE_KINDS)
            )
        in_tree = set(trees.split(","))
        if len(in_tree) > audit_obj.IN_TREE:
            raise errors.BadRequest(
                "Invalid query string parameters: in_tree names more than %d"
                " providers" % audit_obj.IN_TREE
            )
    request.render(
        resp,
        audit_obj.run(
            req.context.ctx.db, kinds, limit=audit_obj.ITEMS, in_tree=in_tree
        ),
    )

"""GET /maintenance/drain: where every consumer of some trees would go if
they were emptied, and why the ones that fit nowhere do not
(doc/drain.md). Read-only; admin only (placement:maintenance:drain)."""

from placement import error_codes
from placement import exception
from placement import versions
from placement.handlers import query_params
from placement.objects import drain as drain_obj
from placement.schemas import drain as schema
from placement.web import decorators
from placement.web import errors
from placement.web import request


def asked_of(pairs):
    """A ``drain.Asked`` from the query's (name, value) pairs; 400 for
    what the schema and the grammar refuse."""
    request.validate_query(pairs, schema.QUERY, every=schema.REPEATED)
    names = [name for name, _ in pairs if name not in schema.REPEATED]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise errors.BadRequest(
            "Query parameter '%s' may be specified only once." % twice[0],
            code=error_codes.QUERY_DUPLICATE_KEY,
        )
    last = request.query_last(pairs)
    chosen = [name for name in schema.SELECTORS if name in last]
    if len(chosen) != 1:
        raise errors.BadRequest(
            "Name the trees to drain with exactly one of providers, in_tree "
            "or member_of; got %s." % (", ".join(chosen) or "none"),
            code=error_codes.QUERY_BAD_VALUE,
        )
    required = [v for n, v in pairs if n == "required"]
    targets = [v for n, v in pairs if n == "target_member_of"]
    return drain_obj.Asked(
        providers=tuple(last["providers"].split(",")) if "providers" in last else (),
        in_tree=last.get("in_tree"),
        member_of=last.get("member_of"),
        strategy=last.get("strategy", "first"),
        required=query_params.parse_required(required, versions.MAX)
        if required
        else None,
        target_member_of=query_params.parse_member_of(
            targets, versions.MAX, "target_member_of"
        )
        if targets
        else None,
    )


def plan(db, pairs):
    """The plan of the query ``pairs`` (the command line's too)."""
    asked = asked_of(pairs)
    try:
        return drain_obj.plan(db, asked)
    except exception.TraitNotFound as e:
        raise errors.BadRequest(e.message)


@decorators.accepts_json
def drain(req, resp):
    """A drain plan: for each consumer holding allocations in the named
    trees, the tree it would move to and its whole allocation there, or
    why it fits nowhere; totals and the capacity left."""
    ctx = req.context.ctx
    ctx.can("placement:maintenance:drain")
    request.render(resp, plan(ctx.db, request.query_pairs(req)))

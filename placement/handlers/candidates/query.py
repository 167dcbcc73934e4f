"""The query of GET /allocation_candidates, shared by that route and by
/allocation_candidates/explain and /capacity: policy, parse and check the
query (same grammar, microversions and errors), then run a search with this
service's engine options (doc/api.md "Allocation candidates")."""

import collections
import sys

from oslo_utils import uuidutils

from placement import error_codes
from placement import exception
from placement import versions
from placement.handlers import query_params
from placement.objects import allocation_candidates as engine
from placement.objects.allocation_candidates import request as ac_request
from placement.schemas import allocation_candidate as schema
from placement.web import errors
from placement.web import request


def run(req, search):
    """Policy, parse and check the query, then ``search(db, request,
    options)`` with the engine options of the database's configuration;
    the contract's 400s for unknown names."""
    ctx = req.context.ctx
    ctx.can("placement:allocation_candidates:list")
    return run_query(ctx.db, request.query_pairs(req), req.context.version, search)


def run_query(db, pairs, version, search):
    """``run`` without a request: the query's (name, value) ``pairs`` at
    ``version``, checked as a request's are (the capacity gauges too)."""
    request.validate_query(pairs, schema.QUERY(version), every=schema.FIRST_WINS)
    parsed = parse_query(pairs, version)
    check_structure(parsed, version)
    options = db.conf.placement
    try:
        return search(
            db,
            parsed,
            engine.Options(
                nested_aware=version >= versions.NESTED_CANDIDATES,
                strategy=options.allocation_candidates_generation_strategy,
                max_candidates=options.max_allocation_candidates,
                randomize=options.randomize_allocation_candidates,
                max_answer=options.max_answer_candidates,
                order=options.allocation_candidates_order,
                order_age=options.allocation_candidates_order_age,
            ),
        )
    except exception.ResourceClassNotFound as e:
        raise errors.BadRequest(query_params.UNKNOWN_RESOURCE_CLASS % e.message)
    except exception.TraitNotFound as e:
        raise errors.BadRequest(e.message)


def check_structure(parsed, version):
    """The structural rules of the query at ``version``."""
    ac_request.check_structure(
        parsed,
        resourceless_groups=version >= versions.SAME_SUBTREE,
        trait_conflicts=version >= versions.FORBIDDEN_TRAITS,
    )


def parse_query(pairs, version):
    """A ``request.Request`` from (already schema-checked) query pairs."""
    values = collections.defaultdict(list)
    for name, value in pairs:
        values[name].append(value)
    root_required, root_forbidden = _root_required(values.get("root_required"))
    return ac_request.Request(
        # A limit past any possible count is no limit (and must not reach
        # islice, which refuses values above sys.maxsize).
        limit=(
            min(int(values["limit"][0]), sys.maxsize) if "limit" in values else None
        ),
        group_policy=values["group_policy"][0] if "group_policy" in values else None,
        root_required=root_required,
        root_forbidden=root_forbidden,
        same_subtree=tuple(_same_subtree(v) for v in values.get("same_subtree", ())),
        groups=_groups(values, version),
    )


def _root_required(values):
    if not values:
        return frozenset(), frozenset()
    if len(values) > 1:
        raise errors.BadRequest(
            "Query parameter 'root_required' may be specified only once.",
            code=error_codes.QUERY_DUPLICATE_KEY,
        )
    traits = query_params.parse_required(
        values, versions.ROOT_REQUIRED_GRAMMAR, "root_required"
    )
    required = frozenset().union(*traits.any_of)
    conflicts = required & traits.forbidden
    if conflicts:
        raise errors.BadRequest(
            "Conflicting required and forbidden traits found in "
            "root_required: %s" % ", ".join(sorted(conflicts)),
            code=error_codes.QUERY_BAD_VALUE,
        )
    return required, traits.forbidden


def _same_subtree(value):
    suffixes = tuple(item.strip() for item in value.split(","))
    if not all(suffixes):
        raise errors.BadRequest(
            "Empty string (unsuffixed group) can not be specified in `same_subtree` ",
            code=error_codes.QUERY_BAD_VALUE,
        )
    return suffixes


def _groups(values, version):
    """Groups by suffix, each key's values parsed in query-string order."""
    fields = collections.defaultdict(dict)
    for name, occurrences in values.items():  # dict keeps query order
        parts = schema.split_group_name(name)
        if parts is None:
            continue
        param, suffix = parts
        fields[suffix][param] = _parse_group_value(param, name, occurrences, version)
    return tuple(
        ac_request.RequestGroup(
            suffix=suffix,
            resources=tuple(f.get("resources", {}).items()),
            required=f.get("required"),
            member_of=f.get("member_of"),
            in_tree=f.get("in_tree"),
        )
        for suffix, f in fields.items()
    )


def _parse_group_value(param, name, occurrences, version):
    if param == "resources":
        return query_params.parse_resources(occurrences[-1])
    if param == "required":
        return query_params.parse_required(occurrences, version, name)
    if param == "member_of":
        return query_params.parse_member_of(occurrences, version, name)
    tree = occurrences[-1].strip()
    if not uuidutils.is_uuid_like(tree):
        raise errors.BadRequest(
            "Invalid query string parameters: Expected 'in_tree' parameter "
            "to be a format of uuid. Got: %s" % tree
        )
    return tree

"""GET /allocation_candidates/capacity: the query of GET
/allocation_candidates (same grammar, microversions, errors and policy;
``limit`` ignored) answered with how many more instances of it fit, per
root provider, per aggregate and in total (see doc/capacity.md)."""

from placement import versions
from placement.handlers.candidates import query as candidate_query
from placement.objects import capacity as capacity_obj
from placement.web import decorators
from placement.web import request


@decorators.versioned(versions.ALLOCATION_CANDIDATES)
@decorators.accepts_json
def capacity(req, resp):
    """How many more instances of the query of GET /allocation_candidates
    fit: in total, per root provider and per aggregate."""
    found = candidate_query.run(req, capacity_obj.compute)
    request.render(resp, found.as_json(request.dumps))
    request.set_last_modified(req, resp, None, always=True)

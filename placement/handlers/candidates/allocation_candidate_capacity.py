"""GET /allocation_candidates/capacity: the query of GET
/allocation_candidates (same grammar, microversions, errors and policy;
``limit`` ignored) answered with how many more instances of it fit, per
root provider, per aggregate and in total (see doc/capacity.md)."""

import logging

from placement import versions
from placement.handlers.candidates import query as candidate_query
from placement.objects import capacity as capacity_obj
from placement.web import decorators
from placement.web import request

LOG = logging.getLogger(__name__)


@decorators.versioned(versions.ALLOCATION_CANDIDATES)
@decorators.accepts_json
def capacity(req, resp):
    """How many more instances of the query of GET /allocation_candidates
    fit: in total, per root provider and per aggregate."""
    found = candidate_query.run(req, capacity_obj.compute)
    request.render(resp, found.as_json(request.dumps))
    request.set_last_modified(req, resp, None, always=True)


# A flavor's first class on any compute host.
WARM_QUERY = [("resources", "VCPU:1")]


def warm(db):
    """Answer one capacity query in this worker before it takes requests:
    its first answer paid 20-50 ms more CPU than the next at 100,000
    hosts (the answer's ten megabytes of new buffers faulted in, the
    catalog's shared columns mapped, the query schema's patterns
    compiled), so a worker's first capacity request took 2-3 times the
    others (issue 44). Never fails: the first request does it then."""
    try:
        candidate_query.run_query(
            db, WARM_QUERY, versions.MAX, capacity_obj.compute
        ).as_json(request.dumps)
    except Exception as e:
        LOG.debug("capacity not warmed (%s)", type(e).__name__)

"""GET /allocation_candidates/explain: the query of GET
/allocation_candidates (same grammar, microversions, errors and policy)
answered with why it finds what it finds (see doc/explain.md)."""

from placement import versions
from placement.handlers.candidates import query as candidate_query
from placement.objects.allocation_candidates import explain as explain_obj
from placement.web import decorators
from placement.web import request


@decorators.versioned(versions.ALLOCATION_CANDIDATES)
@decorators.accepts_json
def explain(req, resp):
    """Why the query of GET /allocation_candidates finds what it finds:
    the candidate count, per-filter counts and the closest misses."""
    request.render(resp, candidate_query.run(req, explain_obj.explain))
    request.set_last_modified(req, resp, None, always=True)

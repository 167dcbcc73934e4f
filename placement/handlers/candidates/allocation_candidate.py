"""GET /allocation_candidates: parse the query into a Request, run the
engine (or take the body another worker of this host rendered for the
same question at the same state: ``shared``), render for the
microversion (doc/api.md "Allocation candidates")."""

from placement import events
from placement import versions
from placement.handlers.candidates import query as candidate_query
from placement.handlers.candidates import render
from placement.handlers.candidates import shared
from placement.objects import allocation_candidates as engine
from placement.web import decorators
from placement.web import request


@decorators.versioned(versions.ALLOCATION_CANDIDATES)
@decorators.accepts_json
def list_allocation_candidates(req, resp):
    # The body another worker of this host rendered, when this request's
    # look finds the state it was made at (handlers/candidates/shared).
    question = shared.Question(req)
    found = candidate_query.run(req, question.search)
    form = document_form(req.context.version)
    if isinstance(found, shared.Known):
        events.candidates_returned(found.candidates)
        request.render(resp, found.body)
    elif isinstance(found, engine.Stream):
        request.render_stream(resp, question.kept(found, _counted(found, form)))
    else:
        events.candidates_returned(len(found.candidates))
        request.render(resp, render.document_json(found, form))
    request.set_last_modified(req, resp, None, always=True)


def document_form(version):
    """What the answer shows at ``version``."""
    return render.Form(
        dict_allocations=version >= versions.DICT_ALLOCATIONS,
        traits=version >= versions.CANDIDATE_TRAITS,
        all_inventories=version >= versions.ALL_SUMMARY_INVENTORIES,
        tree_uuids=version >= versions.NESTED_CANDIDATES,
        mappings=version >= versions.MAPPINGS,
    )


def _counted(stream, form):
    yield from render.document_stream(stream, form)
    events.candidates_returned(stream.count)

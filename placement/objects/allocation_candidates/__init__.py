"""The allocation candidate engine (GET /allocation_candidates).

Stages, one module each: ``request`` (groups and structural rules),
``providers`` (what the search looks at, over an index that ``sql`` or
``catalog_index``, over the worker's provider catalog, answers), ``trees``
(who can serve which group under which anchor) and ``search`` (lazy
combinations). ``answering`` runs stages 2-4 in one read transaction and
returns a Result or a Stream, which the candidates handler renders
(handlers/candidates/render); this module only re-exports its names,
and ``search.Kept``, the candidates the renderer may keep the JSON of.
"""

from placement.objects.allocation_candidates.answering import Options
from placement.objects.allocation_candidates.answering import Result
from placement.objects.allocation_candidates.answering import Stream
from placement.objects.allocation_candidates.answering import answer
from placement.objects.allocation_candidates.answering import find
from placement.objects.allocation_candidates.search import Kept

__all__ = ["Kept", "Options", "Result", "Stream", "answer", "find"]

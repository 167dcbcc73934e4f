"""The candidate routes: GET /allocation_candidates (``allocation_candidate``),
its ``explain`` and ``capacity`` views, and the two helpers they share:
``query`` (the query string to an engine request) and ``render`` (the
engine's answer to a response body)."""

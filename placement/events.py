"""Domain events counted as Prometheus metrics: what the object layer and
the handlers report (a write retried, the catalog consulted, candidates
returned). A leaf with no web imports, so any layer may call it;
``placement.api.metrics`` counts requests and serves ``GET /metrics``,
which exports these with the rest (they share prometheus_client's
registry, or its multiprocess files: see placement.api.multiproc).

Each call is a single counter update: cheap enough for any code path.
"""

import prometheus_client
from prometheus_client import values

from placement import mmapvalues

# In multiprocess mode, prometheus_client's values in files are ours
# (``mmapvalues.Value``: the process id kept per process, a request's
# count and latency one update); set before any value is made (the
# metrics below are the first).
if values.ValueClass is not values.MutexValue:
    values.ValueClass = mmapvalues.Value


class Children:
    """A metric's children by their label values. prometheus_client's
    ``labels()`` checks the values and takes a lock on every call (a tenth
    of the app's own time for ``GET /``); a child, once made, stays."""

    def __init__(self, metric):
        self.metric = metric
        self.made = {}

    def __call__(self, *values):
        child = self.made.get(values)
        if child is None:
            child = self.made[values] = self.metric.labels(*values)
        return child


CANDIDATES = prometheus_client.Histogram(
    "placement_allocation_candidates_returned",
    "Allocation candidates (allocation_requests) returned per request.",
    buckets=(0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000, 10000, float("inf")),
)
CONFLICT_RETRIES = prometheus_client.Counter(
    "placement_generation_conflict_retries",
    "Server-side retries of a write after losing a generation compare-and-swap.",
)
CATALOG = prometheus_client.Counter(
    "placement_catalog_requests",
    "Requests that asked for the provider catalog, by outcome: hit (it was "
    "current, or made current by its change log), read (this request read "
    "it whole again), sql (not current and being read by another request, "
    "or newer than the request: plain SQL).",
    ["outcome"],
)
CATALOG_UPDATES = prometheus_client.Counter(
    "placement_catalog_updates",
    "Times a worker brought its provider catalog up to date, by how: deltas "
    "(only what the change log says changed), full (read whole: at "
    "start, or when the log could not tell) or foreign (read whole: "
    "another writer changed its tables).",
    ["how"],
)
HOST_ANSWERS = prometheus_client.Counter(
    "placement_host_answers",
    "Allocation candidates answers shared by the workers of a host, by "
    "how: served (the body another worker rendered for the same question "
    "at the same state, sent without a search), kept (a body this worker "
    "rendered, kept for the others).",
    ["how"],
)
_CATALOG = Children(CATALOG)
_CATALOG_UPDATES = Children(CATALOG_UPDATES)
_HOST_ANSWERS = Children(HOST_ANSWERS)
DEADLOCKS = prometheus_client.Counter(
    "placement_deadlock_retries_exhausted",
    "Writes the database refused as deadlocked (or lock wait timed out) on "
    "every try, answered 409 placement.concurrent_update.",
)
CONFLICTS = prometheus_client.Counter(
    "placement_generation_conflicts",
    "Requests answered 409 placement.concurrent_update.",
)


def conflict_retry() -> None:
    """A write lost a generation compare-and-swap and is being re-run."""
    CONFLICT_RETRIES.inc()


def generation_conflict() -> None:
    """A request is answered 409 placement.concurrent_update."""
    CONFLICTS.inc()


def deadlock_retries_exhausted() -> None:
    """A write met a deadlock on every try and is answered 409."""
    DEADLOCKS.inc()


def catalog_used(outcome: str) -> None:
    """A request asked for the provider catalog: ``hit``, ``read`` or
    ``sql``."""
    _CATALOG(outcome).inc()


def catalog_updated(how: str) -> None:
    """A worker brought its provider catalog up to date: ``counts``,
    ``host`` (by what another worker of its host read), ``deltas``,
    ``full`` or ``foreign``."""
    _CATALOG_UPDATES(how).inc()


def host_answer(how: str) -> None:
    """An allocation candidates answer shared by the host's workers:
    ``served`` or ``kept``."""
    _HOST_ANSWERS(how).inc()


def candidates_returned(count: int) -> None:
    """GET /allocation_candidates answered with ``count`` candidates."""
    CANDIDATES.observe(count)

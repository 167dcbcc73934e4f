"""The capacity gauges of GET /metrics: for each shape named in
``[capacity] shapes``, ``placement_capacity{shape}`` (how many more
instances fit in total) and ``placement_capacity_aggregate{shape,
aggregate}`` (per aggregate; never per host, so the series stay bounded
by the shapes and aggregates).

Computing them is a capacity request per shape (doc/capacity.md), far
too much for a scrape: a background thread of each worker recomputes them
once per ``[capacity] interval`` and a scrape only reads the last result.
With several gunicorn workers (``PROMETHEUS_MULTIPROC_DIR``) the result is
a JSON file in that directory and an advisory lock on it elects the one
worker that recomputes, so the gauges are computed once per interval
whatever the number of workers, and any worker's scrape serves them.
"""

import fcntl
import json
import logging
import os
import threading
import time
import urllib.parse
from typing import Any

import prometheus_client
from prometheus_client.core import GaugeMetricFamily

from placement import versions
from placement.api import multiproc
from placement.db import api as db_api
from placement.handlers.candidates import query as candidate_query
from placement.objects import capacity

LOG = logging.getLogger(__name__)
STATE_FILE = "placement-capacity.json"


def parse_shapes(text: str) -> list[tuple[str, str]]:
    """'name:query; name:query' -> [(name, query)]; ValueError when an
    entry has no name or no query."""
    shapes = []
    for entry in text.split(";"):
        entry = entry.strip()
        if not entry:
            continue
        name, sep, query = entry.partition(":")
        if not sep or not name.strip() or not query.strip():
            raise ValueError("capacity shape %r is not 'name:query'" % entry)
        shapes.append((name.strip(), query.strip()))
    return shapes


def compute(db: db_api.Database, shapes: list[tuple[str, str]]) -> dict[str, Any]:
    """{shape: {"capacity": n, "aggregates": {uuid: n}}} at the latest
    microversion; a shape whose query is refused is logged and left out."""
    found = {}
    for name, query in shapes:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        try:
            answer = candidate_query.run_query(
                db, pairs, versions.MAX, capacity.compute
            )
        except Exception as e:  # one bad shape does not hide the others
            LOG.warning("capacity shape %s (%s) not computed: %s", name, query, e)
            continue
        found[name] = {"capacity": answer.capacity, "aggregates": answer.aggregates}
    return found


class Gauges:
    """The gauges of one app: ``start`` (idempotent, per process) runs the
    background computation, ``exposition`` renders the last result."""

    def __init__(
        self, db: db_api.Database, shapes: list[tuple[str, str]], interval: int
    ) -> None:
        self.db = db
        self.shapes = shapes
        self.interval = interval
        self.values: dict[str, Any] = {}
        self.computed_at = 0.0
        self._pid: int | None = None
        self._lock = threading.Lock()

    def _path(self) -> str | None:
        directory = os.environ.get(multiproc.ENV)
        return os.path.join(directory, STATE_FILE) if directory else None

    def start(self) -> None:
        """The background thread of this process, started once (again
        in a forked worker, which does not inherit threads). Started by
        the first scrape, never in a process that forks workers: a child
        forked while its thread held the lock would hold it forever."""
        with self._lock:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
        threading.Thread(target=self._loop, name="capacity-gauges", daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                self.refresh()
            except Exception:
                LOG.exception("capacity gauges not computed")
            time.sleep(max(1.0, self.interval / 4))

    def refresh(self, now: float | None = None) -> bool:
        """Recompute if the last result is an interval old and no other
        worker is at it; True when this call computed."""
        now = time.time() if now is None else now
        path = self._path()
        if path is None:
            if now - self.computed_at < self.interval:
                return False
            self.values, self.computed_at = compute(self.db, self.shapes), now
            return True
        with open(path + ".lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False  # another worker computes
            if now - self._read(path).get("computed_at", 0.0) < self.interval:
                return False
            state = {"computed_at": now, "values": compute(self.db, self.shapes)}
            with open(path + ".tmp", "w") as out:
                json.dump(state, out)
            os.replace(path + ".tmp", path)
            return True

    @staticmethod
    def _read(path: str) -> dict[str, Any]:
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def current(self) -> dict[str, Any]:
        """The last result: {shape: {"capacity", "aggregates"}}."""
        path = self._path()
        if path is None:
            return self.values
        return self._read(path).get("values", {})

    def exposition(self) -> bytes:
        registry = prometheus_client.CollectorRegistry()
        registry.register(_Collector(self.current()))
        return prometheus_client.generate_latest(registry)


class _Collector:
    def __init__(self, values):
        self.values = values

    def collect(self):
        total = GaugeMetricFamily(
            "placement_capacity",
            "How many more instances of a configured shape fit in total "
            "([capacity] shapes).",
            labels=["shape"],
        )
        per_aggregate = GaugeMetricFamily(
            "placement_capacity_aggregate",
            "How many more instances of a configured shape fit on the "
            "hosts of an aggregate.",
            labels=["shape", "aggregate"],
        )
        for shape, found in sorted(self.values.items()):
            total.add_metric([shape], found["capacity"])
            for aggregate, count in sorted(found["aggregates"].items()):
                per_aggregate.add_metric([shape, aggregate], count)
        yield total
        yield per_aggregate

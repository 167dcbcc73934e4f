"""A worker's catalog follower: while the worker is idle, a background
thread brings its provider catalog up to date, so that the first request
after a burst of writes (a bulk load, a wave of agents' reports) finds it
current instead of following the changes itself. See "Provider catalog"
in doc/architecture.md.

It only looks while no request has been in the worker's gate for
``IDLE_S``: a busy worker's requests keep its catalog current anyway, and
the follower must not take CPU from them. A look costs one statement (the
stamp), and none when another worker of the host looked within the
period and found this catalog's stamp (``catalog/host_look.py``: idle,
a host's followers look about once a period, not once per worker);
catching up is what the next request would have done. So is, once it
has caught up and the worker is still idle, making the provider
summaries of the trees that have none (``catalog_index.warm``, a few
dozen trees a look, from memory) and their JSON in the newest
microversions' form (``render.write_summaries``): after a load, each
worker's first candidate search made and wrote every tree's.

Busy or idle, it also compares the catalog with the database's
fingerprint when that is due (other writers' changes, "Writes by other
writers" in doc/architecture.md): the comparison is a statement the
worker mostly waits for (only a cheap look while the catalog's tables
are quiet, ``catalog/precheck.py``), and while the follower keeps up, no
request runs or waits for one (``verify.FOLLOWED_VERIFY_S``).
"""

import logging
import threading

from placement.cmd import gate as gate_
from placement.db import api as db_api
from placement.handlers.candidates import render
from placement.objects.allocation_candidates import catalog_index
from placement.objects.catalog import refresh

LOG = logging.getLogger(__name__)

EVERY_S = 0.2  # how often the follower looks
IDLE_S = 0.2  # no request for this long: the worker is idle


class Follower:
    def __init__(
        self,
        db: db_api.Database,
        gate: gate_.Gate,
        every: float = EVERY_S,
        idle: float = IDLE_S,
    ) -> None:
        self.db = db
        self.gate = gate
        self.every = every
        self.idle = idle
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def step(self) -> str | None:
        """One look: what the catalog's catch-up did ("deltas", "full",
        "none"), or None when the worker was busy or the look failed."""
        try:
            refresh.verify_if_due(self.db, ahead=self.every)
            refresh.prune_if_due(self.db)
            if not self.gate.idle_for(self.idle):
                return None
            done = refresh.catch_up(self.db, told=self.every)
            if self.gate.idle_for(self.idle):
                render.write_summaries(catalog_index.warm(self.db))
            return done
        except Exception as e:
            # The database may be away: the next request finds out and
            # answers for it; the next look tries again.
            LOG.debug("provider catalog not followed: %s", type(e).__name__)
            return None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._loop, name="catalog-follower", daemon=True
        )
        self._thread.start()
        refresh.follow(self.db, True)

    def stop(self) -> None:
        refresh.follow(self.db, False)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.step()

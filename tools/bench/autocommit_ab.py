"""CPU per request, in process, of reads of one statement in autocommit
(``Database.single_read``) against the same reads in a read transaction.

The whole app is called directly (no HTTP), on a fresh database per
backend; batches of 200 requests alternate the two ways in one process
(``single_read`` swapped for ``reader`` for the transaction's batches), so
a busy machine slows both alike: median and min of 25 batches each, and
the ratio of the medians.

    .venv/bin/python tools/bench/autocommit_ab.py mysql postgresql
"""

import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import profile_request  # noqa: E402

from placement.db import transaction  # noqa: E402
from placement.objects import resource_provider as rp_obj  # noqa: E402
from tests import fixtures  # noqa: E402

WAYS = {
    "transaction": transaction.Database.reader,
    "autocommit": transaction.Database.single_read,
}
PATHS = ("/resource_providers/{uuid}", "/resource_providers/{uuid}/inventories")
BATCH = 200
BATCHES = 25


def _batch(app, path):
    """CPU ms per request of BATCH GETs of ``path``."""
    start = time.process_time()
    for _ in range(BATCH):
        status, _ = profile_request.call(app, path, "1.39")
        assert status.startswith("200"), status
    return (time.process_time() - start) / BATCH * 1e3


def main():
    for backend in sys.argv[1:] or ["mysql"]:
        with fixtures.app(backend) as (app, db):
            rp = str(uuid.uuid4())
            rp_obj.create(db, rp, rp)
            for path in PATHS:
                found = {way: [] for way in WAYS}
                try:
                    for _ in range(BATCHES):
                        for way, method in WAYS.items():
                            transaction.Database.single_read = method
                            found[way].append(_batch(app, path.format(uuid=rp)))
                finally:
                    transaction.Database.single_read = WAYS["autocommit"]
                medians = {way: statistics.median(ms) for way, ms in found.items()}
                print(
                    "%-10s %-40s %s; autocommit/transaction %.2f"
                    % (
                        backend,
                        path,
                        "; ".join(
                            "%s median %.3f min %.3f ms"
                            % (way, medians[way], min(found[way]))
                            for way in WAYS
                        ),
                        medians["autocommit"] / medians["transaction"],
                    )
                )


if __name__ == "__main__":
    main()

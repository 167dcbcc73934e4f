"""The size of the allocations the catalog follows (catalog/consumers.py)
at issue 44's cloud: 224,379 consumers of three allocation rows each on
100,000 hosts are a few dozen numpy arrays, under 40 MB in all (36.8 MB
measured: about 55 bytes per allocation row), held once per
placement-api process group (built in the master before the fork), not
millions of Python objects each worker would copy by touching them."""

import sys

import numpy as np

from placement.objects.catalog import consumer_columns
from placement.objects.catalog import consumers

CONSUMERS = 224_379
HOSTS = 100_000


def _cloud():
    rnd = np.random.default_rng(44)
    uuids = np.array(
        [
            "%08x-%04x-4%03x-8%03x-%012x" % tuple(int(v) for v in parts)
            for parts in rnd.integers(0, 2**31, size=(CONSUMERS, 5))
        ]
    ).astype("S36")
    per = 3
    rows = CONSUMERS * per
    owner = np.repeat(np.arange(CONSUMERS), per)
    hosts = rnd.integers(1, HOSTS + 1, size=CONSUMERS)
    columns = consumer_columns.Columns(
        uuids[owner],
        np.arange(1, rows + 1),
        hosts[owner],
        np.tile(np.arange(per), CONSUMERS),
        np.tile(np.array([4, 8192, 40]), CONSUMERS),
        np.full(rows, 1_795_946_047),
        np.ones(rows, dtype=np.int64),
        np.ones(rows, dtype=np.int64),
        np.ones(rows, dtype=np.int64),
        np.ones(rows, dtype=np.int64),
    )
    names = {"project": (None, "p"), "user": (None, "u"), "type": (None, "INSTANCE")}
    base = consumer_columns.Base(columns, names)
    return consumers.Allocations(base, 0.0), uuids


def test_issue_44_cloud_fits_in_columns():
    followed, uuids = _cloud()
    base = followed.base
    arrays = [v for v in vars(base).values() if isinstance(v, np.ndarray)]
    assert len(base.uuids) == CONSUMERS
    assert base.nbytes() < 40 * 2**20
    # Beside the arrays, only the small name tables: nothing per consumer.
    others = [v for v in vars(base).values() if not isinstance(v, np.ndarray)]
    assert sum(sys.getsizeof(v) for v in others) < 10_000
    assert len(arrays) < 20
    some = uuids[1234].decode()
    found = followed.consumer(some)
    assert [row.used for row in found.rows] == [4, 8192, 40]
    assert found.project == "p" and found.generation == 1
    rp = found.rows[0].provider
    assert some in followed.on_provider(rp).uuid

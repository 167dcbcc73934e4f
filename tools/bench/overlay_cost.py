"""What following one claim costs a catalog's allocations in memory
(``catalog/consumers.py``: ``Allocations.advanced``) as the consumers
followed since the last fold grow, in process, no database: each claim
is a new consumer with two allocation rows, on a provider of its own or
on one provider every claim shares (a sharing provider's disk).

For a before/after, run it from another tree's code through PYTHONPATH:

    git archive <commit> | tar -x -C /tmp/base
    PYTHONPATH=/tmp/base .venv/bin/python tools/bench/overlay_cost.py
    .venv/bin/python tools/bench/overlay_cost.py
"""

import argparse
import json
import statistics
import time
import uuid

import numpy as np

from placement.objects.catalog import consumer_columns
from placement.objects.catalog import consumers


def _empty() -> consumers.Allocations:
    kinds = ("S36", *["i8"] * 9)
    columns = consumer_columns.Columns(*(np.zeros(0, dtype=kind) for kind in kinds))
    names = {"project": (None,), "user": (None,), "type": (None,)}
    return consumers.Allocations(consumer_columns.Base(columns, names), 0.0)


def claims(count: int, shared: bool) -> list[float]:
    """Seconds each of ``count`` claims' ``advanced`` took."""
    followed, took = _empty(), []
    for k in range(count):
        name = str(uuid.uuid4())
        rows = (
            consumer_columns.Row(2 * k, 1 if shared else 1000 + k, 0, 1, None),
            consumer_columns.Row(2 * k + 1, 1_000_000 + k, 1, 1, None),
        )
        consumer = consumer_columns.Consumer(1, "p", "u", "INSTANCE", rows)
        start = time.perf_counter()
        followed = followed.advanced({name: consumer}, [name])
        took.append(time.perf_counter() - start)
    return took


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=9000)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--out")
    args = parser.parse_args()
    found = {}
    for shared in (False, True):
        took = claims(args.claims, shared)
        windows = {
            "%d-%d" % (start, start + args.window): round(
                statistics.mean(took[start : start + args.window]) * 1e6, 1
            )
            for start in range(0, args.claims, args.window)
        }
        label = "one shared provider" if shared else "a provider each"
        found[label] = windows
        print("%-20s us per claim by claims since the fold: %s" % (label, windows))
    if args.out:
        with open(args.out, "w") as out:
            json.dump({"claims": args.claims, "us_per_claim": found}, out, indent=1)


if __name__ == "__main__":
    main()

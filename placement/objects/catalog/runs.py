"""Runs of equal values in sorted columns, and per key the list of its
rows' codes made into one object per distinct list (a whole read's
per-provider maps: most providers are alike, so a cloud of 1,000,000
holds a few distinct lists, each made once)."""

from collections.abc import Callable

import numpy as np


def starts(values: np.ndarray) -> np.ndarray:
    """Where each run of equal ``values`` starts."""
    found = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    return found[: len(values)]


def grouped(keys: np.ndarray, codes: np.ndarray, make: Callable) -> dict:
    """{key: make(list of its rows' codes)}, ``keys`` sorted (int64),
    ``codes`` aligned (int64); keys with equal lists share one object."""
    at = starts(keys)
    counts = np.diff(np.append(at, len(keys)))
    made = np.empty(len(at), dtype=object)
    for count in np.unique(counts).tolist():
        chosen = counts == count
        rows = codes[at[chosen][:, None] + np.arange(count)]
        # Rows compared as bytes (np.unique's axis=0 took seconds).
        distinct, which = np.unique(
            rows.view(np.dtype((np.void, rows.itemsize * count))).reshape(-1),
            return_inverse=True,
        )
        objects = np.empty(len(distinct), dtype=object)
        for i, listed in enumerate(distinct.view(np.int64).reshape(-1, count)):
            objects[i] = make(listed.tolist())
        made[chosen] = objects[which.reshape(-1)]
    return dict(zip(keys[at].tolist(), made.tolist()))

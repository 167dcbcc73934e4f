"""The columns of the allocations the catalog follows
(``catalog/consumers.py``): allocation rows and consumers' records as
numpy arrays, built once by a whole read (in placement-api's master,
before the fork: every worker shares their pages), and the values read
from them. Providers' generations are not here: the catalog holds them
once, with the usage (``catalog/used.py``)."""

import bisect
import datetime
import typing

import numpy as np

from placement.objects.catalog import runs

# A row without a time, and a consumer without a record, in columns.
NO_TIME = NO_RECORD = int(np.iinfo(np.int64).min)
EPOCH = datetime.datetime(1970, 1, 1)


class Row(typing.NamedTuple):
    """One allocation row; ``modified``: its updated_at, else created_at,
    in whole seconds since the epoch (None: neither)."""

    id: int
    provider: int
    rc: int
    used: int
    modified: int | None


class Consumer(typing.NamedTuple):
    """A consumer holding allocations: its record's generation, project,
    user and type (None each without a record, or a name without its
    row) and its rows in id order."""

    generation: int | None
    project: str | None
    user: str | None
    type: str | None
    rows: tuple[Row, ...]


class OnProvider(typing.NamedTuple):
    """The allocation rows on a provider in id order, as columns
    (``Allocations.on_provider``): per row its id, consumer's uuid and
    generation (None: no record), class, amount and time (``Row``'s
    ``modified``, NO_TIME for none: the largest is the last change)."""

    id: list[int]
    uuid: list[str]
    generation: list[int | None]
    rc: list[int]
    used: list[int]
    modified: list[int]


class Base:
    """The columns of a whole read: consumers by uuid (sorted bytes),
    their rows grouped by consumer then id, and the rows' order by
    provider then id. Names (projects, users, types) are positions in
    small tuples, None first."""

    def __init__(self, rows: "Columns", names: dict) -> None:
        """``rows``: per allocation row, in any order; ``names``:
        {"project"/"user"/"type": tuple} the rows' positions index."""
        self.uuids, owner = unique(rows.uuid)
        order = np.lexsort((rows.id, owner))
        owner = owner[order]
        self.owner = _narrow(owner)
        self.id, self.provider, self.rc, self.used = (
            _narrow(column[order])
            for column in (rows.id, rows.provider, rows.rc, rows.used)
        )
        self.modified = rows.modified[order]
        start = np.zeros(len(self.uuids) + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner, minlength=len(self.uuids)), out=start[1:])
        first = order[start[:-1]]
        self.start = _narrow(start)
        self.generation = _narrow(rows.generation[first])
        self.project, self.user, self.type = (
            _narrow(column[first]) for column in (rows.project, rows.user, rows.type)
        )
        self.names = names
        # {field: {name: [positions]}}, built on first use (``positions``).
        self._positions: dict = {}
        self.by_provider = _narrow(np.lexsort((self.id, self.provider)))
        self.provider_sorted = self.provider[self.by_provider]
        # What on_provider reads, item by item: the columns' memoryviews
        # (``data``: contiguous, each item a Python int).
        self._views = tuple(
            column.data
            for column in (
                self.provider_sorted,
                self.by_provider,
                self.owner,
                self.id,
                self.generation,
                self.rc,
                self.used,
                self.modified,
            )
        )

    def index(self, uuid: str) -> int | None:
        key = uuid.encode("utf-8", "surrogatepass")
        if len(key) > self.uuids.itemsize:
            return None  # (searched for, it would convert the whole column)
        low, high = _found(self.uuids, key)
        return low if high > low else None

    def uuid(self, i: int) -> str:
        return self.uuids[i].decode("utf-8", "surrogatepass")

    def consumer(self, i: int) -> Consumer:
        names = self.names
        return Consumer(
            self.generation_at(i),
            names["project"][self.project[i]],
            names["user"][self.user[i]],
            names["type"][self.type[i]],
            tuple(self.rows(slice(self.start[i], self.start[i + 1]))),
        )

    def positions(self, field: str, name: str) -> list[int]:
        """The positions of ``name`` in ``names[field]`` ("project",
        "user" or "type"): the values its consumers' column holds."""
        found = self._positions.get(field)
        if found is None:
            found = {}
            for i, value in enumerate(self.names[field]):
                found.setdefault(value, []).append(i)
            self._positions[field] = found
        return found.get(name, [])

    def generation_at(self, i: int) -> int | None:
        generation = int(self.generation[i])
        return None if generation == NO_RECORD else generation

    def rows(self, at: typing.Any) -> list[Row]:
        """The rows at positions ``at`` (a slice or an array)."""
        return [
            Row(id_, rp, rc, used, None if modified == NO_TIME else modified)
            for id_, rp, rc, used, modified in zip(
                *(
                    column[at].tolist()
                    for column in (
                        self.id,
                        self.provider,
                        self.rc,
                        self.used,
                        self.modified,
                    )
                )
            )
        ]

    def on_provider(self, rp: int) -> OnProvider:
        """The rows on provider ``rp``, read item by item through
        memoryviews of the columns (a provider holds a handful: a numpy
        call per column cost more than the items)."""
        rps, by_provider, owner, ids, generation, rc, used, modified = self._views
        low = bisect.bisect_left(rps, rp)
        at = by_provider[low : bisect.bisect_right(rps, rp, low)].tolist()
        owners = [owner[i] for i in at]
        return OnProvider(
            [ids[i] for i in at],
            [self.uuid(i) for i in owners],
            [None if generation[i] == NO_RECORD else generation[i] for i in owners],
            [rc[i] for i in at],
            [used[i] for i in at],
            [modified[i] for i in at],
        )

    def nbytes(self) -> int:
        """Bytes of its arrays (the name tables are small)."""
        return sum(v.nbytes for v in vars(self).values() if isinstance(v, np.ndarray))


class Columns(typing.NamedTuple):
    """Allocation rows as columns, each with its consumer's uuid (bytes),
    record's generation (NO_RECORD: none) and names' positions."""

    uuid: np.ndarray
    id: np.ndarray
    provider: np.ndarray
    rc: np.ndarray
    used: np.ndarray
    modified: np.ndarray
    generation: np.ndarray
    project: np.ndarray
    user: np.ndarray
    type: np.ndarray

    @classmethod
    def of(cls, rows: list, names: dict) -> "Columns":
        """From ``rows`` of (uuid, id, rp, rc, used, modified (seconds or
        None), generation or None, project, user, type); the names are
        added to ``names`` ({field: [names]}) as needed."""
        fields = list(zip(*rows)) if rows else [()] * 10
        uuid = np.array(
            [u.encode("utf-8", "surrogatepass") for u in fields[0]],
            dtype=None if rows else "S36",
        )
        integers = (np.array(values, dtype=np.int64) for values in fields[1:5])
        modified = np.array(
            [NO_TIME if m is None else m for m in fields[5]], dtype=np.int64
        )
        generation = np.array(
            [NO_RECORD if g is None else g for g in fields[6]], dtype=np.int64
        )
        project, user, kind = (
            _positions(fields[7 + k], names[field])
            for k, field in enumerate(("project", "user", "type"))
        )
        ids, provider, rc, used = integers
        return cls(
            uuid, ids, provider, rc, used, modified, generation, project, user, kind
        )


def time_of(seconds: int) -> datetime.datetime:
    """Seconds since the epoch as a naive UTC datetime."""
    return EPOCH + datetime.timedelta(seconds=seconds)


def unique(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` (1-D) of a column whose
    equal values mostly come in runs (a consumer's allocation rows, in id
    order): only the runs' heads are sorted (bytes sort slowly: 1,690,668
    uuids took about a second, three times their 563,556 runs' heads)."""
    starts = runs.starts(values)
    found, inverse = np.unique(values[starts], return_inverse=True)
    lengths = np.diff(np.append(starts, len(values)))
    return found, np.repeat(inverse.reshape(-1), lengths)


def _positions(values, names):
    """Each of ``values``' position in ``names`` (a list, None first),
    new ones appended to it."""
    position = {name: i for i, name in enumerate(names)}
    found = []
    for value in values:
        i = position.get(value)
        if i is None:
            i = position[value] = len(names)
            names.append(value)
        found.append(i)
    return np.array(found, dtype=np.int64)


def _found(column: np.ndarray, value: typing.Any) -> tuple[int, int]:
    """Where ``value`` is in sorted ``column``: (low, high). The value is
    given the column's type first (else numpy would convert the column);
    one the type cannot hold is not there."""
    try:
        key = column.dtype.type(value)
    except OverflowError:
        return 0, 0
    if key != value:
        return 0, 0
    return (
        int(column.searchsorted(key, "left")),
        int(column.searchsorted(key, "right")),
    )


def _narrow(values: np.ndarray) -> np.ndarray:
    """``values`` (integers) as int32 when they fit."""
    info = np.iinfo(np.int32)
    if not len(values) or (values.min() >= info.min and values.max() <= info.max):
        return values.astype(np.int32)
    return values

"""prometheus_client's multiprocess metric values, several updated at once.

In multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``) prometheus_client
keeps each value in an mmap'ed file of the process and, for each value
it updates, takes its lock and asks for the process id (to notice a
fork), through two or three calls of the metric's Python. A request's
count and latency are three values (the counter, the histogram's sum and
one of its buckets): ``counted_and_timed`` updates them under one lock
with one look at the process id, the bucket found by ``bisect``.
``Value`` is prometheus_client's ``MultiProcessValue()`` class made here,
so that its lock is the one that takes; its files and keys are
prometheus_client's own (``MmapedDict``, ``mmap_key``, a file per metric
type and process id), which its ``MultiProcessCollector`` adds up for
``/metrics`` as before. ``events`` installs it.
"""

import bisect
import os
import threading
from collections.abc import Callable
from typing import Any

from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.mmap_dict import mmap_key

from placement import procid

_LOCK = threading.Lock()
# The process's files by metric type, its values, and the process id they
# were opened in: a forked child opens files of its own and reads every
# value again from them.
_FILES: dict[str, MmapedDict] = {}
_VALUES: list["Value"] = []
_OPENED_IN = [procid.current()]


class Value:
    """A float in this process's mmap'ed file for its metric type, as
    prometheus_client's ``MultiProcessValue()`` class keeps it."""

    _multiprocess = True

    def __init__(self, *params, multiprocess_mode="", **kwargs):
        # prometheus_client's: type, metric name, sample name, label names,
        # label values, help text (its ValueClass's positional arguments).
        self._params = (*params, multiprocess_mode)
        with _LOCK:
            _follow_fork()
            self._open()
            _VALUES.append(self)

    def _open(self):
        typ, metric_name, name, labelnames, labelvalues, help_text, mode = self._params
        prefix = typ + "_" + mode if typ == "gauge" else typ
        file = _FILES.get(prefix)
        if file is None:
            file = _FILES[prefix] = MmapedDict(
                os.path.join(
                    os.environ["PROMETHEUS_MULTIPROC_DIR"],
                    "%s_%d.db" % (prefix, _OPENED_IN[0]),
                )
            )
        self._file = file
        self._key = mmap_key(metric_name, name, labelnames, labelvalues, help_text)
        self._value = file.read_value(self._key)[0]

    def inc(self, amount):
        with _LOCK:
            _follow_fork()
            self._value += amount
            self._file.write_value(self._key, self._value, 0.0)

    def set(self, value, timestamp=None):
        with _LOCK:
            _follow_fork()
            self._value = value
            self._file.write_value(self._key, value, timestamp or 0.0)

    def set_exemplar(self, exemplar):
        """Not kept in multiprocess mode (nor by prometheus_client)."""

    def get(self):
        with _LOCK:
            _follow_fork()
            return self._value

    def get_exemplar(self):
        return None


def _follow_fork():
    """In a forked child (the lock held): every value in files of its own."""
    pid = procid.current()
    if _OPENED_IN[0] != pid:
        _OPENED_IN[0] = pid
        for file in _FILES.values():
            file.close()
        _FILES.clear()
        for value in _VALUES:
            value._open()


def counted_and_timed(counter: Any, histogram: Any) -> Callable[[float], None]:
    """A function of a duration in seconds that does ``counter.inc()`` and
    ``histogram.observe(duration)`` (a counter's and a histogram's
    children, or unlabelled metrics): one update under one lock when their
    values are ``Value``'s (read from prometheus_client's private
    attributes: where a release has others, the public calls)."""
    count, total = getattr(counter, "_value", None), getattr(histogram, "_sum", None)
    buckets = getattr(histogram, "_buckets", None)
    bounds = getattr(histogram, "_upper_bounds", None)
    if not (
        isinstance(count, Value) and isinstance(total, Value) and buckets and bounds
    ):

        def both(seconds: float) -> None:
            counter.inc()
            histogram.observe(seconds)

        return both

    def one(seconds: float) -> None:
        # observe's bucket: the first whose bound is not below it (the
        # last bound is infinity).
        bucket = buckets[bisect.bisect_left(bounds, seconds)]
        with _LOCK:
            _follow_fork()
            count._value += 1
            total._value += seconds
            bucket._value += 1
            count._file.write_value(count._key, count._value, 0.0)
            total._file.write_value(total._key, total._value, 0.0)
            bucket._file.write_value(bucket._key, bucket._value, 0.0)

    return one

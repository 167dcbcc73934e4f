"""A request's count and latency, updated at once in multiprocess mode,
are what prometheus_client's own values would have written: the same
samples summed by its MultiProcessCollector, a forked worker's in files
of its own."""

import os
import types

import prometheus_client
import pytest
from prometheus_client import multiprocess
from prometheus_client import values

from placement import mmapvalues

SECONDS = (0.0004, 0.005, 0.02, 0.3, 7.5, 100.0)


@pytest.fixture
def files(tmp_path, monkeypatch):
    """Our values' state of their own, in ``tmp_path``; closed after."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setattr(mmapvalues, "_FILES", {})
    monkeypatch.setattr(mmapvalues, "_VALUES", [])
    yield tmp_path
    for file in mmapvalues._FILES.values():
        file.close()


def _metrics(value_class, monkeypatch, registry=None):
    """A labelled counter's and histogram's children whose values are
    ``value_class``'s (a child's values are made by the class of when it
    is made)."""
    monkeypatch.setattr(values, "ValueClass", value_class)
    counter = prometheus_client.Counter(
        "t_requests", "Requests.", ["route", "status"], registry=registry
    )
    histogram = prometheus_client.Histogram(
        "t_seconds", "Time taken.", ["route"], registry=registry
    )
    return counter.labels("/", "200"), histogram.labels("/")


def _samples(path):
    registry = prometheus_client.CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(path))
    return sorted(
        (sample.name, tuple(sorted(sample.labels.items())), sample.value)
        for family in registry.collect()
        for sample in family.samples
    )


def test_one_update_writes_what_prometheus_client_writes(
    files, tmp_path_factory, monkeypatch
):
    record = mmapvalues.counted_and_timed(*_metrics(mmapvalues.Value, monkeypatch))
    for seconds in SECONDS:
        record(seconds)
    theirs = tmp_path_factory.mktemp("theirs")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(theirs))
    counter, histogram = _metrics(values.MultiProcessValue(), monkeypatch)
    for seconds in SECONDS:
        counter.inc()
        histogram.observe(seconds)
    assert _samples(files) == _samples(theirs)
    assert ("t_requests_total", (("route", "/"), ("status", "200")), 6.0) in (
        _samples(files)
    )


def test_a_forked_worker_counts_in_files_of_its_own(files, monkeypatch):
    record = mmapvalues.counted_and_timed(*_metrics(mmapvalues.Value, monkeypatch))
    record(0.01)
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        try:
            record(0.5)
            record(0.5)
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    record(0.01)
    assert sorted(p.name for p in files.iterdir()) == sorted(
        "%s_%d.db" % (kind, pid)
        for kind in ("counter", "histogram")
        for pid in (os.getpid(), child)
    )
    samples = {(name, labels): value for name, labels, value in _samples(files)}
    assert samples["t_requests_total", (("route", "/"), ("status", "200"))] == 4
    assert samples["t_seconds_bucket", (("le", "0.01"), ("route", "/"))] == 2
    assert samples["t_seconds_bucket", (("le", "0.5"), ("route", "/"))] == 4
    assert samples["t_seconds_sum", (("route", "/"),)] == pytest.approx(1.02)


def test_values_of_a_single_process_are_updated_one_by_one(monkeypatch):
    registry = prometheus_client.CollectorRegistry()
    record = mmapvalues.counted_and_timed(
        *_metrics(values.MutexValue, monkeypatch, registry)
    )
    record(0.2)
    record(0.2)
    sample = registry.get_sample_value
    assert sample("t_requests_total", {"route": "/", "status": "200"}) == 2
    assert sample("t_seconds_bucket", {"route": "/", "le": "0.1"}) == 0
    assert sample("t_seconds_bucket", {"route": "/", "le": "0.25"}) == 2
    assert sample("t_seconds_sum", {"route": "/"}) == pytest.approx(0.4)


def test_metrics_without_the_private_values_are_updated_one_by_one(files, monkeypatch):
    """A prometheus_client release whose metrics keep their values under
    other names (here: only the public calls): those, not an error per
    request."""
    counter, histogram = _metrics(mmapvalues.Value, monkeypatch)
    record = mmapvalues.counted_and_timed(
        types.SimpleNamespace(inc=counter.inc),
        types.SimpleNamespace(observe=histogram.observe),
    )
    record(0.2)
    record(0.2)
    samples = {(name, labels): value for name, labels, value in _samples(files)}
    assert samples["t_requests_total", (("route", "/"), ("status", "200"))] == 2
    assert samples["t_seconds_sum", (("route", "/"),)] == pytest.approx(0.4)

"""The candidates' JSON kept across requests by the renderer: a candidate
object written before is taken again only in the form it was written for,
and the document is the one a plain write of the same answer gives."""

import uuid as uuidlib

import orjson
import pytest

from placement import versions
from placement.handlers.candidates import allocation_candidate as handler
from placement.handlers.candidates import render
from placement.objects.allocation_candidates import answering as engine
from placement.objects.allocation_candidates import providers
from placement.objects.allocation_candidates import search
from placement.objects.catalog import rows

VCPU, MEMORY = 1, 2
NAMES = {VCPU: "VCPU", MEMORY: "MEMORY_MB"}
VERSIONS = ["1.10", "1.12", "1.34", "1.39"]  # list, dict allocations, mappings


@pytest.fixture(autouse=True)
def fresh_cache():
    render._CANDIDATES.clear()
    yield
    render._CANDIDATES.clear()


def _result(candidates, rps):
    uuids = {rp: str(uuidlib.UUID(int=rp)) for rp in rps}
    inventory = rows.Inventory(8, 0, 1.0, 1, 8, 1, 0)
    summaries = {
        rp: providers.Summary(
            uuids[rp],
            None,
            uuids[rp],
            (("MEMORY_MB", inventory), ("VCPU", inventory)),
            (),
        )
        for rp in rps
    }
    return engine.Result(list(candidates), summaries, uuids, dict(NAMES))


def _candidate(rp, vcpu, memory, suffix=""):
    return search.Candidate(
        ((rp, VCPU, vcpu), (rp, MEMORY, memory)), ((suffix, (rp,)),)
    )


def _written_plainly(result, form):
    """The document with no candidate's JSON kept from before."""
    kept = dict(render._CANDIDATES)
    render._CANDIDATES.clear()
    try:
        return render.document_json(result, form)
    finally:
        render._CANDIDATES.clear()
        render._CANDIDATES.update(kept)


def _form(version):
    return handler.document_form(versions.Version.parse(version))


def test_kept_candidates_are_written_in_each_form_asked():
    kept = [_candidate(rp, 1, 2) for rp in (3, 1, 2)]
    result = _result(kept, (1, 2, 3))
    for _ in range(2):
        for version in VERSIONS:
            form = _form(version)
            body = render.document_json(result, form)
            assert body == _written_plainly(result, form)
            allocations = orjson.loads(body)["allocation_requests"]
            assert len(allocations) == 3
    # One entry per candidate and distinct way of writing it.
    assert sum(map(len, render._CANDIDATES.values())) == 3 * 3


def test_an_equal_candidate_of_other_content_is_not_taken_for_a_kept_one():
    first = _result([_candidate(1, 1, 2)], (1,))
    form = _form("1.39")
    render.document_json(first, form)
    # Other candidates over the same provider: each its own JSON.
    for amounts in [(2, 2), (1, 4), (1, 2)]:
        again = _result([_candidate(1, *amounts)], (1,))
        assert render.document_json(again, form) == _written_plainly(again, form)
        written = orjson.loads(render.document_json(again, form))
        resources = written["allocation_requests"][0]["allocations"]
        assert list(resources.values())[0]["resources"] == {
            "VCPU": amounts[0],
            "MEMORY_MB": amounts[1],
        }


def test_kept_candidates_are_dropped_past_their_bound(monkeypatch):
    monkeypatch.setattr(render, "CANDIDATES_KEPT", 4)
    form = _form("1.39")
    for rp in range(1, 7):
        result = _result([_candidate(rp, 1, 2), _candidate(rp, 2, 2)], (rp,))
        assert render.document_json(result, form) == _written_plainly(result, form)
        assert sum(map(len, render._CANDIDATES.values())) <= 4
    # An answer larger than the bound is written without keeping any.
    many = [_candidate(rp, 1, 1) for rp in range(1, 7)]
    result = _result(many, range(1, 7))
    render._CANDIDATES.clear()
    assert render.document_json(result, form) == _written_plainly(result, form)
    assert not render._CANDIDATES


class _Stream:
    """An engine Stream's face to the renderer, over given batches."""

    def __init__(self, batches, rps):
        self._batches = batches
        self._result = _result([], rps)
        self.class_names = dict(NAMES)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return None

    def batches(self, size):
        uuids = self._result.uuids
        for batch in self._batches:
            yield batch, {rp: uuids[rp] for c in batch for rp, _, _ in c.allocations}

    def summaries(self):
        return self._result


def test_a_stream_keeps_the_json_of_its_kept_candidates_only():
    kept = [search.Kept(*_candidate(rp, 1, 2)) for rp in (1, 2)]
    fresh = [_candidate(rp, 2, 2) for rp in (1, 2, 3)]
    batches = [[kept[0], fresh[0]], [fresh[1], fresh[2]], [kept[1]]]
    form = _form("1.39")
    everything = _result([c for batch in batches for c in batch], (1, 2, 3))
    for _ in range(2):
        body = b"".join(render.document_stream(_Stream(batches, (1, 2, 3)), form))
        assert body == _written_plainly(everything, form)
        # New candidates each time elsewhere: theirs would push the kept out.
        assert [entry[0] for entry in render._CANDIDATES[_key(form)].values()] == kept


def _key(form):
    return (form.dict_allocations, form.mappings, tuple(sorted(NAMES.items())))

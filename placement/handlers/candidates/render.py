"""The GET /allocation_candidates document for the request's microversion
(doc/api.md "Answer"), from the engine's Result or Stream.

A response can hold hundreds of thousands of candidates that reuse a few
thousand (provider, resources) pairs, so the document is written as JSON
directly: each provider's uuid, each distinct resources object, mapping
and allocations object is encoded once and candidates are joined from
those fragments.

Which parts the document has depends on the request's microversion: the
handler works that out once and passes a ``Form``.
"""

import dataclasses
import itertools
import operator
from collections.abc import Iterable
from collections.abc import Iterator
from typing import Any

import orjson

from placement.objects import allocation_candidates as engine
from placement.objects.allocation_candidates import tree_summaries
from placement.web import request


@dataclasses.dataclass(frozen=True)
class Form:
    """The parts of the document the client's microversion shows."""

    dict_allocations: bool  # allocations keyed by provider, not a list
    traits: bool  # each summary lists its provider's traits
    all_inventories: bool  # summaries list every class, not the requested
    tree_uuids: bool  # summaries name parent and root providers
    mappings: bool  # each candidate maps request groups to providers


# (one provider's entry from its quoted uuid and resources object,
# opening, closing) of "allocations", as a list or keyed by provider.
LIST_ALLOCATIONS = (
    b'{"resource_provider":{"uuid":%s},"resources":%s}',
    b'{"allocations":[',
    b"]",
)
DICT_ALLOCATIONS = (b'%s:{"resources":%s}', b'{"allocations":{', b"}")


def _quoted(text):
    """``text`` as a JSON string, byte for byte as orjson writes it.

    Printable ASCII without quotes or backslashes needs no escape. Built
    here because keeping thousands of orjson's own small outputs alive is
    ~10x slower per string (each holds a large allocation)."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return b'"%s"' % text.encode()
    return orjson.dumps([text])[1:-1]


# uuid -> its JSON string, across requests (uuids are asked again and again).
_QUOTED: dict[str, bytes] = {}


# (dict_allocations, mappings, the requested classes' (id, name)) ->
# {id(candidate): (candidate, its JSON object)}, across requests.
# Candidates kept per tree (engine's ``kept``) are the same objects
# request after request while their tree's usage holds, so a page of
# them is written by one lookup each, by identity: no hash of their
# nested tuples, no uuid or fragment of their scattered providers looked
# at (a packed page's trees lie all over the catalog).
# An entry holds its candidate, so no other object takes its id while it
# is kept; a provider's uuid never changes, and a class renamed (its id
# kept) is written under another key.
_CANDIDATES: dict[tuple, dict[int, tuple[Any, bytes]]] = {}
CANDIDATES_KEPT = 50_000  # candidate objects, in all: past them all go


def _kept_candidates(
    form: "Form", class_names: dict, answer: int
) -> dict[int, tuple[Any, bytes]]:
    """The kept candidates' JSON of ``form`` and ``class_names``, for an
    answer of ``answer`` candidates (all of them dropped first when they
    would pass CANDIDATES_KEPT)."""
    if sum(map(len, _CANDIDATES.values())) + answer > CANDIDATES_KEPT:
        _CANDIDATES.clear()
    key = (form.dict_allocations, form.mappings, tuple(sorted(class_names.items())))
    return _CANDIDATES.setdefault(key, {})


class _Writer:
    """Candidates to JSON, one cached fragment per distinct piece."""

    def __init__(self, uuids, class_names, form):
        self.uuids = uuids
        self.names = class_names
        self.entry, self.open, self.close = (
            DICT_ALLOCATIONS if form.dict_allocations else LIST_ALLOCATIONS
        )
        self.with_mappings = form.mappings
        self.quoted = {}  # provider -> b'"uuid"'
        self.resources = {}  # ((class, amount), ...) -> b'{"VCPU":1}'
        # Candidate.allocations -> bytes; isolated groups repeat them in
        # every permutation
        self.allocations = {}
        self.mappings = {}  # (suffix, (provider, ...)) -> bytes
        self.suffixes = {}  # suffix -> b'"_COMPUTE"'

    def uuid(self, rp):
        fragment = self.quoted.get(rp)
        if fragment is None:
            uuid = self.uuids[rp]
            fragment = _QUOTED.get(uuid)
            if fragment is None:
                if len(_QUOTED) > FRAGMENTS_KEPT:
                    _QUOTED.clear()
                fragment = _QUOTED[uuid] = _quoted(uuid)
            self.quoted[rp] = fragment
        return fragment

    def entry_of(self, rp, resources):
        """One provider's entry of its ((class, amount), ...)."""
        resources = tuple(resources)
        fragment = self.resources.get(resources)
        if fragment is None:
            names = self.names
            fragment = self.resources[resources] = orjson.dumps(
                [{names[rc]: n for rc, n in resources}]
            )[1:-1]
        return self.entry % (self.uuid(rp), fragment)

    def allocations_of(self, allocations):
        """The "allocations" member of a Candidate's allocations."""
        parts = []
        current, resources = None, []
        for rp, rc, amount in allocations:  # sorted by provider
            if rp != current:
                if resources:
                    parts.append(self.entry_of(current, resources))
                current, resources = rp, []
            resources.append((rc, amount))
        if resources:
            parts.append(self.entry_of(current, resources))
        fragment = self.allocations[allocations] = (
            self.open + b",".join(parts) + self.close
        )
        return fragment

    def mapping_of(self, suffix_rps):
        """A group's member of "mappings"."""
        suffix, rps = suffix_rps
        quoted = self.suffixes.get(suffix)
        if quoted is None:
            quoted = self.suffixes[suffix] = _quoted(suffix)
        fragment = self.mappings[suffix_rps] = b"%s:[%s]" % (
            quoted,
            b",".join([self.uuid(rp) for rp in rps]),
        )
        return fragment

    def candidates(self, candidates):
        """The JSON objects of ``candidates`` (a list of bytes): per
        candidate, lookups of the cached fragments (a Python call only
        to write a missing one) and one join."""
        known, write = self.allocations.get, self.allocations_of
        if not self.with_mappings:
            return [(known(c[0]) or write(c[0])) + b"}" for c in candidates]
        fragment, join = b'%s,"mappings":{%s}}', b",".join
        mapped, map_ = self.mappings.get, self.mapping_of
        return [
            fragment
            % (
                known(c[0]) or write(c[0]),
                join([mapped(m) or map_(m) for m in c[1]]),
            )
            for c in candidates
        ]

    def kept_candidates(self, candidates, kept, only=object):
        """``candidates`` as by ``candidates``, each taken from ``kept``
        (``_kept_candidates``) when it is the very object written before,
        and kept there otherwise when it is an ``only``."""
        found = kept.get
        out = [
            entry[1] if (entry := found(id(c))) is not None and entry[0] is c else None
            for c in candidates
        ]
        missing = [at for at, fragment in enumerate(out) if fragment is None]
        if missing:
            fresh = [candidates[at] for at in missing]
            for at, c, fragment in zip(missing, fresh, self.candidates(fresh)):
                out[at] = fragment
                if isinstance(c, only):
                    kept[id(c)] = (c, fragment)
        return out


def _summary_body(summary: Any, form: Form, requested: frozenset | None) -> dict:
    """One provider's summary object (dict) for the ``form``."""
    body: dict[str, Any] = {
        "resources": {
            rc: {"capacity": inventory.capacity, "used": inventory.used}
            for rc, inventory in summary.inventories
            if requested is None or rc in requested
        }
    }
    if form.traits:
        body["traits"] = summary.traits  # a tuple is a JSON list
    if form.tree_uuids:
        body["parent_provider_uuid"] = summary.parent_uuid
        body["root_provider_uuid"] = summary.root_uuid
    return body


# (Form, requested class names or None) -> {provider id: (Summary, its
# '"uuid":{...}' fragment)}. A provider's summary without usage is the
# same object request after request until the provider changes, so the
# fragment is reused while the summary *is* the one it was written from.
# Keyed by form first: hashing the Form (a dataclass, in Python) once per
# provider cost more than the lookup.
_FRAGMENTS: dict[tuple, dict[int, tuple[Any, bytes]]] = {}
FRAGMENTS_KEPT = 200_000  # fragments, in all
FRAGMENT_FORMS = 64  # (form, requested classes) kept: past them all go
# (Form, requested class names or None) -> a number never reused: the
# key of a tree's kept JSON (tree_summaries.Kept.json), hashed per tree
# as an int, not as a Form.
_FORM_NUMBERS: dict[tuple, int] = {}
_NUMBERS = itertools.count()


def summaries_json(result: engine.Result, form: Form) -> bytes:
    """The "provider_summaries" object, byte for byte what orjson writes
    of it as a dict in provider id order."""
    requested = None if form.all_inventories else frozenset(result.class_names.values())
    fragments = _fragments_of(form, requested)
    trees = _in_provider_order(result.trees)
    if trees is None:
        return b"{%s}" % b",".join(
            _fragments(result.summaries, fragments, form, requested)
        )
    key = _form_number(form, requested)
    parts = []
    for tree in trees:
        fragment = tree.json.get(key)
        if fragment is None:
            fragment = _tree_json(tree, key, fragments, form, requested)
        parts.append(fragment)
    return b"{%s}" % b",".join(parts)


def _fragments_of(form, requested):
    """The kept fragments of ``form`` and ``requested`` (``_FRAGMENTS``),
    every form's dropped first when they hold too many."""
    if (
        len(_FRAGMENTS) > FRAGMENT_FORMS
        or sum(map(len, _FRAGMENTS.values())) > FRAGMENTS_KEPT
    ):
        _FRAGMENTS.clear()
        _FORM_NUMBERS.clear()
    return _FRAGMENTS.setdefault((form, requested), {})


def _form_number(form, requested):
    """The key of the JSON of ``form`` and ``requested`` in a tree's
    ``tree_summaries.Kept.json``."""
    key = _FORM_NUMBERS.get((form, requested))
    if key is None:
        key = _FORM_NUMBERS[form, requested] = next(_NUMBERS)
    return key


def _tree_json(tree, key, fragments, form, requested):
    """The JSON of a tree's kept summaries (``tree``), written and kept
    under ``key``."""
    if len(tree.json) >= tree_summaries.FORMS_KEPT:
        tree.json.clear()
    fragment = tree.json[key] = b",".join(
        _fragments(tree.summaries, fragments, form, requested)
    )
    return fragment


# The form of the newest microversions (1.34 on, nova's among them).
NEWEST = Form(
    dict_allocations=True,
    traits=True,
    all_inventories=True,
    tree_uuids=True,
    mappings=True,
)


def write_summaries(trees: Iterable[tree_summaries.Kept], form: Form = NEWEST) -> int:
    """Write the JSON of the kept summaries ``trees`` in ``form`` (every
    class's inventories) where it is not kept yet: what the next answer
    showing them in that form would write first. For an idle worker's
    follower, once it made them (``catalog_index.warm``); from memory.
    How many trees it wrote."""
    assert form.all_inventories
    fragments = _fragments_of(form, None)
    key = _form_number(form, None)
    written = 0
    for tree in trees:
        if key not in tree.json:
            _tree_json(tree, key, fragments, form, None)
            written += 1
    return written


def _fragments(summaries, fragments, form, requested):
    """The '"uuid":{...}' fragment of each of ``summaries`` ({provider:
    Summary}) in provider id order, from ``fragments`` (the
    ``_FRAGMENTS`` of ``form`` and ``requested``) or written there."""
    parts = []
    for rp in sorted(summaries):
        summary = summaries[rp]
        known = fragments.get(rp)
        if known is None or known[0] is not summary:
            # request.dumps: a capacity can pass 64 bits (a ratio up to
            # 3.4e38), which orjson refuses.
            fragment = request.dumps(
                {summary.uuid: _summary_body(summary, form, requested)}
            )[1:-1]
            known = fragments[rp] = (summary, fragment)
        parts.append(known[1])
    return parts


def _in_provider_order(trees):
    """``trees`` (tree_summaries.Kept) sorted so that their providers
    follow in id order, when their id ranges do not interleave; else (or
    without them) None."""
    if trees is None:
        return None
    trees = sorted(trees, key=_FIRST)
    if all(a.last < b.first for a, b in zip(trees, trees[1:])):
        return trees
    return None


_FIRST = operator.attrgetter("first")


OPEN = b'{"allocation_requests":['
SUMMARIES = b'],"provider_summaries":'


def document_json(result: engine.Result, form: Form) -> bytes:
    """The response body (bytes)."""
    writer = _Writer(result.uuids, result.class_names, form)
    candidates = result.candidates
    if len(candidates) <= CANDIDATES_KEPT:
        written = writer.kept_candidates(
            candidates, _kept_candidates(form, result.class_names, len(candidates))
        )
    else:
        written = writer.candidates(candidates)
    return b"".join(
        (
            OPEN,
            b",".join(written),
            SUMMARIES,
            summaries_json(result, form),
            b"}",
        )
    )


# Candidates written per piece of a streamed body, and how many distinct
# allocations/mappings the writer remembers before starting afresh (they
# can be as many as the candidates).
BATCH = 2000
CACHE_ENTRIES = 100_000


def document_stream(stream: engine.Stream, form: Form) -> Iterator[bytes]:
    """The response body of an ``allocation_candidates.Stream`` in pieces,
    byte for byte ``document_json`` of the same answer. Closing it (the
    client went away) stops the search and ends the stream's read."""
    with stream:
        writer = _Writer({}, stream.class_names, form)
        head = OPEN
        for batch, uuids in stream.batches(BATCH):
            writer.uuids.update(uuids)
            if engine.Kept in set(map(type, batch)):
                # Only the kept ones: the others are new objects each time
                # and, unbounded, would push every kept one out.
                written = writer.kept_candidates(
                    batch,
                    _kept_candidates(form, stream.class_names, len(batch)),
                    engine.Kept,
                )
            else:
                written = writer.candidates(batch)
            yield head + b",".join(written)
            head = b","
            for cache in (writer.allocations, writer.mappings):
                if len(cache) > CACHE_ENTRIES:
                    cache.clear()
        yield b"%s%s%s}" % (
            OPEN if head == OPEN else b"",
            SUMMARIES,
            summaries_json(stream.summaries(), form),
        )

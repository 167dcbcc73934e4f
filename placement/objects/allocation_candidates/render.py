"""Stage 5: the response document for the request's microversion (§6).

A response can hold hundreds of thousands of candidates that reuse a few
thousand (provider, resources) pairs, so the document is written as JSON
directly: each distinct allocation or mapping fragment is encoded once
(by orjson) and candidates are joined from those fragments. The version is
looked at once per document.
"""
import orjson

from placement.api import microversion

DICT_FORM_SINCE = "1.12"
TRAITS_SINCE = "1.17"
ALL_INVENTORIES_SINCE = "1.27"
TREE_UUIDS_SINCE = "1.29"
MAPPINGS_SINCE = "1.34"


def _dict_entry(uuid, resources):
    return orjson.dumps({uuid: {"resources": resources}})[1:-1]


def _list_entry(uuid, resources):
    return orjson.dumps({"resource_provider": {"uuid": uuid},
                         "resources": resources})


# (encoder of one provider's entry, opening, closing) of "allocations".
ALLOCATIONS = microversion.VersionTable(
    (None, (_list_entry, b'{"allocations":[', b']')),
    (DICT_FORM_SINCE, (_dict_entry, b'{"allocations":{', b'}')))


class _Writer:
    """Candidates to JSON, one cached fragment per distinct piece."""

    def __init__(self, result, version):
        self.uuids = result.uuids
        self.names = result.class_names
        self.entry, self.open, self.close = ALLOCATIONS(version)
        self.with_mappings = version >= MAPPINGS_SINCE
        self.entries = {}       # (provider, ((class, amount), ...)) -> bytes
        self.mappings = {}      # (suffix, (provider, ...)) -> bytes

    def allocation(self, rp, resources):
        key = (rp, tuple(resources))
        fragment = self.entries.get(key)
        if fragment is None:
            fragment = self.entries[key] = self.entry(
                self.uuids[rp], {self.names[rc]: n for rc, n in resources})
        return fragment

    def mapping(self, suffix_rps):
        fragment = self.mappings.get(suffix_rps)
        if fragment is None:
            suffix, rps = suffix_rps
            fragment = self.mappings[suffix_rps] = orjson.dumps(
                {suffix: [self.uuids[rp] for rp in rps]})[1:-1]
        return fragment

    def candidate(self, candidate):
        parts = []
        current, resources = None, []
        for rp, rc, amount in candidate.allocations:   # sorted by provider
            if rp != current:
                if resources:
                    parts.append(self.allocation(current, resources))
                current, resources = rp, []
            resources.append((rc, amount))
        if resources:
            parts.append(self.allocation(current, resources))
        out = self.open + b",".join(parts) + self.close
        if self.with_mappings:
            out += b',"mappings":{%s}' % b",".join(
                [self.mapping(m) for m in candidate.mappings])
        return out + b"}"


def provider_summaries(result, version):
    requested = set(result.class_names.values())
    all_inventories = version >= ALL_INVENTORIES_SINCE
    with_traits = version >= TRAITS_SINCE
    with_tree = version >= TREE_UUIDS_SINCE
    out = {}
    for _, summary in sorted(result.summaries.items()):
        body = {"resources": {
            rc: {"capacity": inv.capacity, "used": inv.used}
            for rc, inv in sorted(summary.inventories.items())
            if all_inventories or rc in requested}}
        if with_traits:
            body["traits"] = list(summary.traits)
        if with_tree:
            body["parent_provider_uuid"] = summary.parent_uuid
            body["root_provider_uuid"] = summary.root_uuid
        out[summary.uuid] = body
    return out


def document_json(result, version):
    """The response body (bytes)."""
    writer = _Writer(result, version)
    return b"".join((
        b'{"allocation_requests":[',
        b",".join([writer.candidate(c) for c in result.candidates]),
        b'],"provider_summaries":',
        orjson.dumps(provider_summaries(result, version)),
        b"}"))


def document(result, version):
    """The response document as a dict (tests read it this way)."""
    return orjson.loads(document_json(result, version))

"""Stage 5: the response document for the request's microversion (§6)."""
from placement.api import microversion

DICT_FORM_SINCE = "1.12"
TRAITS_SINCE = "1.17"
ALL_INVENTORIES_SINCE = "1.27"
TREE_UUIDS_SINCE = "1.29"
MAPPINGS_SINCE = "1.34"


def _allocations_list(result, candidate):
    per_provider = _per_provider(result, candidate)
    return [{"resource_provider": {"uuid": uuid}, "resources": resources}
            for uuid, resources in per_provider.items()]


def _allocations_dict(result, candidate):
    return {uuid: {"resources": resources}
            for uuid, resources in _per_provider(result, candidate).items()}


def _per_provider(result, candidate):
    out = {}
    for rp, rc, amount in candidate.allocations:
        out.setdefault(result.uuids[rp], {})[result.class_names[rc]] = amount
    return out


ALLOCATIONS = microversion.VersionTable(
    (None, _allocations_list), (DICT_FORM_SINCE, _allocations_dict))


def allocation_request(result, candidate, version):
    body = {"allocations": ALLOCATIONS(version)(result, candidate)}
    if version >= MAPPINGS_SINCE:
        body["mappings"] = {suffix: [result.uuids[rp] for rp in rps]
                            for suffix, rps in candidate.mappings}
    return body


def provider_summary(summary, requested, version):
    inventories = summary.inventories
    if version < ALL_INVENTORIES_SINCE:
        inventories = {rc: inv for rc, inv in inventories.items()
                       if rc in requested}
    body = {"resources": {rc: {"capacity": inv.capacity, "used": inv.used}
                          for rc, inv in sorted(inventories.items())}}
    if version >= TRAITS_SINCE:
        body["traits"] = list(summary.traits)
    if version >= TREE_UUIDS_SINCE:
        body["parent_provider_uuid"] = summary.parent_uuid
        body["root_provider_uuid"] = summary.root_uuid
    return body


def document(result, version):
    requested = set(result.class_names.values())
    return {
        "allocation_requests": [allocation_request(result, c, version)
                                for c in result.candidates],
        "provider_summaries": {
            s.uuid: provider_summary(s, requested, version)
            for _, s in sorted(result.summaries.items())},
    }

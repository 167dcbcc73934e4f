"""Stage 5: the response document for the request's microversion (§6).

The version is looked at once per document, not once per candidate: a
response can hold hundreds of thousands of them.
"""
from placement.api import microversion

DICT_FORM_SINCE = "1.12"
TRAITS_SINCE = "1.17"
ALL_INVENTORIES_SINCE = "1.27"
TREE_UUIDS_SINCE = "1.29"
MAPPINGS_SINCE = "1.34"


def _allocations_list(per_provider):
    return [{"resource_provider": {"uuid": uuid}, "resources": resources}
            for uuid, resources in per_provider.items()]


def _allocations_dict(per_provider):
    return {uuid: {"resources": resources}
            for uuid, resources in per_provider.items()}


ALLOCATIONS = microversion.VersionTable(
    (None, _allocations_list), (DICT_FORM_SINCE, _allocations_dict))


def allocation_requests(result, version):
    """Every candidate of ``result`` as the version's JSON object."""
    shape = ALLOCATIONS(version)
    with_mappings = version >= MAPPINGS_SINCE
    uuids, names = result.uuids, result.class_names
    out = []
    for candidate in result.candidates:
        per_provider = {}
        for rp, rc, amount in candidate.allocations:
            uuid = uuids[rp]
            if uuid in per_provider:
                per_provider[uuid][names[rc]] = amount
            else:
                per_provider[uuid] = {names[rc]: amount}
        body = {"allocations": shape(per_provider)}
        if with_mappings:
            body["mappings"] = {suffix: [uuids[rp] for rp in rps]
                                for suffix, rps in candidate.mappings}
        out.append(body)
    return out


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


def document(result, version):
    return {"allocation_requests": allocation_requests(result, version),
            "provider_summaries": provider_summaries(result, version)}

"""A consumer's allocation in drained trees as the allocation candidate
request that would place it again (doc/drain.md "The equivalent
request"): one group per provider it uses there (its *roles*), the
unsuffixed group for the amounts on a root provider and a numbered group
for each other provider (a NUMA node, a PF); the call's traits where the
role's provider carries them; the call's target aggregates on the
unsuffixed group (an aggregate on a root spans its tree), or on every
group when there is none."""

import urllib.parse

from placement.objects import constraints
from placement.objects.allocation_candidates import request as ac_request
from placement.objects.drain import holdings as holdings_mod


def roles(holding: holdings_mod.Holding) -> list[tuple[str, int]]:
    """(group suffix, provider id) per drained provider of the consumer:
    "" for the first one that is a root, "1", "2"... for the others."""
    found, number = [], 0
    root = next((rp for rp in holding.drained if holding.parents[rp] is None), None)
    if root is not None:
        found.append(("", root))
    for rp in holding.drained:
        if rp != root:
            number += 1
            found.append((str(number), rp))
    return found


def _kept_traits(required, carried):
    """The call's ``required`` (RequiredTraits) narrowed to the any-of
    sets ``carried`` (the role's provider's trait names) meets; its
    forbidden traits as they are."""
    if not required:
        return None
    kept = tuple(any_of for any_of in required.any_of if any_of & carried)
    if not kept and not required.forbidden:
        return None
    return constraints.RequiredTraits(kept, required.forbidden)


def request_of(
    holding: holdings_mod.Holding,
    required: constraints.RequiredTraits | None,
    member_of: constraints.MemberOf | None,
    traits: dict,
) -> ac_request.Request:
    """The request of ``holding``'s drained part; ``traits``: {provider
    id: frozenset of the call's trait names it has}."""
    found = roles(holding)
    unsuffixed = bool(found) and found[0][0] == ""
    groups = []
    for suffix, rp in found:
        amounts = holding.allocations[rp]
        groups.append(
            ac_request.RequestGroup(
                suffix=suffix,
                resources=tuple(sorted(amounts.items())),
                required=_kept_traits(required, traits.get(rp, frozenset())),
                member_of=(member_of or None)
                if (suffix == "" or not unsuffixed)
                else None,
            )
        )
    suffixed = sum(1 for g in groups if g.suffix)
    return ac_request.Request(
        groups=tuple(groups), group_policy="none" if suffixed > 1 else None
    )


def _traits_value(required):
    items = []
    for any_of in required.any_of:
        names = sorted(any_of)
        items.append(names[0] if len(names) == 1 else "in:" + ",".join(names))
    return items + ["!" + t for t in sorted(required.forbidden)]


def _member_of_values(member_of):
    values = [
        "in:" + ",".join(sorted(a)) if len(a) > 1 else next(iter(a))
        for a in member_of.any_of
    ]
    forbidden = sorted(member_of.forbidden)
    if forbidden:
        values.append(
            "!in:" + ",".join(forbidden) if len(forbidden) > 1 else "!" + forbidden[0]
        )
    return values


def query_string(request: ac_request.Request) -> str:
    """``request`` as GET /allocation_candidates' query string."""
    pairs = []
    for group in request.groups:
        pairs.append(
            (
                "resources" + group.suffix,
                ",".join("%s:%d" % (rc, n) for rc, n in group.resources),
            )
        )
        if group.required:
            pairs.extend(
                ("required" + group.suffix, value)
                for value in _traits_value(group.required)
            )
        if group.member_of:
            pairs.extend(
                ("member_of" + group.suffix, value)
                for value in _member_of_values(group.member_of)
            )
    if request.group_policy:
        pairs.append(("group_policy", request.group_policy))
    return urllib.parse.urlencode(pairs, safe=":,!")

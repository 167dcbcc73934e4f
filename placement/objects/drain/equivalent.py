"""A consumer's allocation in drained trees as the allocation candidate
request that would place it again (doc/drain.md "The equivalent
request"): one group per provider it uses there (its *roles*), the
unsuffixed group for the amounts on a root provider and a numbered group
for each other provider (a NUMA node, a PF); the call's traits where the
role's provider carries them; the call's target aggregates on the
unsuffixed group (an aggregate on a root spans its tree), or on every
group when there is none. What the consumer keeps outside the drained
trees narrows it (``Keep``): a kept tree that is not sharing is its
anchor (its aggregates, or ``in_tree`` when it has none), a kept sharing
provider must serve the target (its aggregates)."""

import dataclasses
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


@dataclasses.dataclass(frozen=True)
class Keep:
    """What a consumer's kept providers ask of its target: ``anchor``,
    the root id of the one tree that is not sharing it keeps (None when
    it keeps only sharing providers, or nothing); ``member_of``, any-of
    aggregate sets (one per kept sharing provider, or the anchor tree's);
    ``in_tree``, a root uuid every group must stay in (an anchor tree, or
    a kept sharing provider's, in no aggregate); ``refused``, why no
    request is equivalent (it keeps several trees that are not sharing)."""

    anchor: int | None = None
    member_of: tuple = ()
    in_tree: str | None = None
    refused: str | None = None


def keep_of(holding: holdings_mod.Holding, facts: holdings_mod.KeptFacts) -> Keep:
    """``holding``'s Keep, from the facts of its kept providers."""
    kept = [facts.providers[rp] for rp in holding.kept() if rp in facts.providers]
    if not kept:
        return Keep()
    anchors = sorted({k.root for k in kept if not k.sharing})
    if len(anchors) > 1:
        return Keep(
            refused="its allocations outside the drained trees are in %d trees "
            "that are not sharing providers: no allocation candidate has more "
            "than one anchor, so no request is equivalent" % len(anchors)
        )
    if anchors:
        (anchor,) = anchors
        uuid = next(k.root_uuid for k in kept if k.root == anchor)
        aggregates = facts.tree_aggregates.get(anchor, frozenset())
        if aggregates:
            return Keep(anchor=anchor, member_of=(frozenset(aggregates),))
        return Keep(anchor=anchor, in_tree=uuid)
    sets, in_tree = [], None
    for k in kept:
        if k.aggregates:
            sets.append(frozenset(k.aggregates))
        else:
            # A sharing provider in no aggregate serves its own tree only.
            in_tree = k.root_uuid
    return Keep(member_of=tuple(dict.fromkeys(sets)), in_tree=in_tree)


def _with(member_of, sets):
    """``member_of`` (or None) with the any-of ``sets`` added."""
    if not sets:
        return member_of or None
    if member_of is None:
        return constraints.MemberOf(tuple(sets))
    extra = tuple(a for a in sets if a not in member_of.any_of)
    return constraints.MemberOf(member_of.any_of + extra, member_of.forbidden)


def request_of(
    holding: holdings_mod.Holding,
    required: constraints.RequiredTraits | None,
    member_of: constraints.MemberOf | None,
    traits: dict,
    keep: Keep | None = None,
) -> ac_request.Request:
    """The request of ``holding``'s drained part; ``traits``: {provider
    id: frozenset of the call's trait names it has}; ``keep``: what its
    kept providers ask of the target."""
    keep = keep or Keep()
    member_of = _with(member_of, keep.member_of)
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
                in_tree=keep.in_tree,
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
        if group.in_tree:
            pairs.append(("in_tree" + group.suffix, group.in_tree))
    if request.group_policy:
        pairs.append(("group_policy", request.group_policy))
    return urllib.parse.urlencode(pairs, safe=":,!")

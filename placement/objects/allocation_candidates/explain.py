"""Why GET /allocation_candidates finds what it finds.

The counts come from the engine's own code, not a copy: ``trees.Trees``
runs its per-group filters with an observer that records what each one
leaves, and ``search.Search`` is run per tree with the request-wide
constraints switched on one at a time (``same_subtree``, then isolate,
then the full search). The search of a tree stops at its first candidate
and after ``BUDGET`` options tried, so wide trees are never walked in
full; a tree whose budget runs out counts as failing (``truncated``).
"""

import typing

import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects.allocation_candidates import answering as engine
from placement.objects.allocation_candidates import catalog_index
from placement.objects.allocation_candidates import providers
from placement.objects.allocation_candidates import request as ac_request
from placement.objects.allocation_candidates import search
from placement.objects.allocation_candidates import trees

BUDGET = 20000  # options tried per tree and step
CLOSEST = 5
_WIDE_CLAUSES = {
    "same_subtree": "same_subtree",
    "isolate": "group_policy=isolate",
    "required": "the unsuffixed group's traits on the providers serving it",
    "fit": "the combined amounts in one tree",
}


class _OutOfBudget(Exception):
    pass


class _Counted(tuple):
    """A slot's options whose iteration spends the walk's budget."""

    def __new__(cls, options, budget):
        self = super().__new__(cls, options)
        self.budget = budget
        return self

    def __iter__(self):
        for option in super().__iter__():
            self.budget[0] -= 1
            if self.budget[0] < 0:
                raise _OutOfBudget()
            yield option


class _Recorder:
    """The ``Trees.observe`` hook: what each filter leaves, per group."""

    def __init__(self):
        self.steps = {}  # suffix -> [(filter name, count)]

    def __call__(self, group, name, left):
        self.steps.setdefault(group.suffix, []).append((name, len(left)))


class _Explainer:
    def __init__(self, conn, index, request):
        self.conn = conn
        self.index = index
        self.request = request

    def label(self, name):
        """("capacity", class id) -> "capacity:VCPU"."""
        if isinstance(name, tuple):
            return "%s:%s" % (name[0], self.classes[name[1]])
        return name

    def snapshot(self, class_ids, trait_ids, aggregate_ids):
        """What the explanation looks at: the index's providers with
        today's usage (a drain plan's explainer gives its own)."""
        return providers.load_snapshot(
            self.index,
            class_ids.values(),
            set(trait_ids.values()),
            aggregate_ids,
            whole_trees=True,
        )

    def run(self):
        groups, class_ids, trait_ids, aggregate_ids = engine._resolve(
            self.index, self.request
        )
        self.classes = {i: n for n, i in class_ids.items()}
        self.asked = {g.suffix: g for g in self.request.groups}
        self.aggregates = {
            i: u
            for u, i in self.index.aggregate_ids(
                set().union(
                    *(
                        set().union(*g.any_aggregates, g.forbidden_aggregates)
                        for g in self.request.groups
                    )
                )
            ).items()
        }
        self.traits = {i: n for n, i in trait_ids.items()}
        snapshot = self.snapshot(class_ids, trait_ids, aggregate_ids)
        self.root_required = frozenset(trait_ids[t] for t in self.request.root_required)
        self.root_forbidden = frozenset(
            trait_ids[t] for t in self.request.root_forbidden
        )
        forest = trees.Trees(snapshot, self.root_required, self.root_forbidden)
        # Whether the unsuffixed group spreads (Trees.plans: not on lone
        # providers).
        self._spreads = bool(snapshot.nested or snapshot.serves)
        recorder = forest.observe = _Recorder()
        plans = forest.plans(groups)
        forest.observe = None
        self.forest, self.groups = forest, {g.suffix: g for g in groups}
        wide, failed_at, truncated = self._request_wide(forest, groups, plans)
        closest = self._closest(groups, failed_at)
        funnels = {
            suffix: [
                {
                    "filter": self.label(name),
                    "trees" if name == "trees" else "providers": count,
                }
                for name, count in steps
            ]
            for suffix, steps in recorder.steps.items()
        }
        cause = self._reason(recorder.steps, wide, groups)
        nearest = cause and _nearest(closest, cause)
        _name(self.index, closest[:CLOSEST] + ([nearest] if nearest else []))
        return {
            "groups": funnels,
            "request": wide,
            "closest": closest[:CLOSEST],
            "truncated": truncated,
            "reason": cause and _sentence(cause, nearest),
        }

    def _request_wide(self, forest, groups, plans):
        request = self.request
        # Trees holding a requested class or served by a sharing provider
        # that does (the snapshot may hold more).
        roots = {forest.root(rp) for rp, _ in forest.snap.inventories}
        roots.update(*forest.snap.serves.values())
        wide = [{"filter": "trees", "trees": len(roots)}]
        if self.root_required or self.root_forbidden:
            wide.append(
                {"filter": "root_required", "trees": len(forest.anchor_ok & roots)}
            )
        wide.append({"filter": "groups", "trees": len(plans)})
        steps = []
        if request.same_subtree:
            steps.append(("same_subtree", False))
        if request.isolate:
            steps.append(("isolate", True))
        if _spread_traits(groups, plans):
            steps.append(("required", request.isolate))
        steps.append(("fit", request.isolate))
        passing, failed_at, truncated = plans, {}, False
        for name, isolate in steps:
            walker = search.Search(
                forest,
                groups,
                request.same_subtree,
                isolate,
                sums=name == "fit",
                traits=name in ("required", "fit"),
            )
            kept = []
            for plan in passing:
                found, out_of_budget = _exists(walker, plan)
                truncated |= out_of_budget
                if found:
                    kept.append(plan)
                else:
                    failed_at[plan.anchor] = (name, plan)
            wide.append({"filter": name, "trees": len(kept)})
            passing = kept
        return wide, failed_at, truncated

    def _closest(self, groups, failed_at):
        """Providers failing exactly one filter of their group (nearest
        capacity misses first), then trees failing one request-wide step."""
        forest = self.forest
        out = []
        for group in groups:
            for rc, start, filters in self._provider_sets(group):
                for rp in start:
                    failing = [name for name, keep in filters if not keep(rp)]
                    if len(failing) == 1:
                        entry = {
                            "provider": rp,
                            "group": group.suffix,
                            "filter": self.label(failing[0]),
                            "lacks": self._lacks(group, failing[0], rp),
                        }
                        if rc is not None:
                            entry["resource_class"] = self.classes[rc]
                        out.append(entry)
        out.sort(key=_nearness)
        for anchor, (step, plan) in sorted(failed_at.items()):
            entry = {"tree": anchor, "filter": step}
            if step == "required":
                entry["lacks"] = self._spread_lacks(groups, plan)
            out.append(entry)
        if self.root_required or self.root_forbidden:
            for plan in trees.Trees(forest.snap).plans(groups):
                if plan.anchor not in forest.anchor_ok:
                    out.append(self._root_miss(plan.anchor))
        return out

    def _provider_sets(self, group):
        """[(class id or None, providers, filters)]: the providers judged
        for ``group`` and the (name, keep) filters they are judged by. The
        unsuffixed group spread over trees or sharing providers has one
        set per class (its providers are judged in that class's role);
        any other group has one set (class None)."""
        forest = self.forest
        if group.spread and group.resources and self._spreads:
            return [
                (
                    rc,
                    forest.holders.get(rc, ()),
                    forest.spread_filters(group, rc, n) + _anchoring(forest, group),
                )
                for rc, n in group.resources
            ]
        start = sorted(
            {rp for rc, _ in group.resources for rp in forest.holders.get(rc, ())}
        )
        return [(None, start or forest.starts(group), forest.filters(group))]

    def _spread_lacks(self, groups, plan):
        """The unsuffixed group's traits that no provider able to serve it
        in ``plan``'s tree has (they are judged on those providers
        together)."""
        spread = [
            i
            for i, slot in enumerate(plan.slots)
            if slot.spread and groups[slot.group].any_traits
        ]
        found = set().union(
            *(self.forest.traits(rp) for i in spread for rp, _ in plan.options[i])
        )
        any_traits = {
            any_of
            for i in spread
            for any_of in groups[plan.slots[i].group].any_traits
            if not found & any_of
        }
        return {
            "missing_traits": sorted(
                self.traits[t]
                for any_of in any_traits
                if len(any_of) == 1
                for t in any_of
            ),
            "missing_any_of": sorted(
                sorted(self.traits[t] for t in any_of)
                for any_of in any_traits
                if len(any_of) > 1
            ),
        }

    def _root_miss(self, anchor):
        traits = self.forest.traits(anchor)
        return {
            "tree": anchor,
            "filter": "root_required",
            "lacks": {
                "missing_traits": sorted(
                    self.traits[t] for t in self.root_required - traits
                ),
                "forbidden_traits": sorted(
                    self.traits[t] for t in self.root_forbidden & traits
                ),
            },
        }

    def _lacks(self, group, name, rp):
        """What provider ``rp`` lacks to pass filter ``name`` of ``group``."""
        forest = self.forest
        asked = self.asked[group.suffix]
        if name == "in_tree":
            return {"in_tree": asked.in_tree}
        if name == "resources":
            return {
                "resources": [
                    self.classes[rc]
                    for rc, _ in group.resources
                    if (rp, rc) not in forest.snap.inventories
                ]
            }
        if isinstance(name, tuple):
            return {self.classes[name[1]]: self._capacity_lack(group, name[1], rp)}
        traits = forest.traits(rp)
        if name == "required":
            return {
                "missing_traits": sorted(
                    self.traits[t]
                    for any_of in group.any_traits
                    if len(any_of) == 1 and not traits & any_of
                    for t in any_of
                )
            }
        if name == "any_of":
            return {
                "missing_any_of": [
                    sorted(self.traits[t] for t in any_of)
                    for any_of in group.any_traits
                    if len(any_of) > 1 and not traits & any_of
                ]
            }
        if name == "forbidden":
            return {
                "forbidden_traits": sorted(
                    self.traits[t] for t in traits & group.forbidden_traits
                )
            }
        held = forest.aggregates(rp)
        if group.spread and (forest.snap.nested or forest.snap.serves):
            held = held | forest.aggregates(forest.root(rp))  # the tree's count
        aggregates = {self.aggregates[a] for a in held if a in self.aggregates}
        return {
            "missing_aggregates": [
                sorted(any_of)
                for any_of in asked.any_aggregates
                if not aggregates & any_of
            ],
            "forbidden_aggregates": sorted(aggregates & asked.forbidden_aggregates),
        }

    def _capacity_lack(self, group, rc, rp):
        amount = dict(group.resources)[rc]
        inventory = self.forest.snap.inventories.get((rp, rc))
        if inventory is None:
            return {"requested": amount, "free": 0}
        lack = {
            "requested": amount,
            "free": max(inventory.capacity - inventory.used, 0),
        }
        if not inventory.min_unit <= amount <= inventory.max_unit:
            lack.update(min_unit=inventory.min_unit, max_unit=inventory.max_unit)
        if amount % inventory.step_size:
            lack["step_size"] = inventory.step_size
        return lack

    def _reason(self, steps, wide, groups):
        """The ``_Cause`` of the first filter that left nothing, or None.
        A ``groups`` step it blames on a group's filter gets that filter
        as its ``emptied_by``."""
        if wide[1]["filter"] == "root_required" and not wide[1]["trees"]:
            clause = (
                "root_required: none of %d trees has the required traits"
                % (wide[0]["trees"])
            )
            return _Cause(clause, "root_required")
        for suffix, funnel in steps.items():
            spreads = self._spreads and self.groups[suffix].spread
            before, rc = None, None
            for name, count in funnel:
                if isinstance(name, tuple) and name[0] == "resources":
                    rc = name[1]
                if count == 0:
                    clause = "group '%s', %s: %s" % (
                        suffix,
                        self.label(name),
                        self._group_clause(self.groups[suffix], name, before),
                    )
                    return _Cause(
                        clause,
                        self.label(name),
                        suffix,
                        self.classes[rc] if spreads else None,
                        # A provider failing this filter alone is expected
                        # (first steps and trees have none by nature).
                        expects_closest=before is not None
                        and name != "trees"
                        and not (isinstance(name, tuple) and name[0] == "resources"),
                    )
                before = (name, count)
        for i, step in enumerate(wide):
            if step["trees"] == 0:
                if step["filter"] == "groups":
                    blame = self._groups_blame(groups)
                    if blame is not None:
                        step["emptied_by"] = blame.emptied_by(self)
                        return blame.cause(self, wide[i - 1]["trees"])
                clause = "%s: %s" % (
                    step["filter"],
                    _wide_clause(step["filter"], wide[i - 1]),
                )
                return _Cause(clause, step["filter"])
        return None

    def _units(self, groups):
        """[_Unit]: the request's groups as explain judges their providers,
        the unsuffixed group spread over trees one unit per class (its
        per-class funnel)."""
        forest = self.forest
        units = []
        for group in groups:
            for rc, start, filters in self._provider_sets(group):
                if rc is None:
                    steps = [(n, k, forest.anchors_of) for n, k in filters]
                else:
                    steps = self._spread_steps(group, rc)
                units.append(_Unit(group, rc, start, steps, forest.anchors_of))
        return units

    def _spread_steps(self, group, rc):
        """The per-class funnel of the spread unsuffixed group as
        (name, keep, anchors of a provider): its provider filters, then
        in_tree and member_of, which narrow the trees a provider may
        serve rather than the providers."""
        forest = self.forest
        amount = dict(group.resources)[rc]
        steps = [
            (name, keep, forest.anchors_of)
            for name, keep in forest.spread_filters(group, rc, amount)
        ]
        if group.in_tree_root is not None:
            steps.append(
                (
                    "in_tree",
                    lambda rp: True,
                    lambda rp: forest.spread_anchors(rp, group, aggregates=False),
                )
            )
        if group.any_aggregates or group.forbidden_aggregates:
            steps.append(
                (
                    "member_of",
                    lambda rp: True,
                    lambda rp: forest.spread_anchors(rp, group),
                )
            )
        return steps

    def _groups_blame(self, groups):
        """When every group has trees but no tree serves them all: the
        first filter of some group (or class of the spread group) that
        took away every tree the others can be served in, as a
        ``_Blame``; None when no single filter did (the groups' providers
        never share a tree)."""
        units = self._units(groups)
        finals = [unit.anchors() for unit in units]
        for i, unit in enumerate(units):
            others = [f for j, f in enumerate(finals) if j != i]
            if not others:
                continue
            shared = set.intersection(*others)
            left = list(unit.start)
            if not _anchors(left, unit.anchors_of) & shared:
                continue
            for name, keep, anchors_of in unit.steps:
                left = [rp for rp in left if keep(rp)]
                found = _anchors(left, anchors_of)
                if not found & shared:
                    apart = [
                        u
                        for j, u in enumerate(units)
                        if j != i and not found & finals[j]
                    ] or [u for j, u in enumerate(units) if j != i]
                    return _Blame(unit, name, len(found), apart, shared)
        return None

    def _group_clause(self, group, name, before):
        if isinstance(name, tuple) and name[0] == "resources":
            return "no provider has %s inventory" % self.classes[name[1]]
        if name == "all":
            return "no provider at all"
        previous = self.label(before[0]) if before else "the request"
        count = before[1] if before else 0
        if isinstance(name, tuple):  # capacity
            return "%d providers have %s but none has %d free" % (
                count,
                self.classes[name[1]],
                dict(group.resources)[name[1]],
            )
        if name == "trees":
            return "%d providers pass its filters but none is in a usable tree" % count
        return "%d providers pass %s but none passes %s" % (count, previous, name)


def _spread_traits(groups, plans):
    """Whether the unsuffixed group's traits are judged on the providers
    serving it together (nested or sharing layouts), not per provider."""
    return bool(plans) and any(
        slot.spread and groups[slot.group].any_traits for slot in plans[0].slots
    )


def _anchoring(forest, group):
    """The unsuffixed group's member_of as a provider filter: some tree
    it may serve passes it with the provider's aggregates."""
    if not (group.any_aggregates or group.forbidden_aggregates):
        return []
    return [("member_of", lambda rp: bool(forest.spread_anchors(rp, group)))]


def _wide_clause(name, previous):
    if name == "trees":
        return "no tree holds the requested resources"
    if name == "groups":
        return "none of %d trees has providers for every group" % previous["trees"]
    return "%d trees have providers for every group but none satisfies %s" % (
        previous["trees"],
        _WIDE_CLAUSES[name],
    )


class _Cause(typing.NamedTuple):
    """The first filter that left nothing, as the reason names it."""

    clause: str
    filter: str
    group: str | None = None  # None: a request-wide filter
    resource_class: str | None = None  # the spread group's class
    # Whether a provider failing the filter alone (and only it) may exist:
    # then the reason names one, or says there is none.
    expects_closest: bool = False
    # The providers the closest one is picked from (ids); None: any.
    among: frozenset | None = None


class _Unit(typing.NamedTuple):
    """A group's providers and their funnel: (name, keep, anchors of a
    provider) per step; ``rc`` the class for the spread group."""

    group: trees.Group
    rc: int | None
    start: typing.Sequence[int]
    steps: list
    anchors_of: typing.Callable  # a provider's trees before any step

    def anchors(self):
        """The trees the unit can be served in after all its steps."""
        left, anchors_of = list(self.start), self.anchors_of
        for _name, keep, step_anchors in self.steps:
            left = [rp for rp in left if keep(rp)]
            anchors_of = step_anchors
        return _anchors(left, anchors_of)


class _Blame(typing.NamedTuple):
    """The filter of ``unit`` that left it no tree the ``apart`` units
    can be served in (``shared``: the trees all other units have)."""

    unit: _Unit
    filter: object
    trees: int  # the unit's trees after the filter
    apart: list
    shared: set

    def emptied_by(self, explainer):
        found = {
            "group": self.unit.group.suffix,
            "filter": explainer.label(self.filter),
            "trees": self.trees,
        }
        if self.unit.rc is not None:
            found["resource_class"] = explainer.classes[self.unit.rc]
        return found

    def cause(self, explainer, trees_before):
        def named(unit):
            classes = (
                [unit.rc]
                if unit.rc is not None
                else [rc for rc, _ in unit.group.resources]
            )
            return "group '%s' (%s)" % (
                unit.group.suffix,
                ", ".join(explainer.classes[rc] for rc in classes),
            )

        apart = [named(u) for u in self.apart]
        clause = (
            "groups: none of %d trees has providers for every group: %s "
            "leaves %s %d trees, where %s %s"
            % (
                trees_before,
                explainer.label(self.filter),
                named(self.unit),
                self.trees,
                " and ".join(apart),
                "has no provider" if len(apart) == 1 else "have no providers together",
            )
        )
        among = frozenset(
            rp for rp in self.unit.start if set(self.unit.anchors_of(rp)) & self.shared
        )
        return _Cause(
            clause,
            explainer.label(self.filter),
            self.unit.group.suffix,
            explainer.classes[self.unit.rc] if self.unit.rc is not None else None,
            expects_closest=True,
            among=among,
        )


def _anchors(providers, anchors_of):
    return {a for rp in providers for a in anchors_of(rp)}


def _nearest(closest, cause):
    """The first entry of ``closest`` failing the cause's filter alone, in
    its group and class (any group for a request-wide filter)."""
    for entry in closest:
        if (
            entry["filter"] == cause.filter
            and entry.get("group", cause.group) == cause.group
            and entry.get("resource_class") == cause.resource_class
            and (cause.among is None or entry.get("provider") in cause.among)
        ):
            return entry
    return None


def _sentence(cause, nearest):
    clause = cause.clause
    if nearest is None:
        if cause.expects_closest:
            return (
                "%s (no closest host: every host that passes the earlier "
                "filters also fails another)" % clause
            )
        return clause
    detail = ""
    for key, value in nearest.get("lacks", {}).items():
        if isinstance(value, dict):
            detail = ", %d free" % value["free"]
        elif isinstance(value, list) and value:
            detail = ", %s %s" % (
                key.replace("_", " "),
                ", ".join(v if isinstance(v, str) else "|".join(v) for v in value),
            )
        else:
            continue
        break
    return "%s (closest: %s%s)" % (clause, nearest["name"], detail)


def _name(index, closest):
    """The entries of ``closest`` name providers (or roots) by id: give
    them their uuid and name, which the reason quotes (from the catalog
    when the index answers from one)."""
    ids = {e.get("provider", e.get("tree")) for e in closest}
    catalog = getattr(index, "catalog", None)
    if catalog is not None:
        found = {rp: (catalog.uuids[rp], catalog.names[rp]) for rp in ids}
    else:
        rp = tables.resource_providers
        found = {
            row[0]: row[1:]
            for row in index.conn.execute(
                sa.select(rp.c.id, rp.c.uuid, rp.c.name).where(rp.c.id.in_(sorted(ids)))
            )
        }
    for entry in closest:
        key = "provider" if "provider" in entry else "tree"
        if isinstance(entry[key], int):
            entry[key], entry["name"] = found[entry[key]]


def _exists(walker, plan):
    """(has a candidate, budget ran out) for one tree's plan."""
    budget = [BUDGET]
    counted = plan._replace(options=tuple(_Counted(o, budget) for o in plan.options))
    try:
        return next(iter(walker.candidates(counted)), None) is not None, False
    except _OutOfBudget:
        return False, True


def _nearness(entry):
    """Capacity misses by how much is missing, then the rest."""
    (value,) = entry["lacks"].values() if len(entry["lacks"]) == 1 else (None,)
    if isinstance(value, dict):
        return (0, value["requested"] - value["free"])
    return (1, 0)


def unmatched(e: providers.NoCandidates) -> dict:
    """The explain document (without ``candidates``) of a request whose
    ``in_tree`` or ``member_of`` names nothing that exists."""
    suffix, name = e.args
    return {
        "groups": {suffix: [{"filter": name, "providers": 0}]},
        "request": [],
        "closest": [],
        "truncated": False,
        "reason": "group '%s': %s names %s"
        % (
            suffix,
            name,
            "no existing provider"
            if name == "in_tree"
            else "only aggregates no provider is in",
        ),
    }


def explain(
    db: db_api.Database, request: ac_request.Request, options: engine.Options
) -> dict:
    """The explain document (a dict) for a checked ``request.Request``."""
    real = engine.find(db, request, options)
    with db.reader() as conn:
        index = catalog_index.index(db, conn)
        try:
            document = _Explainer(conn, index, request).run()
        except providers.NoCandidates as e:
            document = unmatched(e)
    count = len(real.candidates)
    document = {"candidates": count, **document}
    if count:
        document["reason"] = "%d allocation candidates found." % count
    elif document["reason"] is None:
        # Every count is positive: the microversion's rule of one provider
        # per tree (before 1.29) removed every candidate.
        document["reason"] = (
            "candidates exist but each uses several providers of one tree, "
            "which this microversion does not allow (from 1.29 it does)"
        )
    return document

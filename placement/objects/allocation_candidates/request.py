"""Stage 1: the request as groups plus request-wide options, and the
structural rules checked before any search (doc/api.md "Structure errors").

Pure: no database. Per-key value grammars are parsed by the handler with
``placement.handlers.query_params``; this module only assembles and checks.
"""

import dataclasses

from placement import error_codes
from placement import exception
from placement.objects import constraints


@dataclasses.dataclass(frozen=True)
class RequestGroup:
    """One request group; ``suffix`` "" is the unsuffixed group."""

    suffix: str
    resources: tuple = ()  # ((class name, amount), ...)
    required: constraints.RequiredTraits | None = None
    member_of: constraints.MemberOf | None = None
    in_tree: str | None = None

    @property
    def any_traits(self) -> tuple[frozenset[str], ...]:
        return self.required.any_of if self.required else ()

    @property
    def forbidden_traits(self) -> frozenset[str]:
        return self.required.forbidden if self.required else frozenset()

    @property
    def any_aggregates(self) -> tuple[frozenset[str], ...]:
        return self.member_of.any_of if self.member_of else ()

    @property
    def forbidden_aggregates(self) -> frozenset[str]:
        return self.member_of.forbidden if self.member_of else frozenset()


@dataclasses.dataclass(frozen=True)
class Request:
    groups: tuple  # RequestGroup, query-string order
    group_policy: str | None = None  # None | "none" | "isolate"
    same_subtree: tuple = ()  # (tuple of suffixes, ...)
    root_required: frozenset = frozenset()
    root_forbidden: frozenset = frozenset()
    limit: int | None = None

    @property
    def suffixed(self) -> list["RequestGroup"]:
        return [g for g in self.groups if g.suffix]

    @property
    def isolate(self) -> bool:
        return self.group_policy == "isolate"


def _param(name, suffix):
    return name + suffix


def check_structure(
    request: Request, resourceless_groups: bool, trait_conflicts: bool
) -> None:
    """Structural rules, trait conflicts and group_policy, in upstream's
    order (it decides which 400 a client sees). ``resourceless_groups``:
    a suffixed group may name no resources if it is in a same_subtree;
    ``trait_conflicts``: a trait both required and forbidden is a 400."""
    if resourceless_groups:
        _check_resourceless_groups(request)
    else:
        _check_groups_have_resources(request)
    if trait_conflicts:
        _check_trait_conflicts(request)
    if len(request.suffixed) > 1 and request.group_policy is None:
        raise exception.BadRequest(
            'The "group_policy" parameter is required when specifying more '
            'than one "resources{N}" parameter.'
        )


def _check_groups_have_resources(request):
    orphans = [g for g in request.groups if not g.resources]
    traits = [_param("required", g.suffix) for g in orphans if g.required]
    if traits:
        raise exception.BadRequest(
            "All traits parameters must be associated with resources.  "
            "Found the following orphaned traits keys: %s" % ", ".join(traits)
        )
    aggs = [_param("member_of", g.suffix) for g in orphans if g.member_of]
    if aggs:
        raise exception.BadRequest(
            "All member_of parameters must be associated with resources. "
            "Found the following orphaned member_of keys: %s" % ", ".join(aggs)
        )
    if orphans:
        raise exception.BadRequest("All request groups must specify resources.")
    if not request.groups:
        raise exception.BadRequest(
            "At least one request group (`resources` or `resources{$S}`) is required."
        )


def _check_resourceless_groups(request):
    if not any(g.resources for g in request.groups):
        raise exception.BadRequest(
            "There must be at least one resources or resources[$S] parameter.",
            code=error_codes.QUERY_MISSING_VALUE,
        )
    in_subtree = {s for constraint in request.same_subtree for s in constraint}
    bad = [
        g.suffix
        for g in request.groups
        if not g.resources and g.suffix not in in_subtree
    ]
    if bad:
        raise exception.BadRequest(
            "Resourceless suffixed group request should be specified in "
            "`same_subtree` query param: bad group(s) - %s." % bad,
            code=error_codes.QUERY_BAD_VALUE,
        )
    existing = [g.suffix for g in request.groups]
    unknown = [
        s
        for constraint in request.same_subtree
        for s in constraint
        if s not in existing
    ]
    if unknown:
        raise exception.BadRequest(
            "Real suffixes should be specified in `same_subtree`: %s not "
            "found in %s." % (unknown, existing),
            code=error_codes.QUERY_BAD_VALUE,
        )


def _check_trait_conflicts(request):
    conflicts = []
    for group in request.groups:
        forbidden = group.forbidden_traits
        clashing = sorted(
            {t for any_of in group.any_traits if any_of <= forbidden for t in any_of}
        )
        if clashing:
            conflicts.append(
                "%s: (%s)" % (_param("required", group.suffix), ", ".join(clashing))
            )
    if conflicts:
        raise exception.BadRequest(
            "Conflicting required and forbidden traits found in the following "
            "traits keys: %s" % ", ".join(conflicts)
        )

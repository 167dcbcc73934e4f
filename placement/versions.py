"""The microversion table: every behaviour that depends on the requested
microversion, named once with the version that introduced it.

Code never compares with a version literal: it asks ``version >=
versions.FEATURE`` (or picks from a ``Table`` whose rows are these
names), so the table below is the one place to read what changed when.
Negotiation (the ``OpenStack-API-Version`` header) is
``placement.web.microversion``; see "Microversions" in
doc/architecture.md. This module imports nothing from the project: any
layer that speaks HTTP (api, handlers, schemas) may read it. The object
layer does not: handlers turn versions into plain flags for it.
"""

import functools
from typing import Any


@functools.total_ordering
class Version:
    """A microversion: a comparable (major, minor)."""

    __slots__ = ("major", "minor")

    def __init__(self, major: int, minor: int) -> None:
        self.major, self.minor = major, minor

    @classmethod
    def parse(cls, text: str) -> "Version":
        major, minor = text.split(".", 1)
        return cls(int(major), int(minor))

    def __str__(self) -> str:
        return "%d.%d" % (self.major, self.minor)

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return str(self) == other
        if not isinstance(other, Version):
            return NotImplemented
        return (self.major, self.minor) == (other.major, other.minor)

    def __lt__(self, other: "Version") -> bool:
        return (self.major, self.minor) < (other.major, other.minor)

    def __ge__(self, other: "Version") -> bool:
        return (self.major, self.minor) >= (other.major, other.minor)

    # total_ordering would make these of the two above, a call more each.
    def __le__(self, other: "Version") -> bool:
        return (self.major, self.minor) <= (other.major, other.minor)

    def __gt__(self, other: "Version") -> bool:
        return (self.major, self.minor) > (other.major, other.minor)

    def __hash__(self) -> int:
        return hash((self.major, self.minor))

    def within(self, first: "Version | None", before: "Version | None") -> bool:
        """From ``first`` (None: any) up to, not including, ``before``."""
        return (first is None or self >= first) and (before is None or self < before)


# The versions this service speaks.
MIN = Version(1, 0)
MAX = Version(1, 39)

# Each behaviour with the version that introduced it.
AGGREGATES = Version(1, 1)  # /resource_providers/{uuid}/aggregates and link
RESOURCE_CLASSES = Version(1, 2)  # /resource_classes
PROVIDER_MEMBER_OF = Version(1, 3)  # member_of on GET /resource_providers
PROVIDER_RESOURCES = Version(1, 4)  # resources on GET /resource_providers
DELETE_INVENTORIES = Version(1, 5)  # DELETE .../inventories (405 before)
TRAITS = Version(1, 6)  # /traits, provider traits and their link
ENSURE_RESOURCE_CLASS = Version(1, 7)  # body-less PUT /resource_classes/{n}
OWNER_REQUIRED = Version(1, 8)  # allocation writes name project and user
USAGES = Version(1, 9)  # GET /usages
ALLOCATION_CANDIDATES = Version(1, 10)  # GET /allocation_candidates
ALLOCATIONS_LINK = Version(1, 11)  # the provider's "allocations" link
DICT_ALLOCATIONS = Version(1, 12)  # allocations keyed by provider; owner shown
POST_ALLOCATIONS = Version(1, 13)  # POST /allocations
NESTED_PROVIDERS = Version(1, 14)  # parent/root provider uuids, in_tree
LAST_MODIFIED = Version(1, 15)  # last-modified and cache-control headers
CANDIDATE_LIMIT = Version(1, 16)  # limit on GET /allocation_candidates
CANDIDATE_TRAITS = Version(1, 17)  # required on candidates; summary traits
PROVIDER_TRAITS = Version(1, 18)  # required on GET /resource_providers
AGGREGATES_GENERATION = Version(1, 19)  # aggregates carry the generation
CREATE_RETURNS_PROVIDER = Version(1, 20)  # POST provider answers 200 + body
CANDIDATE_MEMBER_OF = Version(1, 21)  # member_of on candidates
FORBIDDEN_TRAITS = Version(1, 22)  # !TRAIT; required/forbidden conflicts
ERROR_CODES = Version(1, 23)  # "code" in error bodies
MULTIPLE_MEMBER_OF = Version(1, 24)  # member_of repeated, ANDed
GRANULAR_GROUPS = Version(1, 25)  # numbered request groups, group_policy
RESERVED_EQUALS_TOTAL = Version(1, 26)  # an inventory may reserve all
ALL_SUMMARY_INVENTORIES = Version(1, 27)  # summaries list every class
CONSUMER_GENERATION = Version(1, 28)  # consumer generations checked, shown
NESTED_CANDIDATES = Version(1, 29)  # candidates span trees; summary tree uuids
RESHAPER = Version(1, 30)  # POST /reshaper
CANDIDATE_IN_TREE = Version(1, 31)  # in_tree on candidates
FORBIDDEN_AGGREGATES = Version(1, 32)  # !member_of
NAMED_SUFFIXES = Version(1, 33)  # group suffixes beyond numbers
MAPPINGS = Version(1, 34)  # candidates map groups to providers
ROOT_REQUIRED = Version(1, 35)  # root_required on candidates
SAME_SUBTREE = Version(1, 36)  # same_subtree, resourceless groups
REPARENTING = Version(1, 37)  # a provider may change or lose its parent
CONSUMER_TYPES = Version(1, 38)  # consumer_type on allocations and usages
ANY_TRAITS = Version(1, 39)  # required=in:A,B and repeated required

# root_required is parsed with the trait grammar of 1.38 whatever the
# request's version: it never takes "in:" (its error names ANY_TRAITS).
ROOT_REQUIRED_GRAMMAR = CONSUMER_TYPES


class Table:
    """A value that changes with the microversion, written once.

    ``Table((None, a), (versions.X, b))`` answers ``b`` from X on and ``a``
    before; a table without a ``None`` row has no value below its first.
    """

    def __init__(self, *rows: tuple) -> None:
        self._rows = sorted(
            ((first or MIN, value) for first, value in rows),
            key=lambda row: row[0],
            reverse=True,
        )

    def values(self) -> list[Any]:
        """Every value of the table."""
        return [value for _, value in self._rows]

    def __call__(self, version: Version) -> Any:
        for first, value in self._rows:
            if version >= first:
                return value
        raise LookupError(version)

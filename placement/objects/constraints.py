"""Trait and aggregate constraints, as provider searches take them
(``GET /resource_providers``, the allocation candidate engine).

The handlers build them from the query string
(``placement.handlers.query_params``). A constraint is satisfied by a
provider that has at least one member of every ``any_of`` set and no member
of ``forbidden``.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class _AllOfAnyOf:
    """Every any_of set needs a member; no member of forbidden may match."""

    any_of: tuple[frozenset[str], ...] = ()
    forbidden: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.any_of or self.forbidden)


class RequiredTraits(_AllOfAnyOf):
    """Trait names."""

    @property
    def names(self) -> frozenset[str]:
        """Every trait named, required or forbidden."""
        return frozenset().union(*self.any_of, self.forbidden)


class MemberOf(_AllOfAnyOf):
    """Aggregate uuids."""

"""Uuid patterns shared by the query schemas, and the commands' check of
the provider uuids they are given."""

import re
from collections.abc import Iterable

# The canonical dashed form, matched as written: the one a provider list's
# in_tree and a resource provider's path take (an upper-case spelling is
# an unknown uuid).
CANONICAL = (
    "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
# Any UUID-like spelling (dashes optional), as member_of takes aggregates.
LIKE = "[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"

# What a command says of a provider uuid not in the canonical form.
NOT_A_UUID = "%r is not a provider uuid (8-4-4-4-12 hex digits)."


def first_malformed(values: Iterable[str]) -> str | None:
    """The first of ``values`` not in the canonical dashed form, or None."""
    return next((v for v in values if not re.fullmatch(CANONICAL, v)), None)

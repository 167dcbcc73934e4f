"""Uuid patterns shared by the query schemas."""

# The canonical dashed form, matched as written: the one a provider list's
# in_tree and a resource provider's path take (an upper-case spelling is
# an unknown uuid).
CANONICAL = (
    "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
# Any UUID-like spelling (dashes optional), as member_of takes aggregates.
LIKE = "[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"

"""Schemas of GET /maintenance/audit (doc/audit.md): its query and its
answer."""

from placement.schemas.responses import array
from placement.schemas.responses import obj
from placement.schemas.uuids import CANONICAL

QUERY = {
    "type": "object",
    "properties": {
        # Check names (placement.objects.audit.KINDS), comma separated.
        "kind": {"type": "string", "pattern": "^[a-z_]+(,[a-z_]+)*$"},
        # Provider uuids, comma separated (at most audit_obj.IN_TREE), as a
        # provider list's in_tree takes one: only the rows of their trees,
        # for the kinds audit_obj.TREE_KINDS.
        "in_tree": {
            "type": "string",
            "pattern": "^%s(,%s)*$" % (CANONICAL, CANONICAL),
        },
    },
    "additionalProperties": False,
}

# An item's fields differ per kind (doc/audit.md lists them).
AUDIT = obj(
    {
        "problems": {"type": "integer"},
        "checks": array(
            obj(
                {
                    "kind": {"type": "string"},
                    "severity": {"type": "string", "enum": ["error", "info"]},
                    "title": {"type": "string"},
                    "fix": {"type": "string"},
                    "count": {"type": "integer"},
                    "items": array({"type": "object"}),
                }
            )
        ),
    }
)

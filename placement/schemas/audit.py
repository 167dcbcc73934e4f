"""Schemas of GET /maintenance/audit (doc/audit.md): its query and its
answer."""

from placement.schemas.responses import array
from placement.schemas.responses import obj

QUERY = {
    "type": "object",
    "properties": {
        # Check names (placement.objects.audit.KINDS), comma separated.
        "kind": {"type": "string", "pattern": "^[a-z_]+(,[a-z_]+)*$"},
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

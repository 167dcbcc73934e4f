"""Query string and answer of GET /maintenance/drain (doc/drain.md)."""

import typing

from placement.schemas import responses
from placement.schemas.uuids import CANONICAL
from placement.schemas.uuids import LIKE as _UUID

_TEXT = {"type": "string", "minLength": 1}

QUERY: dict[str, typing.Any] = {
    "type": "object",
    "properties": {
        # The drained trees: exactly one of these three.
        "providers": {
            "type": "string",
            "pattern": "^%s(,%s)*$" % (CANONICAL, CANONICAL),
        },
        "in_tree": {"type": "string", "pattern": "^%s$" % CANONICAL},
        "member_of": {"type": "string", "pattern": "^%s$" % _UUID},
        "strategy": {"type": "string", "enum": ["first", "spread", "pack"]},
        # As GET /allocation_candidates' required and member_of (1.39).
        "required": _TEXT,
        "target_member_of": _TEXT,
    },
    "additionalProperties": False,
}
# May repeat, each occurrence counting; the others may not (400): a
# repeated providers= would drain only the last copy's trees.
REPEATED = ("required", "target_member_of")
SELECTORS = ("providers", "in_tree", "member_of")

_S = {"type": "string"}
_NULLABLE = {"type": ["string", "null"]}
_PROVIDER = responses.obj({"uuid": responses._UUID, "name": _NULLABLE})
_CONSUMER = {
    "consumer": _S,
    "consumer_generation": {"type": ["integer", "null"]},
    "project_id": _NULLABLE,
    "user_id": _NULLABLE,
    "consumer_type": _NULLABLE,
    "source": _PROVIDER,
    "query": _S,
}
ANSWER = responses.obj(
    {
        "strategy": _S,
        "drained": responses.array(_PROVIDER),
        "moves": responses.array(
            responses.obj(
                dict(
                    _CONSUMER,
                    target=_PROVIDER,
                    allocations=responses.keyed(
                        responses.obj({"resources": responses.AMOUNTS}), "^%s$" % _UUID
                    ),
                    kept=responses.array(responses._UUID),
                )
            )
        ),
        "unplaced": responses.array(
            responses.obj(
                dict(_CONSUMER, reason=_S, explain={"type": "object"}),
            )
        ),
        "totals": responses.obj(
            {
                "consumers": {"type": "integer"},
                "placed": {"type": "integer"},
                "left": {"type": "integer"},
            }
        ),
        "capacity_left": responses.keyed(
            responses.obj(
                {
                    "capacity": {"type": "integer"},
                    "used": {"type": "integer"},
                    "free": {"type": "integer"},
                }
            )
        ),
    }
)
